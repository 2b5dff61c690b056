// Prompt products of F32 weights (9 tokens and more): one call computes a block of rows by all tokens, with its
// own register and cache blocking (TypeKernels::gemm). Each level's file is compiled with that level's flags
// (gemm_float_avx512.cpp) and only reached when active_isa() allows it.
//
// Invariant: every output y[t * y_stride + r] has exactly the bits of the level's vec_dot(row r, token t): one
// 16-lane accumulator per (row, token), lane j summing the elements i = j (mod 16) in index order, the zero-padded
// masked tail last, then the level's fixed horizontal sum (ops/cpu/hsum_avx512.h). Blocking changes where the
// accumulators live between column chunks (registers or a parking buffer), never the order of their additions, so
// a result never depends on the thread count, the row range of a call or the other tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

void add_gemm_kernels_avx512(TypeKernels * table);  // no-op when the compiler cannot target AVX-512

// Blockings of the AVX-512 F32 gemm, for bench_gemm (an A/B of the variants in one process) and the tests: every
// variant is bit-identical to the level's vec_dot; empty when the compiler cannot target the level.
struct GemmVariant {
    const char * name;
    void (*gemm)(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows,
                 int64_t n_tok, float * y, size_t y_stride, uint64_t act_key);
};
std::vector<GemmVariant> f32_gemm_variants_avx512();

}  // namespace offgrid::ops::cpu
