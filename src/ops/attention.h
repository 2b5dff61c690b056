// Softmax attention of one query head over a gathered list of cache rows (dense or sparse alike: the caller
// decides which rows). Rows are F32 or F16; the head's slice starts at element `offset` of each row.
#pragma once

#include <cstddef>
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

// Reads element i of a cache row of type F32 or F16.
float cache_element(const void * row, tensor::ElemType type, size_t i);
// Writes n floats into a cache row of type F32 or F16 (rounded to nearest even for F16), or Q8_0 (n a multiple
// of 32, tensor::quantize_row's encoding).
void store_cache_row(void * row, tensor::ElemType type, const float * x, size_t n);
// Reads n floats from a cache row (F32, F16 or Q8_0).
void load_cache_row(const void * row, tensor::ElemType type, float * x, size_t n);

}  // namespace offgrid::ops
