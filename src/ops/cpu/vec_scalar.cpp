// Scalar twins of the vector primitives: plain loops in index order.
#include <cmath>

#include "ops/cpu/vec.h"
#include "ops/half.h"

namespace offgrid::ops::cpu {

namespace {

float dot_f32(const float * a, const float * b, size_t n) {
    float s = 0.0f;
    for (size_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

float dot_f16(const float * a, const uint16_t * b, size_t n) {
    float s = 0.0f;
    for (size_t i = 0; i < n; ++i) s += a[i] * half_to_float(b[i]);
    return s;
}

void axpy_f32(float a, const float * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += a * half_to_float(x[i]);
}

void scale(float a, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] *= a;
}

void mul_f32(float a, const float * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = a * x[i];
}

void add_mul_f32(float a, const float * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void add_prod_f32(const float * x, const float * g, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += x[i] * g[i];
}

// A product rounded on its own: with -march=native on an fma host GCC would contract `s += a * b`; the empty
// asm (no instruction) keeps the multiply apart, as the vector levels keep it.
inline float product(float a, float b) {
    float p = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__("" : "+x"(p));
#endif
    return p;
}

void lowrank_interleaved_f32(const float * u, size_t lr, const float * l, size_t o0, size_t n, float * y) {
    constexpr size_t G = kLowrankGroup;
    for (size_t j = 0; j < n; ++j) {
        const size_t o = o0 + j;
        const float * w = u + (o / G) * lr * G + o % G;
        float s = product(l[0], w[0]);
        for (size_t k = 1; k < lr; ++k) s += product(l[k], w[k * G]);
        y[j] = s;
    }
}

void exp_f32(const float * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = std::exp(x[i]);
}

void sigmoid_f32(const float * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void silu_f32(const float * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void gated_delta_step(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                      const float * k, const float * v, float decay, float beta, float scale, float * out) {
    for (size_t m = 0; m < dv; ++m) {
        const float * in = state_in + m * dk;  // S[., m] is contiguous
        float * col = state_out + m * dk;
        float kv = 0.0f;
        for (size_t i = 0; i < dk; ++i) {
            col[i] = in[i] * decay;
            kv += col[i] * k[i];
        }
        const float delta = beta * (v[m] - kv);
        float qs = 0.0f;
        for (size_t i = 0; i < dk; ++i) {
            col[i] += k[i] * delta;
            qs += col[i] * q[i];
        }
        out[m] = scale * qs;
    }
}

}  // namespace

void add_vec_kernels_scalar(VecKernels & k) {
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

}  // namespace offgrid::ops::cpu
