// The float and Q8_0 kernels (F32, F16, BF16 and Q8_0 weights with f32 activations), one function per ISA
// level that fills its entries of a type table; and the int8 variant of Q8_0 (Q8_0 activations, integer dots),
// kept outside the table (see q8_0_int8_kernels in dispatch.h). Each level's file is compiled with that level's flags
// (kernels_float_avx2.cpp, kernels_float_avx512.cpp) and only reached when active_isa() allows it.
#pragma once

#include <vector>

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

void add_float_kernels_scalar(TypeKernels * table);
void add_float_kernels_avx2(TypeKernels * table);    // no-op when the compiler cannot target AVX2
void add_float_kernels_avx512(TypeKernels * table);  // no-op when the compiler cannot target AVX-512
#if defined(__aarch64__)
void add_float_kernels_neon(TypeKernels * table);  // kernels_float_neon.cpp
#endif

// Q8_0 activation row: per block of 32, d = max|x| / 127 (stored as f16) and q = x * (127 / max|x|) rounded
// to nearest, ties to even (quants computed from the unrounded maximum, as ggml's x86 path does). n is a multiple of 32. Every level's
// version gives the same bytes as this one.
void quantize_row_q8_0(const float * x, void * dst, int64_t n);

// The int8 variant at each level (each level starts from the lower one's entry).
void add_q8_0_int8_kernels_scalar(TypeKernels & k);
void add_q8_0_int8_kernels_avx2(TypeKernels & k);
void add_q8_0_int8_kernels_avx512(TypeKernels & k);
#if defined(__aarch64__)
void add_q8_0_int8_kernels_neondot(TypeKernels & k);  // kernels_q8_0_neondot.cpp (SDOT)
#endif

// Tile shapes of the F32 entry at one level, for bench_float_tiles (an A/B of the shapes in one process):
// every variant is bit-identical to the level's vec_dot; empty when the compiler cannot target the level.
struct FloatTileVariant {
    const char * name;
    void (*dot_tile)(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                     int n_tok, float * y, size_t y_stride);
    int tile_tokens;
};
std::vector<FloatTileVariant> f32_tile_variants_avx512();
std::vector<FloatTileVariant> f32_tile_variants_avx2();

}  // namespace offgrid::ops::cpu
