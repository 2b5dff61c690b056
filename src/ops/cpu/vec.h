// Vector primitives of the attention and recurrence kernels (f32 activations, F32 or F16 cache rows), one set
// per ISA level, chosen like the matmul kernels (ops/cpu/dispatch.h). Each level has a fixed reduction order
// that depends only on n, so a result depends on the level, never on threads or batches. The Scalar set is the
// plain twin the tests compare the others with.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

// Outputs per group of the interleaved low-rank layout (lowrank_interleaved_f32): one avx512 vector.
inline constexpr size_t kLowrankGroup = 16;

struct VecKernels {
    float (*dot_f32)(const float * a, const float * b, size_t n) = nullptr;
    float (*dot_f16)(const float * a, const uint16_t * b, size_t n) = nullptr;  // b widened exactly
    void (*axpy_f32)(float a, const float * x, float * y, size_t n) = nullptr;  // y += a x
    void (*axpy_f16)(float a, const uint16_t * x, float * y, size_t n) = nullptr;
    void (*scale)(float a, float * y, size_t n) = nullptr;                      // y *= a
    // Element-wise products and sums, each rounded on its own (no fused multiply-add), so every level gives the
    // scalar loop's bits: y = a x; y = y + a x; y = y + x g.
    void (*mul_f32)(float a, const float * x, float * y, size_t n) = nullptr;
    void (*add_mul_f32)(float a, const float * x, float * y, size_t n) = nullptr;
    void (*add_prod_f32)(const float * x, const float * g, float * y, size_t n) = nullptr;
    // Low-rank products over a matrix of outputs x lr stored in groups of kLowrankGroup outputs: weight k of
    // output o at u[(o / G) * lr * G + k * G + o % G] (G = kLowrankGroup; u holds every group that
    // [o0, o0 + n) touches). y[j] = sum_k l[k] u(o0 + j, k) for j < n, lr >= 1, each product rounded on its own
    // and added in k order: the bits of mul_f32(l[0], ...) then add_mul_f32(l[k], ...) for k = 1..lr-1 over
    // the same outputs. Any o0 and n (a group may be partial at either end).
    void (*lowrank_interleaved_f32)(const float * u, size_t lr, const float * l, size_t o0, size_t n,
                                    float * y) = nullptr;
    // y[i] = std::exp(x[i]), y[i] = 1 / (1 + std::exp(-x[i])) (ops::sigmoid) and x[i] / (1 + std::exp(-x[i]))
    // (ops::silu), with libm's expf bits: the
    // vector levels evaluate the algorithm of glibc's expf (a 32-entry table of 2^(i/32) and a cubic, in double),
    // which gives its results bit for bit (tests/ops/vec_exp_test.cpp); lanes outside [-87, 88] call libm.
    // y may alias x.
    void (*exp_f32)(const float * x, float * y, size_t n) = nullptr;
    void (*sigmoid_f32)(const float * x, float * y, size_t n) = nullptr;
    void (*silu_f32)(const float * x, float * y, size_t n) = nullptr;
    // One token of the gated delta rule for one value head (see ops/sequence.h for the maths): the state is read
    // from state_in and the new state written to state_out, which may be state_in itself (in place) or a buffer
    // that does not overlap it; the bits are the same either way.
    void (*gated_delta_step)(const float * state_in, float * state_out, size_t dk, size_t dv, const float * q,
                             const float * k, const float * v, float decay, float beta, float scale,
                             float * out) = nullptr;
};

// The set of a level (built from the list of levels, ops/cpu/levels.h; a level this build lacks gives the
// Scalar set).
const VecKernels & vec_kernels(Isa isa);
const VecKernels & vec_kernels();  // at active_isa()

// Level sets (ISA files; an entry a level leaves unset keeps its base level's).
void add_vec_kernels_scalar(VecKernels & k);
void add_vec_kernels_avx2(VecKernels & k);
void add_vec_kernels_avx512(VecKernels & k);
#if defined(__aarch64__)
void add_vec_kernels_neon(VecKernels & k);
#endif

}  // namespace offgrid::ops::cpu
