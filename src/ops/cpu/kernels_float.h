// The float and Q8_0 kernels (F32, F16, BF16 with f32 activations; Q8_0 weights), one function per ISA level
// that fills its entries of a type table. Each level's file is compiled with that level's flags
// (kernels_float_avx2.cpp, kernels_float_avx512.cpp) and only reached when active_isa() allows it.
#pragma once

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

void add_float_kernels_scalar(TypeKernels * table);
void add_float_kernels_avx2(TypeKernels * table);    // no-op when the compiler cannot target AVX2
void add_float_kernels_avx512(TypeKernels * table);  // no-op when the compiler cannot target AVX-512

}  // namespace offgrid::ops::cpu
