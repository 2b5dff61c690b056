// Mixture of experts shared by the models: routers (which experts, with what weight, per token) and the expert
// runner (each expert once over the tokens that chose it, SwiGLU with an optional clamp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "ops/workspace.h"

namespace offgrid::model::common {

// A stack of n_expert SwiGLU experts of width n_ff.
struct ExpertWeights {
    // Either fused gate_up (per expert 2*n_ff rows: gate then up) or separate gate and up (n_ff rows each).
    bool fused_gate_up = false;
    ops::Matrix gate_up, gate, up;  // all experts stacked along rows
    ops::Matrix down;               // n_expert * E rows of n_ff
    std::vector<float> gate_scale, up_scale, down_scale;  // per expert (1 when absent)
    std::shared_ptr<const void> rows16;  // the bytes of the matrices group_expert_rows made 16-row groups
};

// With offgrid::expert_rows16(): each q4_K matrix of w (gate_up, gate, up, down) whose experts are whole 16-row
// groups becomes a copy in 16-row groups (ops/rows16.h), owned by w.rows16; the others stay. Same results.
void group_expert_rows(ExpertWeights & w, int64_t n_expert);

// chosen[t * n_used + k] and weight[...] for k in selection order; taken from the caller's arena.
struct Routing {
    std::span<uint32_t> chosen;
    std::span<float> weight;
};

// Softmax over all experts, the n_used most probable, their weights renormalised (floor 6.103515625e-5).
// logits: T x n_expert, overwritten with the probabilities. The routing lives in `scratch` (taken, not released).
Routing route_softmax_top_k(float * logits, size_t T, size_t n_expert, size_t n_used, ops::Arena & scratch);

// Sigmoid scores; selection by score + bias (the bias only chooses), weights from the unbiased scores, then
// optionally renormalised (floor 6.103515625e-5) and scaled (scale 0 or 1: unscaled).
Routing route_sigmoid_biased(const float * logits, const float * bias, size_t T, size_t n_expert, size_t n_used,
                             bool normalise, float scale, ops::Arena & scratch);

// SwiGLU with an optional limit L (0: none): min(silu(g), L) * clamp(u, -L, L) when L > 1e-6, else silu(g) * u.
inline float swiglu(float g, float u, float limit);

// A shared SwiGLU expert over every token, run in the same parallel regions as the routed experts:
// out (T x E) = down(swiglu(gate(f) * gate_scale, up(f) * up_scale, clamp_limit)), down's scale left to the caller.
struct SharedExpert {
    ops::Matrix gate, up, down;
    float gate_scale = 1.0f, up_scale = 1.0f, clamp_limit = 0.0f;
    float * out = nullptr;
};

// Runs the chosen experts on f (T x E): out[(t * n_used + k) * E + j] is expert chosen[t*n_used + k]'s output
// for token t (not yet weighted). gate/up/down scales multiply the matrices' outputs as the weights say. Every
// expert runs once over the tokens that chose it; all the gate and up products (and the shared expert's, when
// given) share one parallel region, all the down products a second one. Each output is the same dot whatever
// the grouping, so a token's result does not depend on the other tokens of the call. Its buffers come from
// `workspace` (the calling thread's arena, given back on return, and the workers' arenas in the SwiGLU region).
void run_experts(const ExpertWeights & w, size_t n_expert, size_t n_ff, const float * f, size_t T, size_t E,
                 const Routing & r, size_t n_used, float clamp_limit, float * out, ops::ThreadPool * pool,
                 ops::Workspace & workspace, const SharedExpert * shared = nullptr);

// Bytes run_experts takes from the calling thread's arena, and from each other thread's.
size_t run_experts_main_bytes(size_t n_expert, size_t n_ff, size_t T, size_t E, size_t n_used, size_t n_shared_ff);
size_t run_experts_thread_bytes(size_t n_ff, size_t n_shared_ff);
// Bytes a router takes (the routing it returns and its working space).
size_t routing_bytes(size_t T, size_t n_expert, size_t n_used);

// y[t][j] = sum_k weight[t][k] * out[t][k][j], summed in selection order.
void weighted_sum(const float * out, const Routing & r, size_t T, size_t n_used, size_t E, float * y);

// ---- inline ----

// swiglu with silu(g) already computed (s).
inline float swiglu_of_silu(float s, float u, float limit) {
    if (limit > 1e-6f) {
        const float a = s < limit ? s : limit;
        const float v = u < -limit ? -limit : (u > limit ? limit : u);
        return a * v;
    }
    return s * u;
}

inline float swiglu(float g, float u, float limit) { return swiglu_of_silu(ops::silu(g), u, limit); }

}  // namespace offgrid::model::common
