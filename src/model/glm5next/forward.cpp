#include "model/glm5next/forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "model/common/hyper_connections.h"
#include "model/common/moe.h"
#include "model/forward_once.h"
#include "model/glm5next/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace offgrid::model::glm5next {

namespace detail {

void ffn_layer(const Batch & b, uint32_t il, const float * f, float * y) {
    const Hparams & hp = b.hp;
    const FfnWeights & w = b.model.weights().layers[il].ffn;
    const size_t T = b.n_tokens, E = hp.n_embd;
    ops::Scope scope(b.ws.local());
    // Dense SwiGLU (leading layers) or the shared expert: both clamp with swiglu_clamp_shexp.
    auto swiglu_ffn = [&](float * out) {
        const size_t n = w.gate.rows;
        ops::Scope inner(scope.arena());
        float * const g = inner.take<float>(T * n).data();
        float * const u = inner.take<float>(T * n).data();
        ops::matmul(w.gate, f, T, g, b.pool);
        ops::matmul(w.up, f, T, u, b.pool);
        for (size_t i = 0; i < T * n; ++i) g[i] = common::swiglu(g[i], u[i], hp.clamp_shexp[il]);
        ops::matmul(w.down, g, T, out, b.pool);
    };
    if (w.dense) {
        swiglu_ffn(y);
        return;
    }
    const size_t n_exp = hp.n_expert, n_used = hp.n_expert_used;
    float * const logits = scope.take<float>(T * n_exp).data();
    ops::matmul(w.router, f, T, logits, b.pool);
    const common::Routing r = common::route_sigmoid_biased(logits, w.probs_bias.data(), T, n_exp, n_used,
                                                           hp.expert_weights_norm, hp.expert_weights_scale,
                                                           scope.arena());
    float * const expert_out = scope.take<float>(T * n_used * E).data();
    float * const shared = scope.take<float>(T * E).data();
    common::run_experts(w.experts, n_exp, hp.n_ff_exp, f, T, E, r, n_used, hp.clamp_exp[il], expert_out, b.pool, b.ws);
    common::weighted_sum(expert_out, r, T, n_used, E, y);
    swiglu_ffn(shared);
    for (size_t i = 0; i < T * E; ++i) y[i] = y[i] + shared[i];  // the shared expert is not gated
}

ops::WorkspaceSize ffn_bytes(const Model & m, size_t T) {
    const Hparams & hp = m.hparams();
    const size_t E = hp.n_embd, n_exp = hp.n_expert, n_used = hp.n_expert_used;
    ops::WorkspaceSize s;
    for (const LayerWeights & lw : m.weights().layers) {
        const size_t swiglu = 2 * ops::arena_bytes<float>(T * static_cast<size_t>(lw.ffn.gate.rows));
        size_t main = swiglu;
        if (!lw.ffn.dense) {
            main = ops::arena_bytes<float>(T * n_exp) + common::routing_bytes(T, n_exp, n_used) +
                   ops::arena_bytes<float>(T * n_used * E) + ops::arena_bytes<float>(T * E) +
                   std::max(swiglu, common::run_experts_main_bytes(n_exp, hp.n_ff_exp, T, E, n_used, 0));
            s.per_thread_bytes = std::max(s.per_thread_bytes, common::run_experts_thread_bytes(hp.n_ff_exp, 0));
        }
        s.main_bytes = std::max(s.main_bytes, main);
    }
    return s;
}

void selection_to_side(const Selection & selection, size_t n_tokens, std::vector<uint32_t> & side) {
    side.clear();
    if (!selection.set) return;
    side.assign(selection.count.begin(), selection.count.begin() + static_cast<long>(n_tokens));
    for (size_t t = 0; t < n_tokens; ++t) {
        const std::span<const uint32_t> cells = selection.of(t);
        side.insert(side.end(), cells.begin(), cells.end());
    }
}

void selection_from_side(const std::vector<uint32_t> & side, size_t n_tokens, Selection & selection) {
    selection.set = false;
    if (side.empty()) return;  // no full-indexer layer ran before this range
    if (side.size() < n_tokens) throw Error("forward: the carried selection is for another ubatch");
    size_t at = n_tokens;
    for (size_t t = 0; t < n_tokens; ++t) {
        const uint32_t n = side[t];
        if (n > selection.stride || n > side.size() - at) throw Error("forward: the carried selection does not fit this ubatch");
        selection.count[t] = n;
        std::copy(side.begin() + static_cast<long>(at), side.begin() + static_cast<long>(at + n),
                  selection.cells.begin() + static_cast<long>(t * selection.stride));
        at += n;
    }
    if (at != side.size()) throw Error("forward: the carried selection is for another ubatch");
    selection.set = true;
}

}  // namespace detail

ops::WorkspaceSize workspace_size(const Model & model, const WorkspaceLimits & limits) {
    const Hparams & hp = model.hparams();
    const size_t T = std::max<size_t>(1, limits.n_ubatch), E = hp.n_embd, hc = hp.hc;
    const size_t n_cells = std::max<size_t>(1, limits.n_seq_cells);
    const common::MhcShape hcs{E, hc, hp.rms_eps, hp.hc_eps, hp.sinkhorn_iterations};
    // The pass's own buffers: R, a, y, post, comb, the selection (sized for a dense run too, which selects every
    // pool), the output rows and the head's input.
    const size_t stride = detail::selection_stride(hp, n_cells, true);
    const size_t own = ops::arena_bytes<float>(T * hc * E) + 2 * ops::arena_bytes<float>(T * E) +
                       ops::arena_bytes<float>(T * hc) + ops::arena_bytes<float>(T * hc * hc) +
                       ops::arena_bytes<uint32_t>(T * stride) + ops::arena_bytes<uint32_t>(T) +
                       ops::arena_bytes<float>(T * hc * E) + ops::arena_bytes<float>(T * E);
    ops::WorkspaceSize block{common::mhc_bytes(hcs, T), 0};
    block = ops::max_of(block, detail::kda_bytes(hp, T));
    block = ops::max_of(block, detail::dsa_bytes(hp, T, n_cells));
    block = ops::max_of(block, detail::ffn_bytes(model, T));
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
    const size_t E = hp.n_embd, hc = hp.hc;
    const Weights & w = model.weights();
    const common::MhcShape hcs{E, hc, hp.rms_eps, hp.hc_eps, hp.sinkhorn_iterations};

    float * const R = scope.take<float>(T * hc * E).data();
    float * const a = scope.take<float>(T * E).data();
    float * const y = scope.take<float>(T * E).data();
    float * const post = scope.take<float>(T * hc).data();
    float * const comb = scope.take<float>(T * hc * hc).data();
    if (first == 0) {
        for (size_t t = 0; t < T; ++t) ops::dequantize_matrix_row(w.token_embd, plan.tokens[t].token, a + t * E);
        common::broadcast_to_streams(a, T, hc, E, R);
    } else {
        std::copy(fc.carry_in->streams.begin(), fc.carry_in->streams.end(), R);  // what an earlier range left
    }

    // The selection's stride: the most cells a token of this plan may select.
    size_t n_cells = 1;
    for (const memory::TokenPlan & tp : plan.tokens) n_cells = std::max<size_t>(n_cells, tp.n_visible);
    detail::Selection selection;
    selection.stride = detail::selection_stride(hp, n_cells, fc.dense);
    selection.cells = scope.take<uint32_t>(T * selection.stride);
    selection.count = scope.take<uint32_t>(T);
    if (first > 0) detail::selection_from_side(fc.carry_in->side, T, selection);
    for (uint32_t il = first; il < end; ++il) {
        const LayerWeights & lw = w.layers[il];
        common::mhc_pre(hcs, lw.hc_attn, R, T, a, post, comb, pool, &arena);
        for (size_t t = 0; t < T; ++t) ops::rms_norm(&a[t * E], E, hp.rms_eps, lw.attn_norm.data(), &a[t * E]);
        if (hp.is_recurrent[il]) {
            detail::kda_layer(b, il, a, y);
        } else {
            detail::dsa_layer(b, il, a, y, selection);
        }
        common::mhc_post(hcs, R, y, post, comb, T, &arena);
        common::mhc_pre(hcs, lw.hc_ffn, R, T, a, post, comb, pool, &arena);
        for (size_t t = 0; t < T; ++t) ops::rms_norm(&a[t * E], E, hp.rms_eps, lw.ffn_norm.data(), &a[t * E]);
        detail::ffn_layer(b, il, a, y);
        common::mhc_post(hcs, R, y, post, comb, T, &arena);
    }

    if (end < hp.n_layer) {
        fc.out.carry->streams.assign(R, R + T * hc * E);
        detail::selection_to_side(selection, T, fc.out.carry->side);
        return;
    }

    // The head's input: RMSNorm(mean of the streams) * output_norm.
    auto head_input = [&](const float * streams, size_t n, float * x) {
        common::mean_of_streams(streams, n, hc, E, x);
        for (size_t t = 0; t < n; ++t) ops::rms_norm(&x[t * E], E, hp.rms_eps, w.output_norm.data(), &x[t * E]);
    };
    if (fc.out.hidden) head_input(R, T, fc.out.hidden);

    // Head: the mean of the streams, normed, for the output rows only.
    if (!fc.out.logits) return;
    size_t n_out = 0;
    for (size_t t = 0; t < T; ++t) n_out += plan.tokens[t].output ? 1 : 0;
    if (n_out == 0) return;
    float * const R_out = scope.take<float>(n_out * hc * E).data();
    for (size_t t = 0, k = 0; t < T; ++t) {
        if (plan.tokens[t].output) std::copy(R + t * hc * E, R + (t + 1) * hc * E, R_out + k++ * hc * E);
    }
    float * const x = scope.take<float>(n_out * E).data();
    head_input(R_out, n_out, x);
    ops::matmul(w.output, x, n_out, fc.out.logits, pool);
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

}  // namespace offgrid::model::glm5next
