// Scalar twins of the attn_rows kernels (plain loops in index order, each F16 element converted on its own).
#include "ops/cpu/attn_rows.h"

#include "ops/cpu/attn_rows_impl.h"
#include "ops/half.h"

#include <cmath>
#include <stdexcept>

namespace offgrid::ops::cpu {

namespace {

struct Plain {
    static float dot(const float * a, const float * b, size_t n) {
        float s = 0.0f;
        for (size_t i = 0; i < n; ++i) {
            float p = a[i] * b[i];
            // Two roundings per product (the SIMD levels' scores reproduce them bit for bit), also when the tree is
            // built for a host with fma (-march=native contracts a * b + c by default): the empty asm keeps them apart.
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
            __asm__("" : "+x"(p));
#endif
            s += p;
        }
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
    static void axpy(float a, const float * x, float * y, size_t n) {
        for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
    }
    template <bool F16>
    static void accumulate(const float * w, size_t ws, size_t m, const uint8_t * vb, size_t vs, const uint32_t * cells,
                           size_t nb, float * out, size_t os, size_t dim) {
        for (size_t i = 0; i < m; ++i) {
            for (size_t d = 0; d < dim; ++d) {
                float acc = out[i * os + d];
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    const float v = F16 ? half_to_float(reinterpret_cast<const uint16_t *>(row)[d])
                                        : reinterpret_cast<const float *>(row)[d];
                    acc += w[i * ws + j] * v;
                }
                out[i * os + d] = acc;
            }
        }
    }
    static void scale(float a, float * y, size_t n) {
        for (size_t i = 0; i < n; ++i) y[i] *= a;
    }
    static void widen_f16(const uint16_t * x, float * y, size_t n) {
        for (size_t i = 0; i < n; ++i) y[i] = half_to_float(x[i]);
    }
    static void prefetch(const uint8_t *, size_t) {}
};

// The blocked twin: each key gathered (and widened, exactly) on its own, then scored as one f32 key in a row.
template <bool F16>
void score_blocked(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                   size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    const size_t es = F16 ? 2 : 4;
    float key[kAttnMaxDim];
    for (size_t p = 0; p < n; ++p) {
        const uint8_t * blk = base + (p / kScoreBlock) * kScoreBlock * dim * es;
        for (size_t e = 0; e < dim; ++e) {
            const uint8_t * x = blk + (e * kScoreBlock + p % kScoreBlock) * es;
            if constexpr (F16) {
                key[e] = half_to_float(*reinterpret_cast<const uint16_t *>(x));
            } else {
                key[e] = *reinterpret_cast<const float *>(x);
            }
        }
        attn_impl::score<Plain, false>(q, n_q, q_stride, n_heads, dim, reinterpret_cast<const uint8_t *>(key), 0,
                                       nullptr, 1, out + p, out_stride);
    }
}

}  // namespace

void add_attn_row_kernels_scalar(AttnRowKernels & k) {
    attn_impl::fill<Plain>(k);
    k.score_blocked_f32 = score_blocked<false>;
    k.score_blocked_f16 = score_blocked<true>;
}

}  // namespace offgrid::ops::cpu
