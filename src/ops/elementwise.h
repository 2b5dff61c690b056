// Small element-wise functions and vector kernels: activations, RMSNorm, L2 norm, softmax, top-k.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace offgrid::ops {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// log(1 + e^x), linear above 20 as the reference does.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
// y = a x, y += a x and y += x g over n values with the vector kernels of the active ISA level (ops/cpu/vec.h):
// the scalar loops' bits (each product and sum rounded on its own, no fused multiply-add).
void mul_n(float a, const float * x, float * y, size_t n);
void add_mul_n(float a, const float * x, float * y, size_t n);
void add_prod_n(const float * x, const float * g, float * y, size_t n);
// Low-rank products over outputs stored in groups of kLowrankGroup (ops/cpu/vec.h, lowrank_interleaved_f32):
// weight k of output o at u[(o / G) * lr * G + k * G + o % G], y[j] = sum_k l[k] u(o0 + j, k) for j < n,
// products rounded on their own and added in k order (the bits of mul_n(l[0]) then add_mul_n(l[k]) over the
// outputs in a plain layout). u must hold every group [o0, o0 + n) touches.
inline constexpr size_t kLowrankGroup = 16;
void lowrank_interleaved_n(const float * u, size_t lr, const float * l, size_t o0, size_t n, float * y);
// y[i] = sigmoid(x[i]), silu(x[i]) and std::exp(x[i]) over n values with the vector kernels: the scalar
// functions' bits exactly. y may alias x.
void sigmoid_n(const float * x, float * y, size_t n);
void silu_n(const float * x, float * y, size_t n);
void exp_n(const float * x, float * y, size_t n);

// out = x / sqrt(mean(x^2) + eps) * gamma (gamma may be null). The sum of squares accumulates in double, the
// scale is a float 1/sqrtf(mean + eps). out may alias x.
void rms_norm(const float * x, size_t n, float eps, const float * gamma, float * out);
// rms_norm of n_rows consecutive rows of n (row r at x + r * n, into out + r * n, with gammas[r], or no gamma
// when gammas is null), each with rms_norm's bits; faster than one row at a time. out may alias x.
void rms_norm_rows(const float * x, size_t n_rows, size_t n, float eps, const float * const * gammas, float * out);

// out = x / sqrt(sum(x^2) + eps), sum in double. out may alias x.
void l2_norm(const float * x, size_t n, float eps, float * out);

// In-place softmax over n values (max subtracted; float exp and sum in index order).
void softmax(float * x, size_t n);

// Indices of the k largest values, in descending order of value; equal values keep the lower index first.
// k is clamped to n.
std::vector<uint32_t> top_k(const float * values, size_t n, size_t k);
// The same into idx, which holds n entries (all used as working space); the first min(k, n) are the result,
// min(k, n) is returned. No allocation.
size_t top_k_into(const float * values, size_t n, size_t k, uint32_t * idx);
// Plain twin: repeated selection of the maximum (lowest index among equals).
std::vector<uint32_t> top_k_ref(const float * values, size_t n, size_t k);

}  // namespace offgrid::ops
