#include "model/qwen4exp/forward.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "model/common/hyper_connections.h"
#include "model/common/moe.h"
#include "model/qwen4exp/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace offgrid::model::qwen4exp {

namespace detail {

void moe_layer(const Batch & b, uint32_t il, const float * f, float * y) {
    moe_ffn(b.hp, b.model.weights().layers[il].moe, b.pool, b.n_tokens, f, y);
}

void moe_ffn(const Hparams & hp, const MoeWeights & m, ops::ThreadPool * pool, size_t T, const float * f, float * y) {
    const size_t E = hp.n_embd, n_exp = hp.n_expert, n_used = hp.n_expert_used;
    const size_t n_ff = hp.n_ff_exp;

    // Scratch that only grows (per thread), so a decode step allocates nothing here.
    thread_local std::vector<float> probs, expert_out, sd;
    if (probs.size() < T * n_exp) probs.resize(T * n_exp);
    if (expert_out.size() < T * n_used * E) expert_out.resize(T * n_used * E);
    if (sd.size() < T * E) sd.resize(T * E);

    // Routing: softmax over all experts, the n_used most probable, renormalised. Each expert runs once over the
    // tokens that chose it; the shared expert (sigmoid-gated below) runs in the same parallel regions.
    ops::matmul(m.router, f, T, probs.data(), pool);
    const common::Routing routing = common::route_softmax_top_k(probs.data(), T, n_exp, n_used);
    common::SharedExpert shared;
    shared.gate = m.shared_gate;
    shared.up = m.shared_up;
    shared.down = m.shared_down;
    shared.gate_scale = m.shared_gate_scale;
    shared.up_scale = m.shared_up_scale;
    shared.out = sd.data();
    common::run_experts(m, n_exp, n_ff, f, T, E, routing, n_used, 0.0f, expert_out.data(), pool, &shared);

    // Routed experts summed in selection order, then the gated shared expert.
    common::weighted_sum(expert_out.data(), routing, T, n_used, E, y);
    for (size_t t = 0; t < T; ++t) {
        float gate_logit = 0.0f;
        for (size_t i = 0; i < E; ++i) gate_logit += m.shared_gate_inp[i] * f[t * E + i];
        const float shared_gate = ops::sigmoid(gate_logit);
        float * yt = y + t * E;
        for (size_t j = 0; j < E; ++j) yt[j] = yt[j] + (sd[t * E + j] * m.shared_down_scale) * shared_gate;
    }
}

}  // namespace detail

ForwardResult forward_full(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    const Hparams & hp = model.hparams();
    const memory::CacheShape want = model.cache_shape(shape.type_k, shape.type_v);
    if (shape != want) throw Error("forward: the cache shape does not match the model's");
    if (hp.kpool > 0 && plan.kpool != hp.kpool) {
        throw Error("forward: plan pool size " + std::to_string(plan.kpool) + " differs from the model's compress ratio " +
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
    }
    // Every token in exactly one sequence group (the recurrent layers and PLE run along the groups).
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
        if (hp.kpool > 0 && plan.tokens[t].tail.size() >= hp.kpool) {
            throw Error("forward: ubatch token " + std::to_string(t) + ": tail of " +
                        std::to_string(plan.tokens[t].tail.size()) + " cells, the pool size is " + std::to_string(hp.kpool));
        }
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
    const common::GatedHcShape hcs = b.hc_shape();
    const size_t E = hp.n_embd, hc = hp.hc;
    const Weights & w = model.weights();

    // Buffers of the pass, per thread, that only grow (every element used below is written before it is read), so
    // a decode step allocates none of them.
    struct Scratch {
        std::vector<float> R, a, y, inject, R_out, x_out;
        std::vector<uint32_t> ple_rows;
    };
    thread_local Scratch scratch;
    auto sized = [](std::vector<float> & v, size_t n) -> std::vector<float> & {
        if (v.size() < n) v.resize(n);
        return v;
    };
    std::vector<float> & R = sized(scratch.R, T * hc * E);
    std::vector<float> & a = sized(scratch.a, T * E);
    std::vector<float> & y = sized(scratch.y, T * E);
    std::vector<float> & inject = sized(scratch.inject, T * hc);
    std::vector<uint32_t> & ple_rows = scratch.ple_rows;

    // Embeddings, copied into every hyper-connection stream; or the streams an earlier range left.
    if (first == 0) {
        for (size_t t = 0; t < T; ++t) {
            ops::dequantize_matrix_row(w.token_embd, plan.tokens[t].token, a.data() + t * E);
        }
        common::broadcast_to_streams(a.data(), T, hc, E, R.data());
    } else {
        std::copy(options.carry_in->streams.begin(), options.carry_in->streams.end(), R.begin());
    }
    const bool runs_ple = hp.has_ple && hp.ple_layer >= first && hp.ple_layer < end;
    if (runs_ple) {
        if (ple_rows.size() < T * hp.ple_heads()) ple_rows.resize(T * hp.ple_heads());
        detail::ple_rows(b, ple_rows.data());
    }

    for (uint32_t il = first; il < end; ++il) {
        if (runs_ple && il == hp.ple_layer) detail::ple_block(b, il, ple_rows.data(), R.data());
        const LayerWeights & lw = w.layers[il];
        common::gated_hc_mix(hcs, lw.hc_attn, R.data(), T, a.data(), inject.data(), pool);
        if (hp.is_recurrent[il]) {
            detail::recurrent_layer(b, il, a.data(), y.data());
        } else {
            detail::attention_layer(b, il, a.data(), y.data());
        }
        common::gated_hc_combine(hcs, R.data(), y.data(), inject.data(), T);
        common::gated_hc_mix(hcs, lw.hc_ffn, R.data(), T, a.data(), inject.data(), pool);
        detail::moe_layer(b, il, a.data(), y.data());
        common::gated_hc_combine(hcs, R.data(), y.data(), inject.data(), T);
    }

    if (end < hp.n_layer) {
        result.carry.streams.assign(R.begin(), R.begin() + T * hc * E);
        return result;
    }
    if (options.wide_hidden) result.wide_hidden.assign(R.begin(), R.begin() + T * hc * E);
    if (options.hidden) {
        result.hidden.resize(T * E);
        common::mean_of_streams(R.data(), T, hc, E, result.hidden.data());
    }

    // Final mixer and head, for the output rows only.
    size_t n_out = 0;
    for (size_t t = 0; t < T; ++t) n_out += plan.tokens[t].output ? 1 : 0;
    if (n_out == 0) return result;
    std::vector<float> & R_out = sized(scratch.R_out, n_out * hc * E);
    for (size_t t = 0, k = 0; t < T; ++t) {
        if (plan.tokens[t].output) std::copy(R.begin() + t * hc * E, R.begin() + (t + 1) * hc * E, R_out.begin() + k++ * hc * E);
    }
    if (options.logits) {
        std::vector<float> & x_out = sized(scratch.x_out, n_out * E);
        common::gated_hc_mix(hcs, w.output_hc, R_out.data(), n_out, x_out.data(), nullptr, pool);
        result.logits.resize(n_out * hp.n_vocab);
        ops::matmul(w.output, x_out.data(), static_cast<int64_t>(n_out), result.logits.data(), pool);
    }
    return result;
}

std::vector<float> forward(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    ForwardOptions o = options;
    o.logits = true;
    return forward_full(model, shape, plan, storage, pool, o).logits;
}

}  // namespace offgrid::model::qwen4exp
