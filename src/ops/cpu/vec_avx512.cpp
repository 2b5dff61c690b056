// avx512 vector primitives (compiled with the avx512 flags; reached only when active_isa() allows it).
// Reduction order: dots use two 16-lane accumulators, element i going to accumulator (i / 16) % 2 lane i % 16
// (the last partial vector zero-padded), then acc0 + acc1 and a fixed horizontal sum. The gated delta step
// uses one accumulator per column sum. Element-wise updates round exactly like the scalar twin except where
// an FMA fuses a multiply and an add.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/vec.h"
#include "ops/cpu/expf_table.h"

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

void mul_f32(float a, const float * x, float * y, size_t n) {
    const __m512 av = _mm512_set1_ps(a);
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, _mm512_mul_ps(av, load(x + i)));
    if (i < n) store_tail(y + i, _mm512_mul_ps(av, load_tail(x + i, n - i)), n - i);
}

// A product the compiler may not fuse with the sum that follows (GCC contracts a plain _mm512_mul_ps and
// _mm512_add_ps into an FMA in C++ unless told otherwise; the rounding builtin is opaque to it).
inline __m512 mul_apart(__m512 a, __m512 b) { return _mm512_mul_round_ps(a, b, _MM_FROUND_CUR_DIRECTION); }
inline __m512d mul_apart(__m512d a, __m512d b) { return _mm512_mul_round_pd(a, b, _MM_FROUND_CUR_DIRECTION); }

void add_mul_f32(float a, const float * x, float * y, size_t n) {  // the scalar loop's two roundings
    const __m512 av = _mm512_set1_ps(a);
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, _mm512_add_ps(load(y + i), mul_apart(av, load(x + i))));
    if (i < n) {
        const size_t c = n - i;
        store_tail(y + i, _mm512_add_ps(load_tail(y + i, c), mul_apart(av, load_tail(x + i, c))), c);
    }
}

void add_prod_f32(const float * x, const float * g, float * y, size_t n) {
    size_t i = 0;
    for (; i + kW <= n; i += kW) {
        _mm512_storeu_ps(y + i, _mm512_add_ps(load(y + i), mul_apart(load(x + i), load(g + i))));
    }
    if (i < n) {
        const size_t c = n - i;
        store_tail(y + i, _mm512_add_ps(load_tail(y + i, c), mul_apart(load_tail(x + i, c), load_tail(g + i, c))), c);
    }
}

// One group of 16 outputs (ops/cpu/vec.h): lane i sums l[k] * g[k * 16 + i] in k order, every product apart
// (the first one too: a plain multiply could be fused into the first addition).
inline __m512 lowrank_group(const float * g, size_t lr, const float * l) {
    __m512 acc = mul_apart(_mm512_set1_ps(l[0]), load(g));
    for (size_t k = 1; k < lr; ++k) acc = _mm512_add_ps(acc, mul_apart(_mm512_set1_ps(l[k]), load(g + k * kW)));
    return acc;
}

void lowrank_interleaved_f32(const float * u, size_t lr, const float * l, size_t o0, size_t n, float * y) {
    static_assert(kLowrankGroup == kW);
    const size_t end = o0 + n;
    for (size_t o = o0; o < end;) {
        const size_t lane = o % kW, c = std::min(kW - lane, end - o);
        const __m512 v = lowrank_group(u + (o / kW) * lr * kW, lr, l);
        if (c == kW) {
            _mm512_storeu_ps(y + (o - o0), v);
        } else {  // a partial group (at most one at each end): its live lanes only
            alignas(64) float part[kW];
            _mm512_store_ps(part, v);
            std::memcpy(y + (o - o0), part + lane, c * sizeof(float));
        }
        o += c;
    }
}

// expf of 16 floats, evaluated as glibc's expf evaluates one (with FMA; its constants and table in
// expf_table.h). The same operations in the same order give the same bits (checked over every float in [-87, 88]); lanes outside that range (overflow,
// underflow, subnormal results, NaN) are left to libm.
struct Exp2Table {
    __m512d part[4];  // ExpfTable's entries 8j..8j+7 in part[j]
    Exp2Table() {
        const ExpfTable tab;
        for (int j = 0; j < 4; ++j) part[j] = _mm512_load_pd(tab.t + 8 * j);
    }
};

inline __m512d exp_lanes(__m512d x, const Exp2Table & tab) {
    const __m512d inv_ln2_n = _mm512_set1_pd(kExpInvLn2N);
    const __m512d shift = _mm512_set1_pd(kExpShift);
    const __m512d z = mul_apart(inv_ln2_n, x);  // rounded before the shift is added, as in expf
    __m512d kd = _mm512_add_pd(z, shift);        // k in the low bits of kd
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    const __m512d r = _mm512_fmadd_pd(inv_ln2_n, x, _mm512_sub_pd(_mm512_setzero_pd(), kd));
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512d lo = _mm512_permutex2var_pd(tab.part[0], idx, tab.part[1]);
    const __m512d hi = _mm512_permutex2var_pd(tab.part[2], idx, tab.part[3]);
    const __m512d t = _mm512_mask_blend_pd(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)), lo, hi);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(_mm512_castpd_si512(t), _mm512_slli_epi64(ki, 47)));
    const __m512d c0 = _mm512_set1_pd(kExpC0);
    const __m512d c1 = _mm512_set1_pd(kExpC1);
    const __m512d c2 = _mm512_set1_pd(kExpC2);
    const __m512d p = _mm512_fmadd_pd(c0, r, c1);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(c2, r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(p, r2, y);
    return _mm512_mul_pd(y, s);
}

// expf of c <= 16 lanes of x (the rest ignored).
inline __m512 exp16(__m512 x, size_t c) {
    static const Exp2Table tab;
    const __mmask16 live = tail_mask(c);
    const __mmask16 in_range = _mm512_mask_cmp_ps_mask(live, x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ) &
                               _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.0f), _CMP_LE_OQ);
    const __m512d a = exp_lanes(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), tab);
    const __m512d b = exp_lanes(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), tab);
    __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a)), _mm512_cvtpd_ps(b), 1);
    if (in_range != live) {  // rare: libm for the lanes outside the checked range
        alignas(64) float xs[16], ys[16];
        _mm512_store_ps(xs, x);
        _mm512_store_ps(ys, y);
        for (size_t i = 0; i < c; ++i)
            if (!((in_range >> i) & 1)) ys[i] = std::exp(xs[i]);
        y = _mm512_load_ps(ys);
    }
    return y;
}

void exp_f32(const float * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, exp16(load(x + i), kW));
    if (i < n) store_tail(y + i, exp16(load_tail(x + i, n - i), n - i), n - i);
}

inline __m512 sigmoid16(__m512 x, size_t c) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x), c);  // -x exactly (also for 0 and NaN signs)
    return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

void sigmoid_f32(const float * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, sigmoid16(load(x + i), kW));
    if (i < n) store_tail(y + i, sigmoid16(load_tail(x + i, n - i), n - i), n - i);
}

void silu_f32(const float * x, float * y, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    size_t i = 0;
    for (; i + kW <= n; i += kW) {
        const __m512 v = load(x + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v), kW);
        _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(one, e)));
    }
    if (i < n) {
        const size_t c = n - i;
        const __m512 v = load_tail(x + i, c);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v), c);
        store_tail(y + i, _mm512_div_ps(v, _mm512_add_ps(one, e)), c);
    }
}

// Key widths of 4, 8 or 16 vectors: a column stays in registers between its two passes (the bits of the loop
// below, which stores the decayed column and reads it back). With Stream, the new column goes out with
// non-temporal stores: an out-of-place step's new state is read only at the next token, after the weights of a
// whole step went through the caches, so fetching its old lines first (the write-allocate) would only add traffic.
template <size_t NV, bool Stream>
void delta_columns(const float * state_in, float * state_out, size_t dv, const float * q, const float * k,
                   const float * v, float decay, float beta, float scale, float * out) {
    const __m512 dec = _mm512_set1_ps(decay);
    constexpr size_t dk = NV * kW;
    for (size_t m = 0; m < dv; ++m) {
        const float * in = state_in + m * dk;
        float * col = state_out + m * dk;
        __m512 c[NV];
        __m512 kv = _mm512_setzero_ps();
        for (size_t i = 0; i < NV; ++i) {
            c[i] = _mm512_mul_ps(load(in + i * kW), dec);
            kv = _mm512_fmadd_ps(c[i], load(k + i * kW), kv);
        }
        const __m512 delta = _mm512_set1_ps(beta * (v[m] - hsum(kv)));
        __m512 qs = _mm512_setzero_ps();
        for (size_t i = 0; i < NV; ++i) {
            c[i] = _mm512_fmadd_ps(load(k + i * kW), delta, c[i]);
            if constexpr (Stream) {
                _mm512_stream_ps(col + i * kW, c[i]);
            } else {
                _mm512_storeu_ps(col + i * kW, c[i]);
            }
            qs = _mm512_fmadd_ps(c[i], load(q + i * kW), qs);
        }
        out[m] = scale * hsum(qs);
    }
    if constexpr (Stream) _mm_sfence();  // the stores are weakly ordered: done before whoever reads them next
}

template <size_t NV>
void delta_columns_to(const float * state_in, float * state_out, size_t dv, const float * q, const float * k,
                      const float * v, float decay, float beta, float scale, float * out) {
    const bool stream = state_out != state_in && (reinterpret_cast<uintptr_t>(state_out) & 63) == 0;
    if (stream) {
        delta_columns<NV, true>(state_in, state_out, dv, q, k, v, decay, beta, scale, out);
    } else {
        delta_columns<NV, false>(state_in, state_out, dv, q, k, v, decay, beta, scale, out);
    }
}

void gated_delta_step(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                      const float * k, const float * v, float decay, float beta, float scale, float * out) {
    switch (dk) {
        case 4 * kW: return delta_columns_to<4>(state_in, state_out, dv, q, k, v, decay, beta, scale, out);
        case 8 * kW: return delta_columns_to<8>(state_in, state_out, dv, q, k, v, decay, beta, scale, out);
        case 16 * kW: return delta_columns_to<16>(state_in, state_out, dv, q, k, v, decay, beta, scale, out);
        default: break;
    }
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
    k.mul_f32 = mul_f32;
    k.add_mul_f32 = add_mul_f32;
    k.add_prod_f32 = add_prod_f32;
    k.lowrank_interleaved_f32 = lowrank_interleaved_f32;
    k.exp_f32 = exp_f32;
    k.sigmoid_f32 = sigmoid_f32;
    k.silu_f32 = silu_f32;
    k.gated_delta_step = gated_delta_step;
}

#else

void add_vec_kernels_avx512(VecKernels & /*k*/) {}

#endif

}  // namespace offgrid::ops::cpu
