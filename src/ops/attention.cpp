#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "ops/cpu/attn_rows.h"
#include "ops/cpu/vec.h"
#include "ops/elementwise.h"
#include "ops/half.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace offgrid::ops {

namespace {

using tensor::ElemType;

void check_cache_type(ElemType type) {
    if (type != ElemType::F32 && type != ElemType::F16) {
        throw Error("cache row type " + std::to_string(static_cast<uint32_t>(type)) + " is not f32 or f16");
    }
}

const cpu::VecKernels & vk() { return cpu::vec_kernels(); }

float dot_cache(const float * q, const void * row, ElemType type, size_t offset, size_t n) {
    if (type == ElemType::F32) return vk().dot_f32(q, static_cast<const float *>(row) + offset, n);
    return vk().dot_f16(q, static_cast<const uint16_t *>(row) + offset, n);
}

void axpy_cache(float a, const void * row, ElemType type, size_t offset, size_t n, float * out) {
    if (type == ElemType::F32) {
        vk().axpy_f32(a, static_cast<const float *>(row) + offset, out, n);
    } else {
        vk().axpy_f16(a, static_cast<const uint16_t *>(row) + offset, out, n);
    }
}

// Online softmax over blocks of kKeyBlock rows: per block the scores, the running maximum (the accumulated sum
// and output rescaled when it grows), then exp(score - max) weights and the weighted V rows, rows in order.
// One query's state; attend_heads runs several over the same rows with the same arithmetic.
constexpr size_t kKeyBlock = 32;
constexpr size_t kQueryBlock = 16;

struct OnlineSoftmax {
    float max = -INFINITY;
    float sum = 0.0f;
};

void attend_block(const float * q, size_t head_dim, const CacheRows & k, const CacheRows & v, size_t offset,
                  float scale, size_t j0, size_t j1, OnlineSoftmax & st, float * acc) {
    float s[kKeyBlock];
    float block_max = -INFINITY;
    for (size_t j = j0; j < j1; ++j) {
        s[j - j0] = scale * dot_cache(q, k.rows[j], k.type, offset, head_dim);
        block_max = std::max(block_max, s[j - j0]);
    }
    if (block_max > st.max) {
        if (st.sum != 0.0f) {
            const float f = std::exp(st.max - block_max);
            st.sum *= f;
            vk().scale(f, acc, head_dim);
        }
        st.max = block_max;
    }
    for (size_t j = j0; j < j1; ++j) {
        const float w = std::exp(s[j - j0] - st.max);
        st.sum += w;
        axpy_cache(w, v.rows[j], v.type, offset, head_dim, acc);
    }
}

}  // namespace

float cache_element(const void * row, ElemType type, size_t i) {
    if (type == ElemType::F32) return static_cast<const float *>(row)[i];
    return half_to_float(static_cast<const uint16_t *>(row)[i]);
}

void store_cache_row(void * row, ElemType type, const float * x, size_t n) {
    if (type == ElemType::Q8_0) return tensor::quantize_row(type, x, row, n);  // ops/cache_rows.h
    check_cache_type(type);
    if (type == ElemType::F32) {
        std::copy(x, x + n, static_cast<float *>(row));
    } else {
        uint16_t * r = static_cast<uint16_t *>(row);
        for (size_t i = 0; i < n; ++i) r[i] = float_to_half(x[i]);
    }
}

void load_cache_row(const void * row, ElemType type, float * x, size_t n) {
    if (type == ElemType::Q8_0) return tensor::dequantize_row(type, row, x, n);
    check_cache_type(type);
    for (size_t i = 0; i < n; ++i) x[i] = cache_element(row, type, i);
}

void score_pools(const float * q, size_t n_heads, size_t dim, std::span<const void * const> keys, ElemType type,
                 float * out) {
    check_cache_type(type);
    for (size_t p = 0; p < keys.size(); ++p) {
        float s = 0.0f;
        for (size_t hd = 0; hd < n_heads; ++hd) s += relu(dot_cache(q + hd * dim, keys[p], type, 0, dim));
        out[p] = s;
    }
}

void score_pools_ref(const float * q, size_t n_heads, size_t dim, std::span<const void * const> keys, ElemType type,
                     float * out) {
    check_cache_type(type);
    std::vector<float> key(dim);
    for (size_t p = 0; p < keys.size(); ++p) {
        load_cache_row(keys[p], type, key.data(), dim);
        float s = 0.0f;
        for (size_t hd = 0; hd < n_heads; ++hd) {
            float d = 0.0f;
            for (size_t i = 0; i < dim; ++i) d += q[hd * dim + i] * key[i];
            s += relu(d);
        }
        out[p] = s;
    }
}

void score_pool_rows(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const CacheTable & keys,
                     const uint32_t * rows, size_t n, float * out, size_t out_stride) {
    check_cache_type(keys.type);
    if (dim > cpu::kAttnMaxDim) throw Error("score_pool_rows: indexer head of " + std::to_string(dim) + " is wider than 512");
    const cpu::AttnRowKernels & k = cpu::attn_row_kernels();
    (keys.type == ElemType::F32 ? k.score_f32 : k.score_f16)(q, n_q, q_stride, n_heads, dim, keys.base, keys.stride, rows,
                                                             n, out, out_stride);
}

void score_pool_blocks(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                       ElemType type, size_t n, float * out, size_t out_stride) {
    check_cache_type(type);
    if (dim > cpu::kAttnMaxDim) throw Error("score_pool_blocks: indexer head of " + std::to_string(dim) + " is wider than 512");
    const cpu::AttnRowKernels & k = cpu::attn_row_kernels();
    (type == ElemType::F32 ? k.score_blocked_f32 : k.score_blocked_f16)(q, n_q, q_stride, n_heads, dim, base, n, out,
                                                                        out_stride);
}

bool attend_rows_supported(ElemType type_k, ElemType type_v, size_t head_dim) {
    return type_k == type_v && (type_k == ElemType::F32 || type_k == ElemType::F16) && head_dim <= cpu::kAttnMaxDim;
}

void attend_rows(const float * q, size_t n_q, size_t q_stride, size_t head_dim, const CacheTable & k,
                 const CacheTable & v, std::span<const uint32_t> cells, float scale, float * out, size_t out_stride) {
    if (!attend_rows_supported(k.type, v.type, head_dim)) {
        throw Error("attend_rows: K and V must both be f32 or both f16, heads at most 512 wide");
    }
    const cpu::AttnRowKernels & kk = cpu::attn_row_kernels();
    (k.type == ElemType::F32 ? kk.attend_f32 : kk.attend_f16)(q, n_q, q_stride, head_dim, k.base, k.stride, v.base,
                                                              v.stride, cells.data(), cells.size(), scale, out,
                                                              out_stride);
}

void attend_head(const float * q, size_t head_dim, const CacheRows & k, const CacheRows & v, size_t offset,
                 float scale, float * /*scratch*/, float * out) {
    attend_heads(q, 1, head_dim, head_dim, k, v, offset, scale, out, head_dim);
}

void attend_heads(const float * q, size_t n_queries, size_t q_stride, size_t head_dim, const CacheRows & k,
                  const CacheRows & v, size_t offset, float scale, float * out, size_t out_stride) {
    check_cache_type(k.type);
    check_cache_type(v.type);
    const size_t n = k.rows.size();
    for (size_t i = 0; i < n_queries; ++i) std::fill(out + i * out_stride, out + i * out_stride + head_dim, 0.0f);
    if (n == 0) return;
    for (size_t i0 = 0; i0 < n_queries; i0 += kQueryBlock) {
        const size_t i1 = std::min(n_queries, i0 + kQueryBlock);
        OnlineSoftmax st[kQueryBlock];
        // Key blocks outer, queries inner: a block of K and V rows is read from memory once for all queries.
        for (size_t j0 = 0; j0 < n; j0 += kKeyBlock) {
            const size_t j1 = std::min(n, j0 + kKeyBlock);
            for (size_t i = i0; i < i1; ++i) {
                attend_block(q + i * q_stride, head_dim, k, v, offset, scale, j0, j1, st[i - i0], out + i * out_stride);
            }
        }
        for (size_t i = i0; i < i1; ++i) vk().scale(1.0f / st[i - i0].sum, out + i * out_stride, head_dim);
    }
}

void attend_head_ref(const float * q, size_t head_dim, const CacheRows & k, const CacheRows & v, size_t offset,
                     float scale, float * out) {
    const size_t n = k.rows.size();
    std::vector<float> p(n);
    for (size_t j = 0; j < n; ++j) {
        float s = 0.0f;
        for (size_t d = 0; d < head_dim; ++d) s += q[d] * cache_element(k.rows[j], k.type, offset + d);
        p[j] = scale * s;
    }
    float mx = -INFINITY;
    for (float x : p) mx = std::max(mx, x);
    float sum = 0.0f;
    for (float & x : p) {
        x = std::exp(x - mx);
        sum += x;
    }
    for (size_t d = 0; d < head_dim; ++d) {
        float acc = 0.0f;
        for (size_t j = 0; j < n; ++j) acc += (p[j] / sum) * cache_element(v.rows[j], v.type, offset + d);
        out[d] = acc;
    }
}

}  // namespace offgrid::ops
