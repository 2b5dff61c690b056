// avx2 primitives of the attn_rows kernels (compiled with the avx2 flags; reached only when active_isa() allows
// it). Dots: two 8-lane accumulators, element i to accumulator (i / 8) % 2 lane i % 8, the last n % 8 elements
// summed in order after a fixed horizontal sum; updates fuse multiply and add.
#include "ops/cpu/attn_rows.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "ops/cpu/attn_rows_impl.h"
#include "ops/half.h"

#include <cmath>
#define OFFGRID_ATTN_AVX2 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_ATTN_AVX2

namespace {

constexpr size_t kW = 8;

struct Avx2 {
    static float dot(const float * a, const float * b, size_t n) {
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        size_t i = 0;
        for (; i + 2 * kW <= n; i += 2 * kW) {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + kW), _mm256_loadu_ps(b + i + kW), acc1);
        }
        if (i + kW <= n) {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
            i += kW;
        }
        const __m256 v = _mm256_add_ps(acc0, acc1);
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        float s = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
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
    static void axpy(float a, const float * x, float * y, size_t n) {
        const __m256 av = _mm256_set1_ps(a);
        size_t i = 0;
        for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        for (; i < n; ++i) y[i] += a * x[i];
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
        const __m256 av = _mm256_set1_ps(a);
        size_t i = 0;
        for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
        for (; i < n; ++i) y[i] *= a;
    }
    static void widen_f16(const uint16_t * x, float * y, size_t n) {
        size_t i = 0;
        for (; i + kW <= n; i += kW) {
            _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
        }
        for (; i < n; ++i) y[i] = half_to_float(x[i]);
    }
    static void prefetch(const uint8_t * p, size_t bytes) {
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char *>(p + o), _MM_HINT_T1);
    }
};

}  // namespace

void add_attn_row_kernels_avx2(AttnRowKernels & k) { attn_impl::fill<Avx2>(k); }

#else

void add_attn_row_kernels_avx2(AttnRowKernels &) {}

#endif

}  // namespace offgrid::ops::cpu
