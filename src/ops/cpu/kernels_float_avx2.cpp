// avx2 float and Q8_0 kernels (compiled with the avx2 flags; reached only when active_isa() allows it).
#include "ops/cpu/kernels_float.h"

namespace offgrid::ops::cpu {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

void add_float_kernels_avx2(TypeKernels * /*table*/) {}

#else

void add_float_kernels_avx2(TypeKernels * /*table*/) {}

#endif

}  // namespace offgrid::ops::cpu
