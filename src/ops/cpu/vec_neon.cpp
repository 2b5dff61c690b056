// NEON vector primitives (aarch64 only).
//  - Element-wise updates (axpy, scale, mul, add_mul, add_prod, the low-rank groups): the Scalar twin's
//    operations lane by lane, each product rounded before its addition (the tree is compiled without contraction
//    on aarch64), so they give the twin's bits.
//  - Dots (and the gated delta step's column sums): the avx2 level's order (vec_avx2.cpp), two 8-lane
//    accumulators, each as two 4-lane vectors: element i goes to accumulator (i / 8) % 2 lane i % 8 by a fused
//    multiply-add, the last partial vector zero-padded; then acc0 + acc1 and the fixed horizontal sum
//    ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
//  - exp, sigmoid and silu keep the Scalar twin's (libm).
#include <arm_neon.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/vec.h"
#include "ops/half.h"

namespace offgrid::ops::cpu {

namespace {

// 8 lanes as two 4-lane vectors.
struct V8 {
    float32x4_t lo, hi;
};

inline V8 zero8() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
inline V8 load8(const float * p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
inline V8 load8(const uint16_t * p) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}
template <typename T>
inline V8 load8_tail(const T * p, size_t c) {
    T buf[8] = {};
    std::memcpy(buf, p, sizeof(T) * c);
    return load8(buf);
}
inline void store8(float * p, V8 v) {
    vst1q_f32(p, v.lo);
    vst1q_f32(p + 4, v.hi);
}
inline void store8_tail(float * p, V8 v, size_t c) {
    float buf[8];
    store8(buf, v);
    std::memcpy(p, buf, sizeof(float) * c);
}
inline V8 fma8(V8 acc, V8 a, V8 b) { return {vfmaq_f32(acc.lo, a.lo, b.lo), vfmaq_f32(acc.hi, a.hi, b.hi)}; }
inline V8 add8(V8 a, V8 b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
inline float hsum8(V8 v) {
    const float32x4_t s4 = vaddq_f32(v.lo, v.hi);
    const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}

template <typename T>
float dot(const float * a, const T * b, size_t n) {
    V8 acc0 = zero8(), acc1 = zero8();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = fma8(acc0, load8(a + i), load8(b + i));
        acc1 = fma8(acc1, load8(a + i + 8), load8(b + i + 8));
    }
    if (i + 8 <= n) {
        acc0 = fma8(acc0, load8(a + i), load8(b + i));
        i += 8;
        if (i < n) acc1 = fma8(acc1, load8_tail(a + i, n - i), load8_tail(b + i, n - i));
    } else if (i < n) {
        acc0 = fma8(acc0, load8_tail(a + i, n - i), load8_tail(b + i, n - i));
    }
    return hsum8(add8(acc0, acc1));
}

float dot_f32(const float * a, const float * b, size_t n) { return dot<float>(a, b, n); }
float dot_f16(const float * a, const uint16_t * b, size_t n) { return dot<uint16_t>(a, b, n); }

void axpy_f32(float a, const float * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_n_f32(vld1q_f32(x + i), a)));
    for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t xv = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i)));
        vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_n_f32(xv, a)));
    }
    for (; i < n; ++i) y[i] += a * half_to_float(x[i]);
}

void scale(float a, float * y, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), a));
    for (; i < n; ++i) y[i] *= a;
}

void mul_f32(float a, const float * x, float * y, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(x + i), a));
    for (; i < n; ++i) y[i] = a * x[i];
}

void add_mul_f32(float a, const float * x, float * y, size_t n) { axpy_f32(a, x, y, n); }

void add_prod_f32(const float * x, const float * g, float * y, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        vst1q_f32(y + i, vaddq_f32(vld1q_f32(y + i), vmulq_f32(vld1q_f32(x + i), vld1q_f32(g + i))));
    }
    for (; i < n; ++i) y[i] += x[i] * g[i];
}

// One group of 16 outputs (ops/cpu/vec.h) as four vectors of 4: lane i of vector v sums l[k] * g[k * 16 + 4 v + i]
// in k order, each product rounded on its own.
void lowrank_interleaved_f32(const float * u, size_t lr, const float * l, size_t o0, size_t n, float * y) {
    constexpr size_t G = kLowrankGroup;
    static_assert(G == 16);
    const size_t end = o0 + n;
    for (size_t o = o0; o < end;) {
        const size_t lane = o % G, c = std::min(G - lane, end - o);
        const float * g = u + (o / G) * lr * G;
        float32x4_t s[4];
        for (int v = 0; v < 4; ++v) s[v] = vmulq_n_f32(vld1q_f32(g + 4 * v), l[0]);
        for (size_t k = 1; k < lr; ++k) {
            for (int v = 0; v < 4; ++v) s[v] = vaddq_f32(s[v], vmulq_n_f32(vld1q_f32(g + k * G + 4 * v), l[k]));
        }
        float part[G];
        for (int v = 0; v < 4; ++v) vst1q_f32(part + 4 * v, s[v]);
        std::memcpy(y + (o - o0), part + lane, c * sizeof(float));
        o += c;
    }
}

// The avx2 level's step: the decay product rounded, the column sums as 8-lane fused accumulators.
void gated_delta_step(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                      const float * k, const float * v, float decay, float beta, float scale, float * out) {
    const size_t full = dk / 8 * 8, rest = dk - full;
    const float32x4_t dec = vdupq_n_f32(decay);
    auto mul8 = [&](V8 x) { return V8{vmulq_f32(x.lo, dec), vmulq_f32(x.hi, dec)}; };
    for (size_t m = 0; m < dv; ++m) {
        // S[., m] is contiguous; each element is read before it is written, so in and out may alias.
        const float * in = state_in + m * dk;
        float * col = state_out + m * dk;
        V8 kv = zero8();
        for (size_t i = 0; i < full; i += 8) {
            const V8 c = mul8(load8(in + i));
            store8(col + i, c);
            kv = fma8(kv, c, load8(k + i));
        }
        if (rest) {
            const V8 c = mul8(load8_tail(in + full, rest));
            store8_tail(col + full, c, rest);
            kv = fma8(kv, c, load8_tail(k + full, rest));
        }
        const float d = beta * (v[m] - hsum8(kv));
        const V8 delta = {vdupq_n_f32(d), vdupq_n_f32(d)};
        V8 qs = zero8();
        for (size_t i = 0; i < full; i += 8) {
            const V8 c = fma8(load8(col + i), load8(k + i), delta);
            store8(col + i, c);
            qs = fma8(qs, c, load8(q + i));
        }
        if (rest) {
            const V8 c = fma8(load8_tail(col + full, rest), load8_tail(k + full, rest), delta);
            store8_tail(col + full, c, rest);
            qs = fma8(qs, c, load8_tail(q + full, rest));
        }
        out[m] = scale * hsum8(qs);
    }
}

}  // namespace

void add_vec_kernels_neon(VecKernels & k) {
    k.dot_f32 = dot_f32;
    k.dot_f16 = dot_f16;
    k.axpy_f32 = axpy_f32;
    k.axpy_f16 = axpy_f16;
    k.scale = scale;
    k.mul_f32 = mul_f32;
    k.add_mul_f32 = add_mul_f32;
    k.add_prod_f32 = add_prod_f32;
    k.lowrank_interleaved_f32 = lowrank_interleaved_f32;
    k.gated_delta_step = gated_delta_step;
}

}  // namespace offgrid::ops::cpu
