// Hyper-connections: the residual is hc streams of E floats per token (R[t][h][i] at (t*hc + h)*E + i). A block
// reads one mix of the streams and writes its output back into every stream with its own weights. Two families:
//  * gated mean (qwen4exp): per-stream RMSNorm, a low-rank sigmoid gate per element, the mean over streams;
//    the output goes back with 2 sigmoid(inject / hc) per stream.
//  * manifold-constrained, mHC (glm5-next): one RMSNorm over all hc*E values, a linear map to pre, post and a
//    hc x hc mixing matrix made doubly stochastic by Sinkhorn iterations; X'[d] = post_d y + sum_s C[d,s] X[s].
// Shared helpers: copy an embedding into every stream, the plain mean of the streams.
#pragma once

#include <cstddef>
#include <vector>

#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "ops/workspace.h"

namespace offgrid::model::common {

// R[t][h] = x[t] for every stream h.
void broadcast_to_streams(const float * x, size_t n, size_t hc, size_t E, float * R);
// out[t][i] = (sum_h R[t][h][i]) * (1/hc), streams summed in order.
void mean_of_streams(const float * R, size_t n, size_t hc, size_t E, float * out);

// ---- gated mean (qwen4exp) ----

struct GatedHcWeights {
    std::vector<float> norm;   // hc x E, stream-major (gamma[h][i] at h*E + i)
    ops::Matrix down;          // lr x hc*E
    ops::Matrix up;            // hc*E x lr
    ops::Matrix inject;        // hc x hc*E (absent for the final mixer)
    // `up` dequantised in the grouped layout of ops::lowrank_interleaved_n, set by prepare_gated_hc: weight k of
    // output o at (o / G) * lr * G + k * G + o % G (G = ops::kLowrankGroup, the outputs padded with zeros to a
    // multiple of G). Its rows are only lr wide, so as a matrix product it would cost a horizontal sum per
    // output; grouped, a block of outputs is lr products per output read from one contiguous run (the weights
    // come from memory at every call: the step's other weights evict them).
    // Empty: the mixer multiplies `up` as a matrix.
    std::vector<float> up_grouped;
};

// Ranks up to this multiply `up` grouped: their rows are too short for a matrix product to pay its horizontal sum
// per output. Wider ranks (the real model's 320) multiply `up` as it is in the file, over the pool: a grouped
// f32 copy of a quantised `up` would read 4-6 times its bytes at every mixer.
inline constexpr size_t kGroupedUpMaxRank = 32;

// Fills w.up_grouped from w.up (once, at load) when the rank is at most kGroupedUpMaxRank; else leaves it empty.
void prepare_gated_hc(GatedHcWeights & w);

struct GatedHcShape {
    size_t E, hc, lr;
    float eps;                 // of the per-stream RMSNorm
};

// Mixes n token residuals R (n x hc x E) into the block input `mixed` (n x E) and, when `inject` is non-null,
// the hc inject logits per token (n x hc). Working space comes from `scratch` (given back on return; null: a
// private arena, which allocates); gated_hc_mix_bytes(s, n) bytes of it.
void gated_hc_mix(const GatedHcShape & s, const GatedHcWeights & w, const float * R, size_t n, float * mixed,
                  float * inject, ops::ThreadPool * pool, ops::Arena * scratch = nullptr);
size_t gated_hc_mix_bytes(const GatedHcShape & s, size_t n);
// R[t][h] += 2 sigmoid(inject[t][h] / hc) * y[t].
void gated_hc_combine(const GatedHcShape & s, float * R, const float * y, const float * inject, size_t n);

// ---- manifold-constrained (glm5-next) ----

struct MhcWeights {
    ops::Matrix fn;            // (2 + hc) hc x hc*E
    std::vector<float> base;   // (2 + hc) hc
    std::vector<float> scale;  // 3: alpha_pre, alpha_post, alpha_comb
};

struct MhcShape {
    size_t E, hc;
    float rms_eps;             // of the weightless RMSNorm over all hc*E inputs
    float eps;                 // hyper_connection.epsilon: pre += eps, Sinkhorn terms and denominators
    unsigned sinkhorn_iterations;
};

// Per token: mixed block input a (E), post weights (hc) and the mixing matrix C (hc x hc, C[d*hc + s]).
// Working space as gated_hc_mix's: mhc_bytes(s, n) bytes of `scratch`, which covers mhc_post too.
void mhc_pre(const MhcShape & s, const MhcWeights & w, const float * R, size_t n, float * a, float * post,
             float * comb, ops::ThreadPool * pool, ops::Arena * scratch = nullptr);
// R[t][d] = post[t][d] y[t] + sum_s C[t][d][s] R_old[t][s] (post term first, then s in order).
void mhc_post(const MhcShape & s, float * R, const float * y, const float * post, const float * comb, size_t n,
              ops::Arena * scratch = nullptr);
size_t mhc_bytes(const MhcShape & s, size_t n);
// The Sinkhorn normalisation of one hc x hc logit matrix L[d*hc + s] (d = destination stream, s = source),
// in place: softmax over d for each s, + eps, normalise over s; then (iterations - 1) times over d, over s.
// col: hc floats of working space.
void sinkhorn(float * L, size_t hc, float eps, unsigned iterations, float * col);

}  // namespace offgrid::model::common
