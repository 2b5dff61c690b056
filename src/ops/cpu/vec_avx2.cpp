// avx2 vector primitives (compiled with the avx2 flags; reached only when active_isa() allows it).
// Reduction order: dots use two 8-lane accumulators, element i going to accumulator (i / 8) % 2 lane i % 8
// (the last partial vector zero-padded), then acc0 + acc1 and a fixed horizontal sum. The gated delta step
// uses one accumulator per column sum. Element-wise updates round exactly like the scalar twin except where
// an FMA fuses a multiply and an add.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/cpu/vec.h"
#include "ops/cpu/expf_table.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define OFFGRID_VEC_AVX2 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_VEC_AVX2

namespace {

constexpr size_t kW = 8;

inline float hsum(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
inline __m256 load_tail(const float * p, size_t c) {
    float buf[8] = {};
    std::memcpy(buf, p, sizeof(float) * c);
    return _mm256_loadu_ps(buf);
}
inline __m256 load_tail_h(const uint16_t * p, size_t c) {
    uint16_t buf[8] = {};
    std::memcpy(buf, p, 2 * c);
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(buf)));
}
inline void store_tail(float * p, __m256 v, size_t c) {
    float buf[8];
    _mm256_storeu_ps(buf, v);
    std::memcpy(p, buf, sizeof(float) * c);
}
inline __m256 load(const float * p) { return _mm256_loadu_ps(p); }
inline __m256 load_h(const uint16_t * p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }

template <typename T, __m256 (*Full)(const T *), __m256 (*Tail)(const T *, size_t)>
float dot(const float * a, const T * b, size_t n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 2 * kW <= n; i += 2 * kW) {
        acc0 = _mm256_fmadd_ps(load(a + i), Full(b + i), acc0);
        acc1 = _mm256_fmadd_ps(load(a + i + kW), Full(b + i + kW), acc1);
    }
    if (i + kW <= n) {
        acc0 = _mm256_fmadd_ps(load(a + i), Full(b + i), acc0);
        i += kW;
        if (i < n) acc1 = _mm256_fmadd_ps(load_tail(a + i, n - i), Tail(b + i, n - i), acc1);
    } else if (i < n) {
        acc0 = _mm256_fmadd_ps(load_tail(a + i, n - i), Tail(b + i, n - i), acc0);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

float dot_f32(const float * a, const float * b, size_t n) { return dot<float, load, load_tail>(a, b, n); }
float dot_f16(const float * a, const uint16_t * b, size_t n) { return dot<uint16_t, load_h, load_tail_h>(a, b, n); }

template <typename T, __m256 (*Full)(const T *), __m256 (*Tail)(const T *, size_t)>
void axpy(float a, const T * x, float * y, size_t n) {
    const __m256 av = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, Full(x + i), load(y + i)));
    if (i < n) store_tail(y + i, _mm256_fmadd_ps(av, Tail(x + i, n - i), load_tail(y + i, n - i)), n - i);
}

void axpy_f32(float a, const float * x, float * y, size_t n) { axpy<float, load, load_tail>(a, x, y, n); }
void axpy_f16(float a, const uint16_t * x, float * y, size_t n) { axpy<uint16_t, load_h, load_tail_h>(a, x, y, n); }

void scale(float a, float * y, size_t n) {
    const __m256 av = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, load(y + i)));
    if (i < n) store_tail(y + i, _mm256_mul_ps(av, load_tail(y + i, n - i)), n - i);
}

// A product rounded on its own: GCC contracts a * b + c into an fma even in ISO C++ mode, also for intrinsics;
// the empty asm (no instruction) keeps the multiply apart.
inline __m256 product(__m256 a, __m256 b) {
    __m256 p = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(p));
    return p;
}

// One group of 16 outputs (ops/cpu/vec.h) as two vectors of 8: lane i of half h sums l[k] * g[k * 16 + 8 h + i]
// in k order.
inline void lowrank_group(const float * g, size_t lr, const float * l, __m256 & lo, __m256 & hi) {
    const __m256 l0 = _mm256_set1_ps(l[0]);
    lo = product(l0, load(g));
    hi = product(l0, load(g + kW));
    for (size_t k = 1; k < lr; ++k) {
        const __m256 lk = _mm256_set1_ps(l[k]);
        lo = _mm256_add_ps(lo, product(lk, load(g + k * 2 * kW)));
        hi = _mm256_add_ps(hi, product(lk, load(g + k * 2 * kW + kW)));
    }
}

void lowrank_interleaved_f32(const float * u, size_t lr, const float * l, size_t o0, size_t n, float * y) {
    constexpr size_t G = kLowrankGroup;
    static_assert(G == 2 * kW);
    const size_t end = o0 + n;
    for (size_t o = o0; o < end;) {
        const size_t lane = o % G, c = std::min(G - lane, end - o);
        __m256 lo, hi;
        lowrank_group(u + (o / G) * lr * G, lr, l, lo, hi);
        if (c == G) {
            _mm256_storeu_ps(y + (o - o0), lo);
            _mm256_storeu_ps(y + (o - o0) + kW, hi);
        } else {  // a partial group (at most one at each end): its live lanes only
            float part[G];
            _mm256_storeu_ps(part, lo);
            _mm256_storeu_ps(part + kW, hi);
            std::memcpy(y + (o - o0), part + lane, c * sizeof(float));
        }
        o += c;
    }
}

void gated_delta_step(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                      const float * k, const float * v, float decay, float beta, float scale, float * out) {
    const __m256 dec = _mm256_set1_ps(decay);
    const size_t full = dk / kW * kW, rest = dk - full;
    for (size_t m = 0; m < dv; ++m) {
        // S[., m] is contiguous; each element is read before it is written, so in and out may alias.
        const float * in = state_in + m * dk;
        float * col = state_out + m * dk;
        __m256 kv = _mm256_setzero_ps();
        for (size_t i = 0; i < full; i += kW) {
            const __m256 c = _mm256_mul_ps(load(in + i), dec);
            _mm256_storeu_ps(col + i, c);
            kv = _mm256_fmadd_ps(c, load(k + i), kv);
        }
        if (rest) {
            const __m256 c = _mm256_mul_ps(load_tail(in + full, rest), dec);
            store_tail(col + full, c, rest);
            kv = _mm256_fmadd_ps(c, load_tail(k + full, rest), kv);
        }
        const __m256 delta = _mm256_set1_ps(beta * (v[m] - hsum(kv)));
        __m256 qs = _mm256_setzero_ps();
        for (size_t i = 0; i < full; i += kW) {
            const __m256 c = _mm256_fmadd_ps(load(k + i), delta, load(col + i));
            _mm256_storeu_ps(col + i, c);
            qs = _mm256_fmadd_ps(c, load(q + i), qs);
        }
        if (rest) {
            const __m256 c = _mm256_fmadd_ps(load_tail(k + full, rest), delta, load_tail(col + full, rest));
            store_tail(col + full, c, rest);
            qs = _mm256_fmadd_ps(c, load_tail(q + full, rest), qs);
        }
        out[m] = scale * hsum(qs);
    }
}

// expf of 8 floats as the avx512 level evaluates 16: glibc's algorithm (expf_table.h) in double, the same
// operations in the same order, libm for the lanes outside [-87, 88]; the 2^(i/32) entry is gathered.
inline __m256d mul_apart(__m256d a, __m256d b) {
    __m256d p = _mm256_mul_pd(a, b);
    __asm__("" : "+x"(p));  // a product of its own: GCC would fuse it into the addition after it
    return p;
}

inline __m256d exp_lanes(__m256d x, const ExpfTable & tab) {
    const __m256d inv_ln2_n = _mm256_set1_pd(kExpInvLn2N);
    const __m256d shift = _mm256_set1_pd(kExpShift);
    const __m256d z = mul_apart(inv_ln2_n, x);
    __m256d kd = _mm256_add_pd(z, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmadd_pd(inv_ln2_n, x, _mm256_sub_pd(_mm256_setzero_pd(), kd));
    const __m256i idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    const __m256d t = _mm256_i64gather_pd(tab.t, idx, 8);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(_mm256_castpd_si256(t), _mm256_slli_epi64(ki, 47)));
    const __m256d c0 = _mm256_set1_pd(kExpC0);
    const __m256d c1 = _mm256_set1_pd(kExpC1);
    const __m256d c2 = _mm256_set1_pd(kExpC2);
    const __m256d p = _mm256_fmadd_pd(c0, r, c1);
    const __m256d r2 = _mm256_mul_pd(r, r);
    __m256d y = _mm256_fmadd_pd(c2, r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(p, r2, y);
    return _mm256_mul_pd(y, s);
}

// expf of the first c <= 8 lanes of x (the rest ignored).
inline __m256 exp8(__m256 x, size_t c) {
    static const ExpfTable tab;
    const int live = (1 << c) - 1;
    const int in_range = _mm256_movemask_ps(_mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ),
                                                          _mm256_cmp_ps(x, _mm256_set1_ps(88.0f), _CMP_LE_OQ))) & live;
    const __m256d a = exp_lanes(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), tab);
    const __m256d b = exp_lanes(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), tab);
    __m256 y = _mm256_set_m128(_mm256_cvtpd_ps(b), _mm256_cvtpd_ps(a));
    if (in_range != live) {  // rare: libm for the lanes outside the checked range
        alignas(32) float xs[8], ys[8];
        _mm256_store_ps(xs, x);
        _mm256_store_ps(ys, y);
        for (size_t i = 0; i < c; ++i)
            if (!((in_range >> i) & 1)) ys[i] = std::exp(xs[i]);
        y = _mm256_load_ps(ys);
    }
    return y;
}

void exp_f32(const float * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, exp8(load(x + i), kW));
    if (i < n) store_tail(y + i, exp8(load_tail(x + i, n - i), n - i), n - i);
}

inline __m256 sigmoid8(__m256 x, size_t c) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x), c);
    return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

void sigmoid_f32(const float * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, sigmoid8(load(x + i), kW));
    if (i < n) store_tail(y + i, sigmoid8(load_tail(x + i, n - i), n - i), n - i);
}

inline __m256 silu8(__m256 v, size_t c) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v), c);
    return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void silu_f32(const float * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, silu8(load(x + i), kW));
    if (i < n) store_tail(y + i, silu8(load_tail(x + i, n - i), n - i), n - i);
}

}  // namespace

void add_vec_kernels_avx2(VecKernels & k) {
    k.dot_f32 = dot_f32;
    k.dot_f16 = dot_f16;
    k.axpy_f32 = axpy_f32;
    k.axpy_f16 = axpy_f16;
    k.scale = scale;
    k.lowrank_interleaved_f32 = lowrank_interleaved_f32;
    k.gated_delta_step = gated_delta_step;
    k.exp_f32 = exp_f32;
    k.sigmoid_f32 = sigmoid_f32;
    k.silu_f32 = silu_f32;
}

#else

void add_vec_kernels_avx2(VecKernels & /*k*/) {}

#endif

}  // namespace offgrid::ops::cpu
