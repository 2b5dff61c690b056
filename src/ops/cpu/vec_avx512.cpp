// avx512 vector primitives (compiled with the avx512 flags; reached only when active_isa() allows it).
// Reduction order: dots use two 16-lane accumulators, element i going to accumulator (i / 16) % 2 lane i % 16
// (the last partial vector zero-padded), then acc0 + acc1 and a fixed horizontal sum. The gated delta step
// uses one accumulator per column sum. Element-wise updates round exactly like the scalar twin except where
// an FMA fuses a multiply and an add.
#include <cstring>

#include "ops/cpu/vec.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// GCC 12's AVX-512 headers build results on _mm512_undefined_*(), which -Wall reports as uninitialised
// once inlined (a false positive of the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/cpu/hsum_avx512.h"
#define OFFGRID_VEC_AVX512 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_VEC_AVX512

namespace {

constexpr size_t kW = 16;

using avx512::hsum;  // ops/cpu/hsum_avx512.h
inline __mmask16 tail_mask(size_t c) { return static_cast<__mmask16>((1u << c) - 1); }
inline __m512 load_tail(const float * p, size_t c) { return _mm512_maskz_loadu_ps(tail_mask(c), p); }
inline __m512 load_tail_h(const uint16_t * p, size_t c) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(c), p));
}
inline void store_tail(float * p, __m512 v, size_t c) { _mm512_mask_storeu_ps(p, tail_mask(c), v); }
inline __m512 load(const float * p) { return _mm512_loadu_ps(p); }
inline __m512 load_h(const uint16_t * p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }

template <typename T, __m512 (*Full)(const T *), __m512 (*Tail)(const T *, size_t)>
float dot(const float * a, const T * b, size_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 2 * kW <= n; i += 2 * kW) {
        acc0 = _mm512_fmadd_ps(load(a + i), Full(b + i), acc0);
        acc1 = _mm512_fmadd_ps(load(a + i + kW), Full(b + i + kW), acc1);
    }
    if (i + kW <= n) {
        acc0 = _mm512_fmadd_ps(load(a + i), Full(b + i), acc0);
        i += kW;
        if (i < n) acc1 = _mm512_fmadd_ps(load_tail(a + i, n - i), Tail(b + i, n - i), acc1);
    } else if (i < n) {
        acc0 = _mm512_fmadd_ps(load_tail(a + i, n - i), Tail(b + i, n - i), acc0);
    }
    return hsum(_mm512_add_ps(acc0, acc1));
}

float dot_f32(const float * a, const float * b, size_t n) { return dot<float, load, load_tail>(a, b, n); }
float dot_f16(const float * a, const uint16_t * b, size_t n) { return dot<uint16_t, load_h, load_tail_h>(a, b, n); }

template <typename T, __m512 (*Full)(const T *), __m512 (*Tail)(const T *, size_t)>
void axpy(float a, const T * x, float * y, size_t n) {
    const __m512 av = _mm512_set1_ps(a);
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, Full(x + i), load(y + i)));
    if (i < n) store_tail(y + i, _mm512_fmadd_ps(av, Tail(x + i, n - i), load_tail(y + i, n - i)), n - i);
}

void axpy_f32(float a, const float * x, float * y, size_t n) { axpy<float, load, load_tail>(a, x, y, n); }
void axpy_f16(float a, const uint16_t * x, float * y, size_t n) { axpy<uint16_t, load_h, load_tail_h>(a, x, y, n); }

void scale(float a, float * y, size_t n) {
    const __m512 av = _mm512_set1_ps(a);
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, _mm512_mul_ps(av, load(y + i)));
    if (i < n) store_tail(y + i, _mm512_mul_ps(av, load_tail(y + i, n - i)), n - i);
}

void gated_delta_step(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                      const float * k, const float * v, float decay, float beta, float scale, float * out) {
    const __m512 dec = _mm512_set1_ps(decay);
    const size_t full = dk / kW * kW, rest = dk - full;
    for (size_t m = 0; m < dv; ++m) {
        // S[., m] is contiguous; each element is read before it is written, so in and out may alias.
        const float * in = state_in + m * dk;
        float * col = state_out + m * dk;
        __m512 kv = _mm512_setzero_ps();
        for (size_t i = 0; i < full; i += kW) {
            const __m512 c = _mm512_mul_ps(load(in + i), dec);
            _mm512_storeu_ps(col + i, c);
            kv = _mm512_fmadd_ps(c, load(k + i), kv);
        }
        if (rest) {
            const __m512 c = _mm512_mul_ps(load_tail(in + full, rest), dec);
            store_tail(col + full, c, rest);
            kv = _mm512_fmadd_ps(c, load_tail(k + full, rest), kv);
        }
        const __m512 delta = _mm512_set1_ps(beta * (v[m] - hsum(kv)));
        __m512 qs = _mm512_setzero_ps();
        for (size_t i = 0; i < full; i += kW) {
            const __m512 c = _mm512_fmadd_ps(load(k + i), delta, load(col + i));
            _mm512_storeu_ps(col + i, c);
            qs = _mm512_fmadd_ps(c, load(q + i), qs);
        }
        if (rest) {
            const __m512 c = _mm512_fmadd_ps(load_tail(k + full, rest), delta, load_tail(col + full, rest));
            store_tail(col + full, c, rest);
            qs = _mm512_fmadd_ps(c, load_tail(q + full, rest), qs);
        }
        out[m] = scale * hsum(qs);
    }
}

}  // namespace

void add_vec_kernels_avx512(VecKernels & k) {
    k.dot_f32 = dot_f32;
    k.dot_f16 = dot_f16;
    k.axpy_f32 = axpy_f32;
    k.axpy_f16 = axpy_f16;
    k.scale = scale;
    k.gated_delta_step = gated_delta_step;
}

#else

void add_vec_kernels_avx512(VecKernels & /*k*/) {}

#endif

}  // namespace offgrid::ops::cpu
