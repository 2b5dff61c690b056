#include "model/qwen4exp/forward.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "model/common/hyper_connections.h"
#include "model/common/moe.h"
#include "model/forward_once.h"
#include "model/qwen4exp/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace offgrid::model::qwen4exp {

namespace detail {

void moe_layer(const Batch & b, uint32_t il, const float * f, float * y) {
    moe_ffn(b.hp, b.model.weights().layers[il].moe, b.pool, b.ws, b.n_tokens, f, y);
}

ops::WorkspaceSize moe_bytes(const Hparams & hp, const MoeWeights & m, size_t T) {
    const size_t E = hp.n_embd, n_exp = hp.n_expert, n_used = hp.n_expert_used, n_sh = static_cast<size_t>(m.shared_gate.rows);
    ops::WorkspaceSize s;
    s.main_bytes = ops::arena_bytes<float>(T * n_exp) + ops::arena_bytes<float>(T * n_used * E) +
                   ops::arena_bytes<float>(T * E) + common::routing_bytes(T, n_exp, n_used) +
                   common::run_experts_main_bytes(n_exp, hp.n_ff_exp, T, E, n_used, n_sh);
    s.per_thread_bytes = common::run_experts_thread_bytes(hp.n_ff_exp, n_sh);
    return s;
}

void moe_ffn(const Hparams & hp, const MoeWeights & m, ops::ThreadPool * pool, ops::Workspace & ws, size_t T,
             const float * f, float * y) {
    const size_t E = hp.n_embd, n_exp = hp.n_expert, n_used = hp.n_expert_used;
    const size_t n_ff = hp.n_ff_exp;
    ops::Scope scope(ws.local());
    float * const probs = scope.take<float>(T * n_exp).data();
    float * const expert_out = scope.take<float>(T * n_used * E).data();
    float * const sd = scope.take<float>(T * E).data();

    // Routing: softmax over all experts, the n_used most probable, renormalised. Each expert runs once over the
    // tokens that chose it; the shared expert (sigmoid-gated below) runs in the same parallel regions.
    ops::matmul(m.router, f, T, probs, pool);
    const common::Routing routing = common::route_softmax_top_k(probs, T, n_exp, n_used, scope.arena());
    common::SharedExpert shared;
    shared.gate = m.shared_gate;
    shared.up = m.shared_up;
    shared.down = m.shared_down;
    shared.gate_scale = m.shared_gate_scale;
    shared.up_scale = m.shared_up_scale;
    shared.out = sd;
    common::run_experts(m, n_exp, n_ff, f, T, E, routing, n_used, 0.0f, expert_out, pool, ws, &shared);

    // Routed experts summed in selection order, then the gated shared expert.
    common::weighted_sum(expert_out, routing, T, n_used, E, y);
    for (size_t t = 0; t < T; ++t) {
        float gate_logit = 0.0f;
        for (size_t i = 0; i < E; ++i) gate_logit += m.shared_gate_inp[i] * f[t * E + i];
        const float shared_gate = ops::sigmoid(gate_logit);
        float * yt = y + t * E;
        for (size_t j = 0; j < E; ++j) yt[j] = yt[j] + (sd[t * E + j] * m.shared_down_scale) * shared_gate;
    }
}

}  // namespace detail

ops::WorkspaceSize workspace_size(const Model & model, const WorkspaceLimits & limits) {
    const Hparams & hp = model.hparams();
    const size_t T = std::max<size_t>(1, limits.n_ubatch), E = hp.n_embd, hc = hp.hc;
    const common::GatedHcShape hcs{hp.n_embd, hp.hc, hp.hc_lr, hp.rms_eps};
    // The pass's own buffers: R, a, y, inject, the PLE rows, the output rows.
    size_t own = ops::arena_bytes<float>(T * hc * E) + 2 * ops::arena_bytes<float>(T * E) + ops::arena_bytes<float>(T * hc) +
                 ops::arena_bytes<uint32_t>(T * (hp.has_ple ? hp.ple_heads() : 0)) + ops::arena_bytes<float>(T * hc * E) +
                 ops::arena_bytes<float>(T * E);
    ops::WorkspaceSize block{common::gated_hc_mix_bytes(hcs, T), 0};
    if (hp.has_ple) block = ops::max_of(block, detail::ple_bytes(model, T));
    block = ops::max_of(block, detail::recurrent_bytes(model, T));
    block = ops::max_of(block, detail::attention_bytes(model, T, std::max<size_t>(1, limits.n_seq_cells)));
    for (const LayerWeights & lw : model.weights().layers) block = ops::max_of(block, detail::moe_bytes(hp, lw.moe, T));
    return {own + block.main_bytes, block.per_thread_bytes};
}

void forward(const Model & model, const ForwardContext & fc) {
    const Hparams & hp = model.hparams();
    const memory::Plan & plan = fc.plan;
    const size_t T = plan.tokens.size();
    const uint32_t first = fc.first_layer, end = checked_layer_end(fc, hp.n_layer, static_cast<size_t>(hp.hc) * hp.n_embd);
    if (T == 0) return;
    ops::Arena & arena = fc.workspace.local();
    ops::Scope scope(arena);

    ops::ThreadPool * const pool = fc.pool;
    const detail::Batch b{model, hp, fc.shape, plan, fc.storage, pool, fc.workspace, T, fc.dense};
    const common::GatedHcShape hcs = b.hc_shape();
    const size_t E = hp.n_embd, hc = hp.hc;
    const Weights & w = model.weights();

    // Every element used below is written before it is read.
    float * const R = scope.take<float>(T * hc * E).data();
    float * const a = scope.take<float>(T * E).data();
    float * const y = scope.take<float>(T * E).data();
    float * const inject = scope.take<float>(T * hc).data();
    uint32_t * const ple_rows = scope.take<uint32_t>(hp.has_ple ? T * hp.ple_heads() : 0).data();

    // Embeddings, copied into every hyper-connection stream; or the streams an earlier range left.
    if (first == 0) {
        for (size_t t = 0; t < T; ++t) {
            ops::dequantize_matrix_row(w.token_embd, plan.tokens[t].token, a + t * E);
        }
        common::broadcast_to_streams(a, T, hc, E, R);
    } else {
        std::copy(fc.carry_in->streams.begin(), fc.carry_in->streams.end(), R);
    }
    const bool runs_ple = hp.has_ple && hp.ple_layer >= first && hp.ple_layer < end;
    if (runs_ple) detail::ple_rows(b, ple_rows);

    for (uint32_t il = first; il < end; ++il) {
        if (runs_ple && il == hp.ple_layer) detail::ple_block(b, il, ple_rows, R);
        const LayerWeights & lw = w.layers[il];
        common::gated_hc_mix(hcs, lw.hc_attn, R, T, a, inject, pool, &arena);
        if (hp.is_recurrent[il]) {
            detail::recurrent_layer(b, il, a, y);
        } else {
            detail::attention_layer(b, il, a, y);
        }
        common::gated_hc_combine(hcs, R, y, inject, T);
        common::gated_hc_mix(hcs, lw.hc_ffn, R, T, a, inject, pool, &arena);
        detail::moe_layer(b, il, a, y);
        common::gated_hc_combine(hcs, R, y, inject, T);
    }

    if (end < hp.n_layer) {
        fc.out.carry->streams.assign(R, R + T * hc * E);
        fc.out.carry->side.clear();
        return;
    }
    if (fc.out.wide_hidden) std::copy(R, R + T * hc * E, fc.out.wide_hidden);
    if (fc.out.hidden) common::mean_of_streams(R, T, hc, E, fc.out.hidden);

    // Final mixer and head, for the output rows only.
    if (!fc.out.logits) return;
    size_t n_out = 0;
    for (size_t t = 0; t < T; ++t) n_out += plan.tokens[t].output ? 1 : 0;
    if (n_out == 0) return;
    float * const R_out = scope.take<float>(n_out * hc * E).data();
    for (size_t t = 0, k = 0; t < T; ++t) {
        if (plan.tokens[t].output) std::copy(R + t * hc * E, R + (t + 1) * hc * E, R_out + k++ * hc * E);
    }
    float * const x_out = scope.take<float>(n_out * E).data();
    common::gated_hc_mix(hcs, w.output_hc, R_out, n_out, x_out, nullptr, pool, &arena);
    ops::matmul(w.output, x_out, static_cast<int64_t>(n_out), fc.out.logits, pool);
}

ForwardResult forward_full(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    return forward_once(model, shape, plan, storage, pool, options);
}

std::vector<float> forward(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    ForwardOptions o = options;
    o.logits = true;
    return forward_full(model, shape, plan, storage, pool, o).logits;
}

}  // namespace offgrid::model::qwen4exp
