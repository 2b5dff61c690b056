// Sparse-attention kernels over cache rows addressed by cell (row of cell c at base + c * stride bytes), one set
// per ISA level, chosen like the other kernels (ops/cpu/dispatch.h). No per-token pointer lists: a kernel reads
// the cells' rows straight from the cache array. F16 rows are widened in registers (exactly).
//
// Invariants every level keeps:
//  - score: each output (query i, key p) depends only on that query and that key (the same bits for any n_q,
//    any n, any slicing into calls, either key layout), so a prompt chunk scores exactly as token-by-token
//    decoding; and every level gives the scalar twin's bits (each dot's products rounded and added in index
//    order, no fused multiply-add, the relu'd heads added in order), so the selection never depends on the ISA;
//  - attend: each query's output depends only on that query, the rows and their order (the same bits for any
//    n_q and any grouping of queries into calls), so results never depend on threads or batches;
//  - the Scalar set is the plain twin the tests compare the others with.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

struct AttnRowKernels {
    // Indexer scores of n_q queries against n pooled keys: query i has n_heads heads of dim floats at
    // q + i * q_stride (head h at + h * dim); key p is dim elements (f32 or f16) at base + rows[p] * stride
    // (rows null: at base + p * stride, keys in order, read as a stream).
    //   out[i * out_stride + p] = sum over h in order of relu(q_ih . key_p)
    void (*score_f32)(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                      size_t stride, const uint32_t * rows, size_t n, float * out, size_t out_stride) = nullptr;
    void (*score_f16)(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                      size_t stride, const uint32_t * rows, size_t n, float * out, size_t out_stride) = nullptr;
    // The same scores (the same bits) over keys in element-major blocks of kScoreBlock pools (memory::PoolKeyTable):
    // pool p's element e at base + ((p / kScoreBlock) * dim * kScoreBlock + e * kScoreBlock + p % kScoreBlock) *
    // element bytes, pools 0..n (the lanes of a last partial block past n are read, never stored).
    void (*score_blocked_f32)(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim,
                              const uint8_t * base, size_t n, float * out, size_t out_stride) = nullptr;
    void (*score_blocked_f16)(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim,
                              const uint8_t * base, size_t n, float * out, size_t out_stride) = nullptr;
    // Softmax attention of n_q queries (dim floats at q + i * q_stride) over the rows of `cells`, in order:
    // K_j = dim elements at k_base + cells[j] * k_stride, V_j likewise; both f32 or both f16.
    //   out_i = sum_j p_ij V_j,  p_i = softmax_j(scale * q_i . K_j)
    // by an online softmax over blocks of kAttnBlock rows (block maximum, rescale, exp weights). dim <= 512.
    // With n == 0 the outputs are zero.
    void (*attend_f32)(const float * q, size_t n_q, size_t q_stride, size_t dim, const uint8_t * k_base,
                       size_t k_stride, const uint8_t * v_base, size_t v_stride, const uint32_t * cells, size_t n,
                       float scale, float * out, size_t out_stride) = nullptr;
    void (*attend_f16)(const float * q, size_t n_q, size_t q_stride, size_t dim, const uint8_t * k_base,
                       size_t k_stride, const uint8_t * v_base, size_t v_stride, const uint32_t * cells, size_t n,
                       float scale, float * out, size_t out_stride) = nullptr;
};

inline constexpr size_t kAttnBlock = 32;     // rows per online-softmax block
inline constexpr size_t kAttnMaxQueries = 16;  // queries one attend call keeps in flight (larger n_q loops)
inline constexpr size_t kAttnMaxDim = 512;
inline constexpr size_t kScoreBlock = 16;  // pools per element-major block (memory::kPoolKeyBlock)

// The set of a level (built from the list of levels, ops/cpu/levels.h; a level this build lacks gives the
// Scalar set).
const AttnRowKernels & attn_row_kernels(Isa isa);
const AttnRowKernels & attn_row_kernels();  // at active_isa()

// Level sets (ISA files; a level without an entry keeps its base level's).
void add_attn_row_kernels_scalar(AttnRowKernels & k);
void add_attn_row_kernels_avx2(AttnRowKernels & k);
void add_attn_row_kernels_avx512(AttnRowKernels & k);
#if defined(__aarch64__)
void add_attn_row_kernels_neon(AttnRowKernels & k);
#endif

}  // namespace offgrid::ops::cpu
