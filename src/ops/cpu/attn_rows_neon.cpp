// NEON primitives of the attn_rows kernels (aarch64 only).
//  - Scores: one pool per lane, 4 pools at a time. Lane k runs pool k's dots as the Scalar twin does (each
//    product rounded, added in index order; relu'd heads added in order), so every score has the twin's bits
//    (the tree is compiled without contraction on aarch64). The 4 keys are turned element-major into an L1
//    tile (widened exactly), or read as they are from element-major blocks.
//  - Attention (attend): the dots as the avx2 level orders them (two 8-lane fused accumulators, the tail in
//    order after the horizontal sum); the weighted V rows as the twin's running sums, 4 outputs per vector, each
//    product rounded before its addition (the twin's bits per output); scale and widening exact.
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "ops/cpu/attn_rows.h"
#include "ops/cpu/attn_rows_impl.h"
#include "ops/half.h"

namespace offgrid::ops::cpu {

namespace {

struct Neon {
    static float dot(const float * a, const float * b, size_t n) {
        float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
        size_t i = 0;
        for (; i + 16 <= n; i += 16) {
            for (int v = 0; v < 4; ++v) acc[v] = vfmaq_f32(acc[v], vld1q_f32(a + i + 4 * v), vld1q_f32(b + i + 4 * v));
        }
        if (i + 8 <= n) {
            for (int v = 0; v < 2; ++v) acc[v] = vfmaq_f32(acc[v], vld1q_f32(a + i + 4 * v), vld1q_f32(b + i + 4 * v));
            i += 8;
        }
        // acc0 + acc1 as 8 lanes (lo = acc[0] + acc[2], hi = acc[1] + acc[3]), then the fixed horizontal sum.
        const float32x4_t s4 = vaddq_f32(vaddq_f32(acc[0], acc[2]), vaddq_f32(acc[1], acc[3]));
        const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
        float s = vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
        for (; i < n; ++i) s += a[i] * b[i];
        return s;
    }
    static void dots(const float * q, size_t q_stride, size_t m, const float * key, size_t dim, float * out) {
        for (size_t i = 0; i < m; ++i) out[i] = dot(q + i * q_stride, key, dim);
    }
    static void dots_pair(const float * q, size_t q_stride, size_t m, const float * k0, const float * k1, size_t dim,
                          float * o0, float * o1) {
        dots(q, q_stride, m, k0, dim, o0);
        dots(q, q_stride, m, k1, dim, o1);
    }
    static void exp_shift(float * s, size_t n, float mx) {
        for (size_t j = 0; j < n; ++j) s[j] = std::exp(s[j] - mx);
    }
    template <bool F16>
    static float32x4_t load4(const uint8_t * row, size_t d) {
        if constexpr (F16) {
            return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t *>(row) + d)));
        } else {
            return vld1q_f32(reinterpret_cast<const float *>(row) + d);
        }
    }
    template <bool F16>
    static void accumulate(const float * w, size_t ws, size_t m, const uint8_t * vb, size_t vs, const uint32_t * cells,
                           size_t nb, float * out, size_t os, size_t dim) {
        for (size_t i = 0; i < m; ++i) {
            float * o = out + i * os;
            const float * wi = w + i * ws;
            size_t d = 0;
            for (; d + 4 <= dim; d += 4) {
                float32x4_t acc = vld1q_f32(o + d);
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    acc = vaddq_f32(acc, vmulq_n_f32(load4<F16>(row, d), wi[j]));
                }
                vst1q_f32(o + d, acc);
            }
            for (; d < dim; ++d) {
                float acc = o[d];
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    const float v = F16 ? half_to_float(reinterpret_cast<const uint16_t *>(row)[d])
                                        : reinterpret_cast<const float *>(row)[d];
                    acc += wi[j] * v;
                }
                o[d] = acc;
            }
        }
    }
    static void scale(float a, float * y, size_t n) {
        size_t i = 0;
        for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), a));
        for (; i < n; ++i) y[i] *= a;
    }
    static void widen_f16(const uint16_t * x, float * y, size_t n) {
        size_t i = 0;
        for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
        for (; i < n; ++i) y[i] = half_to_float(x[i]);
    }
    static void prefetch(const uint8_t * p, size_t bytes) {
        for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
    }
};

constexpr size_t kLanes = 4;

// Every query and head against 4 element-major keys (element e of key k at tile[e * row + k], f32 or f16);
// the first nk lanes stored.
template <bool F16>
void score_group(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * tile,
                 size_t row, size_t nk, float * out, size_t out_stride) {
    for (size_t i = 0; i < n_q; ++i) {
        float32x4_t s = vdupq_n_f32(0.0f);
        for (size_t h = 0; h < n_heads; ++h) {
            const float * qh = q + i * q_stride + h * dim;
            float32x4_t acc = vdupq_n_f32(0.0f);
            for (size_t e = 0; e < dim; ++e) acc = vaddq_f32(acc, vmulq_n_f32(Neon::load4<F16>(tile, e * row), qh[e]));
            s = vaddq_f32(s, vmaxq_f32(acc, vdupq_n_f32(0.0f)));
        }
        float v[kLanes];
        vst1q_f32(v, s);
        std::memcpy(out + i * out_stride, v, nk * sizeof(float));
    }
}

template <bool F16>
void score_lanes(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                 size_t stride, const uint32_t * rows, size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    auto row = [&](size_t p) { return base + (rows ? static_cast<size_t>(rows[p]) : p) * stride; };
    alignas(16) float tile[kAttnMaxDim * kLanes];
    alignas(16) float key[kAttnMaxDim];
    for (size_t p = 0; p < n; p += kLanes) {
        const size_t nk = std::min(kLanes, n - p);
        for (size_t k = 0; k < kLanes; ++k) {
            if (k < nk) {
                const float * kv = attn_impl::widened<Neon, F16>(row(p + k), key, dim);
                for (size_t e = 0; e < dim; ++e) tile[e * kLanes + k] = kv[e];
            } else {
                for (size_t e = 0; e < dim; ++e) tile[e * kLanes + k] = 0.0f;
            }
        }
        score_group<false>(q, n_q, q_stride, n_heads, dim, reinterpret_cast<const uint8_t *>(tile), kLanes, nk, out + p,
                           out_stride);
    }
}

// Blocks of kScoreBlock (16) pools, 4 lanes at a time, read in place.
template <bool F16>
void score_blocked(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                   size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    const size_t es = F16 ? 2 : 4, block = kScoreBlock * dim * es;
    for (size_t p = 0; p < n; p += kLanes) {
        const uint8_t * lanes = base + (p / kScoreBlock) * block + (p % kScoreBlock) * es;
        score_group<F16>(q, n_q, q_stride, n_heads, dim, lanes, kScoreBlock, std::min(kLanes, n - p), out + p,
                         out_stride);
    }
}

}  // namespace

void add_attn_row_kernels_neon(AttnRowKernels & k) {
    attn_impl::fill<Neon>(k);
    k.score_f32 = score_lanes<false>;
    k.score_f16 = score_lanes<true>;
    k.score_blocked_f32 = score_blocked<false>;
    k.score_blocked_f16 = score_blocked<true>;
}

}  // namespace offgrid::ops::cpu
