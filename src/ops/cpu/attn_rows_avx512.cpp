// avx512 primitives of the attn_rows kernels (compiled with the avx512 flags; reached only when active_isa()
// allows it). Dots: two 16-lane accumulators, element i to accumulator (i / 16) % 2 lane i % 16 (a partial last
// vector masked), then acc0 + acc1 and a fixed horizontal sum; updates fuse multiply and add.
#include "ops/cpu/attn_rows.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// GCC 12's AVX-512 headers build results on _mm512_undefined_*(), which -Wall reports as uninitialised once
// inlined (a false positive of the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/cpu/attn_rows_impl.h"
#define OFFGRID_ATTN_AVX512 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_ATTN_AVX512

namespace {

constexpr size_t kW = 16;

inline __mmask16 mask(size_t c) { return static_cast<__mmask16>((1u << c) - 1); }

inline float hsum(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

struct Avx512 {
    static float dot(const float * a, const float * b, size_t n) {
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 2 * kW <= n; i += 2 * kW) {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + kW), _mm512_loadu_ps(b + i + kW), acc1);
        }
        if (i + kW <= n) {
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
            i += kW;
            if (i < n) {
                const __mmask16 k = mask(n - i);
                acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), acc1);
            }
        } else if (i < n) {
            const __mmask16 k = mask(n - i);
            acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), acc0);
        }
        return hsum(_mm512_add_ps(acc0, acc1));
    }
    // Four dots at once, each with dot()'s arithmetic (interleaved for the latency, never merged).
    static void dots4(const float * q, size_t qs, const float * b, size_t n, float * out) {
        const float * a[4] = {q, q + qs, q + 2 * qs, q + 3 * qs};
        __m512 x[4], y[4];
        for (int k = 0; k < 4; ++k) x[k] = y[k] = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 2 * kW <= n; i += 2 * kW) {
            const __m512 b0 = _mm512_loadu_ps(b + i), b1 = _mm512_loadu_ps(b + i + kW);
            for (int k = 0; k < 4; ++k) {
                x[k] = _mm512_fmadd_ps(_mm512_loadu_ps(a[k] + i), b0, x[k]);
                y[k] = _mm512_fmadd_ps(_mm512_loadu_ps(a[k] + i + kW), b1, y[k]);
            }
        }
        if (i + kW <= n) {
            const __m512 b0 = _mm512_loadu_ps(b + i);
            for (int k = 0; k < 4; ++k) x[k] = _mm512_fmadd_ps(_mm512_loadu_ps(a[k] + i), b0, x[k]);
            i += kW;
            if (i < n) {
                const __mmask16 mk = mask(n - i);
                const __m512 b1 = _mm512_maskz_loadu_ps(mk, b + i);
                for (int k = 0; k < 4; ++k) y[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a[k] + i), b1, y[k]);
            }
        } else if (i < n) {
            const __mmask16 mk = mask(n - i);
            const __m512 b0 = _mm512_maskz_loadu_ps(mk, b + i);
            for (int k = 0; k < 4; ++k) x[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a[k] + i), b0, x[k]);
        }
        for (int k = 0; k < 4; ++k) out[k] = hsum(_mm512_add_ps(x[k], y[k]));
    }
    // Four heads against two keys: each head vector loaded once for both (8 dots interleaved, dot()'s arithmetic).
    static void dots4_pair(const float * q, size_t qs, const float * b0, const float * b1, size_t n, float * o0,
                           float * o1) {
        const float * a[4] = {q, q + qs, q + 2 * qs, q + 3 * qs};
        __m512 x0[4], y0[4], x1[4], y1[4];
        for (int k = 0; k < 4; ++k) x0[k] = y0[k] = x1[k] = y1[k] = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 2 * kW <= n; i += 2 * kW) {
            const __m512 u0 = _mm512_loadu_ps(b0 + i), u1 = _mm512_loadu_ps(b0 + i + kW);
            const __m512 v0 = _mm512_loadu_ps(b1 + i), v1 = _mm512_loadu_ps(b1 + i + kW);
            for (int k = 0; k < 4; ++k) {
                const __m512 qa = _mm512_loadu_ps(a[k] + i), qb = _mm512_loadu_ps(a[k] + i + kW);
                x0[k] = _mm512_fmadd_ps(qa, u0, x0[k]);
                y0[k] = _mm512_fmadd_ps(qb, u1, y0[k]);
                x1[k] = _mm512_fmadd_ps(qa, v0, x1[k]);
                y1[k] = _mm512_fmadd_ps(qb, v1, y1[k]);
            }
        }
        if (i + kW <= n) {
            const __m512 u0 = _mm512_loadu_ps(b0 + i), v0 = _mm512_loadu_ps(b1 + i);
            for (int k = 0; k < 4; ++k) {
                const __m512 qa = _mm512_loadu_ps(a[k] + i);
                x0[k] = _mm512_fmadd_ps(qa, u0, x0[k]);
                x1[k] = _mm512_fmadd_ps(qa, v0, x1[k]);
            }
            i += kW;
            if (i < n) {
                const __mmask16 mk = mask(n - i);
                const __m512 u1 = _mm512_maskz_loadu_ps(mk, b0 + i), v1 = _mm512_maskz_loadu_ps(mk, b1 + i);
                for (int k = 0; k < 4; ++k) {
                    const __m512 qb = _mm512_maskz_loadu_ps(mk, a[k] + i);
                    y0[k] = _mm512_fmadd_ps(qb, u1, y0[k]);
                    y1[k] = _mm512_fmadd_ps(qb, v1, y1[k]);
                }
            }
        } else if (i < n) {
            const __mmask16 mk = mask(n - i);
            const __m512 u0 = _mm512_maskz_loadu_ps(mk, b0 + i), v0 = _mm512_maskz_loadu_ps(mk, b1 + i);
            for (int k = 0; k < 4; ++k) {
                const __m512 qa = _mm512_maskz_loadu_ps(mk, a[k] + i);
                x0[k] = _mm512_fmadd_ps(qa, u0, x0[k]);
                x1[k] = _mm512_fmadd_ps(qa, v0, x1[k]);
            }
        }
        for (int k = 0; k < 4; ++k) {
            o0[k] = hsum(_mm512_add_ps(x0[k], y0[k]));
            o1[k] = hsum(_mm512_add_ps(x1[k], y1[k]));
        }
    }
    static void dots_pair(const float * q, size_t q_stride, size_t m, const float * k0, const float * k1, size_t dim,
                          float * o0, float * o1) {
        size_t i = 0;
        for (; i + 4 <= m; i += 4) dots4_pair(q + i * q_stride, q_stride, k0, k1, dim, o0 + i, o1 + i);
        for (; i < m; ++i) {
            o0[i] = dot(q + i * q_stride, k0, dim);
            o1[i] = dot(q + i * q_stride, k1, dim);
        }
    }
    static void dots(const float * q, size_t q_stride, size_t m, const float * key, size_t dim, float * out) {
        size_t i = 0;
        for (; i + 4 <= m; i += 4) dots4(q + i * q_stride, q_stride, key, dim, out + i);
        for (; i < m; ++i) out[i] = dot(q + i * q_stride, key, dim);
    }
    // exp(x) = 2^n * e^r, n = round(x log2 e), r = x - n ln 2 (two-part ln 2), e^r by its Taylor series to r^7
    // (|r| <= 0.35: truncation below 1e-8 relative), 2^n applied by scalef (under- and overflow as the
    // hardware's). x below -200 is taken as -200 (e^-200 is 0 in float); NaN stays NaN.
    static __m512 exp(__m512 x) {
        x = _mm512_max_ps(_mm512_set1_ps(-200.0f), x);
        const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
        __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        return _mm512_scalef_ps(p, n);
    }
    static void exp_shift(float * s, size_t n, float mx) {
        const __m512 m = _mm512_set1_ps(mx);
        size_t j = 0;
        for (; j + kW <= n; j += kW) _mm512_storeu_ps(s + j, exp(_mm512_sub_ps(_mm512_loadu_ps(s + j), m)));
        if (j < n) {
            const __mmask16 k = mask(n - j);
            _mm512_mask_storeu_ps(s + j, k, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), m)));
        }
    }
    static void axpy(float a, const float * x, float * y, size_t n) {
        const __m512 av = _mm512_set1_ps(a);
        size_t i = 0;
        for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
        if (i < n) {
            const __mmask16 k = mask(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i)));
        }
    }
    template <bool F16>
    static __m512 load_row(const uint8_t * row, size_t d) {
        if constexpr (F16) {
            return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row) + d / kW));
        } else {
            return _mm512_loadu_ps(reinterpret_cast<const float *>(row) + d);
        }
    }
    template <bool F16>
    static __m512 load_row_tail(const uint8_t * row, size_t d, __mmask16 k) {
        if constexpr (F16) {
            return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, reinterpret_cast<const uint16_t *>(row) + d));
        } else {
            return _mm512_maskz_loadu_ps(k, reinterpret_cast<const float *>(row) + d);
        }
    }
    // Running sums in registers: the fast shape (4 queries x 64 dims, 16 accumulators) reads each V vector once
    // for the 4 queries; any other piece keeps one accumulator at a time. Both do acc = fma(w_ij, v_jd, acc)
    // over j in order for each (i, d), so the bits do not depend on the shape.
    template <bool F16>
    static void accumulate(const float * w, size_t ws, size_t m, const uint8_t * vb, size_t vs, const uint32_t * cells,
                           size_t nb, float * out, size_t os, size_t dim) {
        size_t i0 = 0;
        for (; i0 + 4 <= m && dim % (4 * kW) == 0; i0 += 4) {
            for (size_t d0 = 0; d0 < dim; d0 += 4 * kW) {
                __m512 acc[4][4];
                for (int i = 0; i < 4; ++i)
                    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_loadu_ps(out + (i0 + i) * os + d0 + v * kW);
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    __m512 val[4];
                    for (int v = 0; v < 4; ++v) val[v] = load_row<F16>(row, d0 + v * kW);
                    for (int i = 0; i < 4; ++i) {
                        const __m512 wi = _mm512_set1_ps(w[(i0 + i) * ws + j]);
                        for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(wi, val[v], acc[i][v]);
                    }
                }
                for (int i = 0; i < 4; ++i)
                    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(out + (i0 + i) * os + d0 + v * kW, acc[i][v]);
            }
        }
        for (size_t i = i0; i < m; ++i) {
            for (size_t d = 0; d < dim; d += kW) {
                const bool tail = d + kW > dim;
                const __mmask16 k = tail ? mask(dim - d) : static_cast<__mmask16>(0xffff);
                float * o = out + i * os + d;
                __m512 acc = _mm512_maskz_loadu_ps(k, o);
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    const __m512 val = tail ? load_row_tail<F16>(row, d, k) : load_row<F16>(row, d);
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(w[i * ws + j]), val, acc);
                }
                _mm512_mask_storeu_ps(o, k, acc);
            }
        }
    }
    static void scale(float a, float * y, size_t n) {
        const __m512 av = _mm512_set1_ps(a);
        size_t i = 0;
        for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, _mm512_mul_ps(av, _mm512_loadu_ps(y + i)));
        if (i < n) {
            const __mmask16 k = mask(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(k, y + i)));
        }
    }
    static void widen_f16(const uint16_t * x, float * y, size_t n) {
        size_t i = 0;
        for (; i + kW <= n; i += kW) {
            _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i))));
        }
        if (i < n) {
            const __mmask16 k = mask(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i)));
        }
    }
    static void prefetch(const uint8_t * p, size_t bytes) {
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char *>(p + o), _MM_HINT_T1);
    }
};

}  // namespace

void add_attn_row_kernels_avx512(AttnRowKernels & k) { attn_impl::fill<Avx512>(k); }

#else

void add_attn_row_kernels_avx512(AttnRowKernels &) {}

#endif

}  // namespace offgrid::ops::cpu
