#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "ops/elementwise.h"
#include "ops/half.h"

namespace offgrid::ops {

namespace {

using tensor::ElemType;

void check_cache_type(ElemType type) {
    if (type != ElemType::F32 && type != ElemType::F16) {
        throw Error("cache row type " + std::to_string(static_cast<uint32_t>(type)) + " is not f32 or f16");
    }
}

float dot_cache(const float * q, const void * row, ElemType type, size_t offset, size_t n) {
    float s = 0.0f;
    if (type == ElemType::F32) {
        const float * r = static_cast<const float *>(row) + offset;
        for (size_t i = 0; i < n; ++i) s += q[i] * r[i];
    } else {
        const uint16_t * r = static_cast<const uint16_t *>(row) + offset;
        for (size_t i = 0; i < n; ++i) s += q[i] * half_to_float(r[i]);
    }
    return s;
}

void axpy_cache(float a, const void * row, ElemType type, size_t offset, size_t n, float * out) {
    if (type == ElemType::F32) {
        const float * r = static_cast<const float *>(row) + offset;
        for (size_t i = 0; i < n; ++i) out[i] += a * r[i];
    } else {
        const uint16_t * r = static_cast<const uint16_t *>(row) + offset;
        for (size_t i = 0; i < n; ++i) out[i] += a * half_to_float(r[i]);
    }
}

}  // namespace

float cache_element(const void * row, ElemType type, size_t i) {
    if (type == ElemType::F32) return static_cast<const float *>(row)[i];
    return half_to_float(static_cast<const uint16_t *>(row)[i]);
}

void store_cache_row(void * row, ElemType type, const float * x, size_t n) {
    check_cache_type(type);
    if (type == ElemType::F32) {
        std::copy(x, x + n, static_cast<float *>(row));
    } else {
        uint16_t * r = static_cast<uint16_t *>(row);
        for (size_t i = 0; i < n; ++i) r[i] = float_to_half(x[i]);
    }
}

void load_cache_row(const void * row, ElemType type, float * x, size_t n) {
    check_cache_type(type);
    for (size_t i = 0; i < n; ++i) x[i] = cache_element(row, type, i);
}

void score_pools(const float * q, size_t n_heads, size_t dim, std::span<const void * const> keys, ElemType type,
                 float * out) {
    check_cache_type(type);
    // Four pools at a time: their sums are independent chains, so the core overlaps them, while each pool's own
    // sum keeps the plain order. F16 keys are widened once into a small buffer per block.
    constexpr size_t kBlock = 4;
    std::vector<float> wide(kBlock * dim);
    const size_t n = keys.size();
    size_t p = 0;
    for (; p + kBlock <= n; p += kBlock) {
        const float * k[kBlock];
        for (size_t b = 0; b < kBlock; ++b) {
            if (type == ElemType::F32) {
                k[b] = static_cast<const float *>(keys[p + b]);
            } else {
                const auto * h = static_cast<const uint16_t *>(keys[p + b]);
                float * w = &wide[b * dim];
                for (size_t i = 0; i < dim; ++i) w[i] = half_to_float(h[i]);
                k[b] = w;
            }
        }
        float s[kBlock] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (size_t hd = 0; hd < n_heads; ++hd) {
            const float * qh = q + hd * dim;
            float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
            for (size_t i = 0; i < dim; ++i) {
                d0 += qh[i] * k[0][i];
                d1 += qh[i] * k[1][i];
                d2 += qh[i] * k[2][i];
                d3 += qh[i] * k[3][i];
            }
            s[0] += relu(d0);
            s[1] += relu(d1);
            s[2] += relu(d2);
            s[3] += relu(d3);
        }
        for (size_t b = 0; b < kBlock; ++b) out[p + b] = s[b];
    }
    if (p < n) score_pools_ref(q, n_heads, dim, keys.subspan(p), type, out + p);
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

void attend_head(const float * q, size_t head_dim, const CacheRows & k, const CacheRows & v, size_t offset,
                 float scale, float * scratch, float * out) {
    check_cache_type(k.type);
    check_cache_type(v.type);
    const size_t n = k.rows.size();
    std::fill(out, out + head_dim, 0.0f);
    if (n == 0) return;
    for (size_t j = 0; j < n; ++j) scratch[j] = scale * dot_cache(q, k.rows[j], k.type, offset, head_dim);
    softmax(scratch, n);
    for (size_t j = 0; j < n; ++j) axpy_cache(scratch[j], v.rows[j], v.type, offset, head_dim, out);
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
