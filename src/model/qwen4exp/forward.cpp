#include "model/qwen4exp/forward.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "model/qwen4exp/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace offgrid::model {

namespace detail {

void hc_mix(const Batch & b, const HcWeights & w, const float * R, size_t n, float * mixed, float * inject) {
    const size_t E = b.hp.n_embd, hc = b.hp.hc, dim = hc * E, lr = b.hp.hc_lr;
    std::vector<float> xn(n * dim), lo(n * lr), g(n * dim);
    for (size_t t = 0; t < n; ++t) {
        for (size_t h = 0; h < hc; ++h) {
            ops::rms_norm(R + t * dim + h * E, E, b.hp.rms_eps, w.norm.data() + h * E, xn.data() + t * dim + h * E);
        }
    }
    ops::matmul(w.down, xn.data(), n, lo.data(), b.pool);
    const float inv_hc = 1.0f / static_cast<float>(hc);
    for (float & v : lo) v = ops::silu(v * inv_hc);  // scaled before the activation
    ops::matmul(w.up, lo.data(), n, g.data(), b.pool);
    for (size_t t = 0; t < n; ++t) {
        const float * x = xn.data() + t * dim;
        const float * gt = g.data() + t * dim;
        float * out = mixed + t * E;
        for (size_t i = 0; i < E; ++i) {
            float sum = 0.0f;
            for (size_t h = 0; h < hc; ++h) sum += x[h * E + i] * ops::sigmoid(gt[h * E + i]);
            out[i] = sum * inv_hc;
        }
    }
    if (inject) ops::matmul(w.inject, xn.data(), n, inject, b.pool);
}

void hc_combine(const Batch & b, float * R, const float * y, const float * inject) {
    const size_t E = b.hp.n_embd, hc = b.hp.hc;
    const float inv_hc = 1.0f / static_cast<float>(hc);
    for (size_t t = 0; t < b.n_tokens; ++t) {
        for (size_t h = 0; h < hc; ++h) {
            const float w = 2.0f * ops::sigmoid(inject[t * hc + h] * inv_hc);
            float * r = R + (t * hc + h) * E;
            const float * yt = y + t * E;
            for (size_t i = 0; i < E; ++i) r[i] += w * yt[i];
        }
    }
}

void moe_layer(const Batch & b, uint32_t il, const float * f, float * y) {
    const MoeWeights & m = b.model.weights().layers[il].moe;
    const size_t T = b.n_tokens, E = b.hp.n_embd, n_exp = b.hp.n_expert, n_used = b.hp.n_expert_used;
    const size_t n_ff = b.hp.n_ff_exp, n_sh = b.hp.n_ff_shexp;

    // Routing: softmax over all experts, the n_used most probable, renormalised.
    std::vector<float> probs(T * n_exp);
    ops::matmul(m.router, f, T, probs.data(), b.pool);
    std::vector<uint32_t> chosen(T * n_used);
    std::vector<float> weight(T * n_used);
    for (size_t t = 0; t < T; ++t) {
        float * p = probs.data() + t * n_exp;
        ops::softmax(p, n_exp);
        const auto sel = ops::top_k(p, n_exp, n_used);
        float sum = 0.0f;
        for (size_t k = 0; k < n_used; ++k) sum += p[sel[k]];
        sum = std::max(sum, 6.103515625e-5f);
        for (size_t k = 0; k < n_used; ++k) {
            chosen[t * n_used + k] = sel[k];
            weight[t * n_used + k] = p[sel[k]] / sum;
        }
    }

    // Each expert runs once over the tokens that chose it.
    std::vector<float> expert_out(T * n_used * E);
    for (size_t e = 0; e < n_exp; ++e) {
        std::vector<size_t> slots;  // t * n_used + k
        for (size_t s = 0; s < T * n_used; ++s) {
            if (chosen[s] == e) slots.push_back(s);
        }
        if (slots.empty()) continue;
        const size_t n = slots.size();
        std::vector<float> x(n * E), gate(n * n_ff), up(n * n_ff), down(n * E);
        for (size_t i = 0; i < n; ++i) std::memcpy(&x[i * E], f + (slots[i] / n_used) * E, E * sizeof(float));
        if (m.fused_gate_up) {
            ops::matmul(m.gate_up.row_slice(e * 2 * n_ff, n_ff), x.data(), n, gate.data(), b.pool);
            ops::matmul(m.gate_up.row_slice(e * 2 * n_ff + n_ff, n_ff), x.data(), n, up.data(), b.pool);
        } else {
            ops::matmul(m.gate.row_slice(e * n_ff, n_ff), x.data(), n, gate.data(), b.pool);
            ops::matmul(m.up.row_slice(e * n_ff, n_ff), x.data(), n, up.data(), b.pool);
        }
        for (size_t i = 0; i < n * n_ff; ++i) {
            gate[i] = ops::silu(gate[i] * m.gate_scale[e]) * (up[i] * m.up_scale[e]);
        }
        ops::matmul(m.down.row_slice(e * E, E), gate.data(), n, down.data(), b.pool);
        for (size_t i = 0; i < n; ++i) {
            float * out = &expert_out[slots[i] * E];
            for (size_t j = 0; j < E; ++j) out[j] = down[i * E + j] * m.down_scale[e];
        }
    }

    // Shared expert with its sigmoid gate.
    std::vector<float> sg(T * n_sh), su(T * n_sh), sd(T * E);
    ops::matmul(m.shared_gate, f, T, sg.data(), b.pool);
    ops::matmul(m.shared_up, f, T, su.data(), b.pool);
    for (size_t i = 0; i < T * n_sh; ++i) {
        sg[i] = ops::silu(sg[i] * m.shared_gate_scale) * (su[i] * m.shared_up_scale);
    }
    ops::matmul(m.shared_down, sg.data(), T, sd.data(), b.pool);

    for (size_t t = 0; t < T; ++t) {
        float gate_logit = 0.0f;
        for (size_t i = 0; i < E; ++i) gate_logit += m.shared_gate_inp[i] * f[t * E + i];
        const float shared_gate = ops::sigmoid(gate_logit);
        float * yt = y + t * E;
        for (size_t j = 0; j < E; ++j) {
            // Routed experts summed in selection order, then the gated shared expert.
            float acc = 0.0f;
            for (size_t k = 0; k < n_used; ++k) acc += expert_out[(t * n_used + k) * E + j] * weight[t * n_used + k];
            yt[j] = acc + (sd[t * E + j] * m.shared_down_scale) * shared_gate;
        }
    }
}

}  // namespace detail

std::vector<float> forward(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    const Hparams & hp = model.hparams();
    const memory::CacheShape want = model.cache_shape(shape.type_k, shape.type_v);
    if (shape.n_attn_layers != want.n_attn_layers || shape.kv_width != want.kv_width ||
        shape.idx_width != want.idx_width || shape.n_recr_layers != want.n_recr_layers ||
        shape.conv_floats != want.conv_floats || shape.ssm_floats != want.ssm_floats ||
        shape.ple_floats != want.ple_floats) {
        throw Error("forward: the cache shape does not match the model's");
    }
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
    std::vector<float> logits;
    if (T == 0) return logits;

    const detail::Batch b{model, hp, shape, plan, storage, pool, T, options.qsa_dense};
    const size_t E = hp.n_embd, hc = hp.hc;
    const Weights & w = model.weights();

    // Embeddings, copied into every hyper-connection stream.
    std::vector<float> R(T * hc * E), a(T * E), y(T * E), inject(T * hc);
    for (size_t t = 0; t < T; ++t) {
        ops::dequantize_matrix_row(w.token_embd, plan.tokens[t].token, a.data() + t * E);
        for (size_t h = 0; h < hc; ++h) std::memcpy(&R[(t * hc + h) * E], &a[t * E], E * sizeof(float));
    }
    std::vector<float> u;
    if (hp.has_ple) {
        u.resize(T * E);
        detail::ple_embeddings(b, u.data());
    }

    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        if (hp.has_ple && il == hp.ple_layer) detail::ple_block(b, il, u.data(), R.data());
        const LayerWeights & lw = w.layers[il];
        detail::hc_mix(b, lw.hc_attn, R.data(), T, a.data(), inject.data());
        if (hp.is_recurrent[il]) {
            detail::recurrent_layer(b, il, a.data(), y.data());
        } else {
            detail::attention_layer(b, il, a.data(), y.data());
        }
        detail::hc_combine(b, R.data(), y.data(), inject.data());
        detail::hc_mix(b, lw.hc_ffn, R.data(), T, a.data(), inject.data());
        detail::moe_layer(b, il, a.data(), y.data());
        detail::hc_combine(b, R.data(), y.data(), inject.data());
    }

    // Final mixer and head, for the output rows only.
    std::vector<float> R_out;
    for (size_t t = 0; t < T; ++t) {
        if (plan.tokens[t].output) R_out.insert(R_out.end(), R.begin() + t * hc * E, R.begin() + (t + 1) * hc * E);
    }
    const size_t n_out = R_out.size() / (hc * E);
    if (n_out == 0) return logits;
    std::vector<float> x_out(n_out * E);
    detail::hc_mix(b, w.output_hc, R_out.data(), n_out, x_out.data(), nullptr);
    logits.resize(n_out * hp.n_vocab);
    ops::matmul(w.output, x_out.data(), n_out, logits.data(), pool);
    return logits;
}

}  // namespace offgrid::model
