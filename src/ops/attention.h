// Softmax attention of one query head over a gathered list of cache rows (dense or sparse alike: the caller
// decides which rows). Rows are F32 or F16; the head's slice starts at element `offset` of each row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tensor/types.h"

namespace offgrid::ops {

struct CacheRows {
    std::span<const void * const> rows;   // one pointer per attended cell, in summation order
    tensor::ElemType type = tensor::ElemType::F32;  // F32 or F16
};

// out[d] = sum_j p_j V_j[offset + d], p = softmax_j(scale * q . K_j[offset ..]), by an online softmax over blocks
// of rows with the dot products and V updates of ops/cpu/vec.h (F16 rows widened in registers). The result
// depends only on the rows, their order and the ISA level. scratch is unused (kept for callers). With no rows,
// out is zero.
void attend_head(const float * q, size_t head_dim, const CacheRows & k, const CacheRows & v, size_t offset,
                 float scale, float * scratch, float * out);

// A block of queries over the same rows (the heads of one KV group, or tokens that see the same cells): query i
// at q + i * q_stride, its output at out + i * out_stride. Each output is bit-identical to attend_head's for
// that query; the rows are read once per block of rows for all queries.
void attend_heads(const float * q, size_t n_queries, size_t q_stride, size_t head_dim, const CacheRows & k,
                  const CacheRows & v, size_t offset, float scale, float * out, size_t out_stride);

// Plain twin: converts every row to float first and uses double-free straightforward loops.
void attend_head_ref(const float * q, size_t head_dim, const CacheRows & k, const CacheRows & v, size_t offset,
                     float scale, float * out);

// QSA indexer scores: out[p] = sum over heads h (in order) of relu(q_h . key_p). keys[p] points at pool p's pooled
// key (dim elements of F32 or F16); q holds n_heads * dim floats. The dot products are the SIMD ones of
// ops/cpu/vec.h (a fixed order per ISA level), so a pool's score never depends on the other pools.
void score_pools(const float * q, size_t n_heads, size_t dim, std::span<const void * const> keys,
                 tensor::ElemType type, float * out);
// Plain twin: one pool at a time, each dot product summed in index order.
void score_pools_ref(const float * q, size_t n_heads, size_t dim, std::span<const void * const> keys,
                     tensor::ElemType type, float * out);

// A layer's cache rows as one array (memory::RowTable with its element type): the row of cell c starts at
// base + c * stride bytes; base may already point at a head's slice within the row.
struct CacheTable {
    const uint8_t * base = nullptr;
    size_t stride = 0;
    tensor::ElemType type = tensor::ElemType::F32;
};

// QSA indexer scores of n_q queries against the pooled keys in rows rows[0..n) of `keys` (F32 or F16; rows null:
// rows 0..n, keys stored one after the other), by the
// attn_rows kernels of the active ISA level (ops/cpu/attn_rows.h): out[i * out_stride + p] = sum over heads h in
// order of relu(q_ih . key_p), query i at q + i * q_stride with heads of dim floats. A value depends only on its
// query and key: a block of queries scores exactly as one query at a time.
void score_pool_rows(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const CacheTable & keys,
                     const uint32_t * rows, size_t n, float * out, size_t out_stride);

// The same scores over keys in element-major blocks of 16 pools (memory::PoolKeyTable's layout: pool p's element e
// at base + ((p / 16) * dim * 16 + e * 16 + p % 16) * element bytes), pools 0..n; F32 or F16. The same bits as
// score_pool_rows of the same keys. To score pools from p0 on, pass the block of p0 (p0 a multiple of 16).
void score_pool_blocks(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                       tensor::ElemType type, size_t n, float * out, size_t out_stride);

// Whether attend_rows takes these cache types and head size: both F32 or both F16 (Q8_0 goes through
// widen_cache_rows), heads of at most 512. score_pool_rows throws offgrid::Error for heads wider than 512.
bool attend_rows_supported(tensor::ElemType type_k, tensor::ElemType type_v, size_t head_dim);

// Softmax attention of n_q queries (head_dim floats at q + i * q_stride) over the rows of `cells` in order, K
// and V read by cell from their tables (online softmax, F16 widened in registers; ops/cpu/attn_rows.h). Each
// output depends only on its query, the rows and their order. Requires attend_rows_supported.
void attend_rows(const float * q, size_t n_q, size_t q_stride, size_t head_dim, const CacheTable & k,
                 const CacheTable & v, std::span<const uint32_t> cells, float scale, float * out, size_t out_stride);

// Reads element i of a cache row of type F32 or F16.
float cache_element(const void * row, tensor::ElemType type, size_t i);
// Writes n floats into a cache row of type F32 or F16 (rounded to nearest even for F16), or Q8_0 (n a multiple
// of 32, tensor::quantize_row's encoding).
void store_cache_row(void * row, tensor::ElemType type, const float * x, size_t n);
// Reads n floats from a cache row (F32, F16 or Q8_0).
void load_cache_row(const void * row, tensor::ElemType type, float * x, size_t n);

}  // namespace offgrid::ops
