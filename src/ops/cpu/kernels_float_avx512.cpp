// avx512 float and Q8_0 kernels (compiled with the avx512 flags; reached only when active_isa() allows it).
#include "ops/cpu/kernels_float.h"

namespace offgrid::ops::cpu {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)

void add_float_kernels_avx512(TypeKernels * /*table*/) {}

#else

void add_float_kernels_avx512(TypeKernels * /*table*/) {}

#endif

}  // namespace offgrid::ops::cpu
