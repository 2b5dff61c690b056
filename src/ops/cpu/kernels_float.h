// The float and Q8_0 kernels (F32, F16, BF16 with f32 activations; Q8_0 weights), one function per ISA level
// that fills its entries of a type table. Each level's file is compiled with that level's flags
// (kernels_float_avx2.cpp, kernels_float_avx512.cpp) and only reached when active_isa() allows it.
#pragma once

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

void add_float_kernels_scalar(TypeKernels * table);
void add_float_kernels_avx2(TypeKernels * table);    // no-op when the compiler cannot target AVX2
void add_float_kernels_avx512(TypeKernels * table);  // no-op when the compiler cannot target AVX-512

// Q8_0 activation row: per block of 32, d = max|x| / 127 (stored as f16) and q = x / d rounded to nearest,
// ties to even (quants computed with the unrounded d, as ggml does). n is a multiple of 32. Every level's
// version gives the same bytes as this one.
void quantize_row_q8_0(const float * x, void * dst, int64_t n);

}  // namespace offgrid::ops::cpu
