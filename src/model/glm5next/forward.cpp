#include "model/glm5next/forward.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "model/common/hyper_connections.h"
#include "model/common/moe.h"
#include "model/glm5next/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace offgrid::model::glm5next {

namespace detail {

void ffn_layer(const Batch & b, uint32_t il, const float * f, float * y) {
    const Hparams & hp = b.hp;
    const FfnWeights & w = b.model.weights().layers[il].ffn;
    const size_t T = b.n_tokens, E = hp.n_embd;
    // Dense SwiGLU (leading layers) or the shared expert: both clamp with swiglu_clamp_shexp.
    auto swiglu_ffn = [&](float * out) {
        const size_t n = w.gate.rows;
        std::vector<float> g(T * n), u(T * n);
        ops::matmul(w.gate, f, T, g.data(), b.pool);
        ops::matmul(w.up, f, T, u.data(), b.pool);
        for (size_t i = 0; i < T * n; ++i) g[i] = common::swiglu(g[i], u[i], hp.clamp_shexp[il]);
        ops::matmul(w.down, g.data(), T, out, b.pool);
    };
    if (w.dense) {
        swiglu_ffn(y);
        return;
    }
    const size_t n_exp = hp.n_expert, n_used = hp.n_expert_used;
    std::vector<float> logits(T * n_exp);
    ops::matmul(w.router, f, T, logits.data(), b.pool);
    const common::Routing r = common::route_sigmoid_biased(logits.data(), w.probs_bias.data(), T, n_exp, n_used,
                                                           hp.expert_weights_norm, hp.expert_weights_scale);
    std::vector<float> expert_out(T * n_used * E), shared(T * E);
    common::run_experts(w.experts, n_exp, hp.n_ff_exp, f, T, E, r, n_used, hp.clamp_exp[il], expert_out.data(), b.pool);
    common::weighted_sum(expert_out.data(), r, T, n_used, E, y);
    swiglu_ffn(shared.data());
    for (size_t i = 0; i < T * E; ++i) y[i] = y[i] + shared[i];  // the shared expert is not gated
}

std::vector<uint32_t> selection_to_side(const Selection & selection) {
    std::vector<uint32_t> side;
    side.push_back(static_cast<uint32_t>(selection.size()));
    for (const auto & cells : selection) {
        side.push_back(static_cast<uint32_t>(cells.size()));
        side.insert(side.end(), cells.begin(), cells.end());
    }
    return side;
}

Selection selection_from_side(const std::vector<uint32_t> & side, size_t n_tokens) {
    Selection selection;
    if (side.empty() || side[0] == 0) return selection;  // no full-indexer layer ran before this range
    if (side[0] != n_tokens) throw Error("forward: the carried selection is for another ubatch");
    selection.resize(n_tokens);
    size_t at = 1;
    for (size_t t = 0; t < n_tokens; ++t) {
        if (at >= side.size() || side[at] > side.size() - at - 1) throw Error("forward: the carried selection is cut");
        const size_t n = side[at++];
        selection[t].assign(side.begin() + static_cast<long>(at), side.begin() + static_cast<long>(at + n));
        at += n;
    }
    return selection;
}

}  // namespace detail

ForwardResult forward_full(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    const Hparams & hp = model.hparams();
    const memory::CacheShape want = model.cache_shape(shape.type_k, shape.type_v);
    if (shape != want) throw Error("forward: the cache shape does not match the model's");
    if (plan.kpool != hp.kpool) {
        throw Error("forward: plan pool size " + std::to_string(plan.kpool) + " differs from the model's kpool " +
                    std::to_string(hp.kpool));
    }
    const size_t T = plan.tokens.size();
    for (size_t t = 0; t < T; ++t) {
        const auto & tp = plan.tokens[t];
        if (tp.token < 0 || static_cast<uint32_t>(tp.token) >= hp.n_vocab) {
            throw Error("forward: ubatch token " + std::to_string(t) + ": id " + std::to_string(tp.token) +
                        " out of range (n_vocab " + std::to_string(hp.n_vocab) + ")");
        }
        if (tp.pos < 0) throw Error("forward: ubatch token " + std::to_string(t) + ": negative position");
        if (tp.tail.size() >= hp.kpool) throw Error("forward: ubatch token " + std::to_string(t) + ": tail too long");
    }
    std::vector<uint8_t> grouped(T, 0);
    for (const auto & g : plan.groups) {
        for (uint32_t t : g.tokens) {
            if (t >= T || grouped[t]++) {
                throw Error("forward: sequence group of seq " + std::to_string(g.seq) + " lists ubatch token " +
                            std::to_string(t) + " that is out of range or already in a group");
            }
        }
    }
    for (size_t t = 0; t < T; ++t) {
        if (!grouped[t]) throw Error("forward: ubatch token " + std::to_string(t) + " is in no sequence group");
    }
    const uint32_t first = options.first_layer, end = options.end_layer == 0 ? hp.n_layer : options.end_layer;
    if (first >= end || end > hp.n_layer) {
        throw Error("forward: layer range [" + std::to_string(first) + ", " + std::to_string(end) +
                    ") is not inside the model's " + std::to_string(hp.n_layer) + " layers");
    }
    if (first > 0 && (options.carry_in == nullptr || options.carry_in->streams.size() != T * hp.hc * hp.n_embd)) {
        throw Error("forward: a range from layer " + std::to_string(first) + " needs the streams of " +
                    std::to_string(T) + " tokens");
    }
    ForwardResult result;
    if (T == 0) return result;

    const detail::Batch b{model, hp, shape, plan, storage, pool, T, options.dense};
    const size_t E = hp.n_embd, hc = hp.hc;
    const Weights & w = model.weights();
    const common::MhcShape hcs{E, hc, hp.rms_eps, hp.hc_eps, hp.sinkhorn_iterations};

    std::vector<float> R(T * hc * E), a(T * E), y(T * E), post(T * hc), comb(T * hc * hc);
    detail::Selection selection;
    if (first == 0) {
        for (size_t t = 0; t < T; ++t) ops::dequantize_matrix_row(w.token_embd, plan.tokens[t].token, a.data() + t * E);
        common::broadcast_to_streams(a.data(), T, hc, E, R.data());
    } else {
        R = options.carry_in->streams;
        selection = detail::selection_from_side(options.carry_in->side, T);
    }

    for (uint32_t il = first; il < end; ++il) {
        const LayerWeights & lw = w.layers[il];
        common::mhc_pre(hcs, lw.hc_attn, R.data(), T, a.data(), post.data(), comb.data(), pool);
        for (size_t t = 0; t < T; ++t) ops::rms_norm(&a[t * E], E, hp.rms_eps, lw.attn_norm.data(), &a[t * E]);
        if (hp.is_recurrent[il]) {
            detail::kda_layer(b, il, a.data(), y.data());
        } else {
            detail::dsa_layer(b, il, a.data(), y.data(), selection);
        }
        common::mhc_post(hcs, R.data(), y.data(), post.data(), comb.data(), T);
        common::mhc_pre(hcs, lw.hc_ffn, R.data(), T, a.data(), post.data(), comb.data(), pool);
        for (size_t t = 0; t < T; ++t) ops::rms_norm(&a[t * E], E, hp.rms_eps, lw.ffn_norm.data(), &a[t * E]);
        detail::ffn_layer(b, il, a.data(), y.data());
        common::mhc_post(hcs, R.data(), y.data(), post.data(), comb.data(), T);
    }

    if (end < hp.n_layer) {
        result.carry.streams = std::move(R);
        result.carry.side = detail::selection_to_side(selection);
        return result;
    }

    auto head_input = [&](const float * streams, size_t n) {
        std::vector<float> x(n * E);
        common::mean_of_streams(streams, n, hc, E, x.data());
        for (size_t t = 0; t < n; ++t) ops::rms_norm(&x[t * E], E, hp.rms_eps, w.output_norm.data(), &x[t * E]);
        return x;
    };
    if (options.hidden) result.hidden = head_input(R.data(), T);

    // Head: the mean of the streams, normed, for the output rows only.
    std::vector<float> R_out;
    for (size_t t = 0; t < T; ++t) {
        if (plan.tokens[t].output) R_out.insert(R_out.end(), R.begin() + t * hc * E, R.begin() + (t + 1) * hc * E);
    }
    const size_t n_out = R_out.size() / (hc * E);
    if (n_out == 0 || !options.logits) return result;
    const std::vector<float> x = head_input(R_out.data(), n_out);
    result.logits.resize(n_out * hp.n_vocab);
    ops::matmul(w.output, x.data(), n_out, result.logits.data(), pool);
    return result;
}

std::vector<float> forward(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    ForwardOptions o = options;
    o.logits = true;
    return forward_full(model, shape, plan, storage, pool, o).logits;
}

}  // namespace offgrid::model::glm5next
