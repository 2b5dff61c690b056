// Test helper: a random-weight qwen4exp model with tiny shapes, built as an in-memory GGUF. Layers alternate
// Gated DeltaNet (layer 0 carries PLE) and full attention with QSA at compress ratio `ratio`.
#pragma once

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gguf_builder.h"

namespace offgrid::test {

struct TinyConfig {
    uint32_t ratio = 4;          // QSA compress ratio on the attention layers (0 = dense)
    uint32_t top_k = 16;         // indexer budget (tokens)
    uint32_t n_layer = 4;
    bool ple = true;
    bool tied_output = false;
    bool fused_gate_up = true;
    bool with_scales = true;     // random .scale sidecars, plus biases/input scales that must be ignored
    tensor::ElemType matrix_type = tensor::ElemType::F32;  // for matrices whose rows are 32-aligned
    uint32_t seed = 1;
    uint32_t d_state = 8;        // Gated DeltaNet head size (4 value heads, 2 key heads)
};

inline GgufBuilder tiny_model(const TinyConfig & c) {
    const uint32_t V = 64, E = 32, H = 2, Hkv = 1, D = 16, n_rot = 8, hc = 3, hc_lr = 8;
    const uint32_t n_exp = 4, n_used = 2, n_ff = 32, n_sh = 32;
    const uint32_t d_conv = 4, d_state = c.d_state, Hv = 4, Hk = 2, Hi = 4, Di = 16;
    const uint32_t N = 3, G = 2, Dp = 8, Kp = 3;
    GgufBuilder g;
    const std::string a = "qwen4exp.";
    g.set_string("general.architecture", "qwen4exp");
    g.set_u32(a + "context_length", 4096);
    g.set_u32(a + "embedding_length", E);
    g.set_u32(a + "block_count", c.n_layer);
    g.set_u32(a + "expert_feed_forward_length", n_ff);
    g.set_u32(a + "expert_shared_feed_forward_length", n_sh);
    g.set_u32(a + "expert_count", n_exp);
    g.set_u32(a + "expert_used_count", n_used);
    g.set_u32(a + "attention.head_count", H);
    g.set_u32(a + "attention.head_count_kv", Hkv);
    g.set_u32(a + "attention.key_length", D);
    g.set_u32(a + "attention.value_length", D);
    g.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
    g.set_u32(a + "rope.dimension_count", n_rot);
    g.set_f32(a + "rope.freq_base", 10000.0f);
    g.set_array(a + "rope.dimension_sections", GgufBuilder::T::I32, std::vector<int32_t>{2, 1, 1, 0});
    g.set_u32(a + "full_attention_interval", 2);
    g.set_u32(a + "ssm.conv_kernel", d_conv);
    g.set_u32(a + "ssm.inner_size", d_state * Hv);
    g.set_u32(a + "ssm.state_size", d_state);
    g.set_u32(a + "ssm.time_step_rank", Hv);
    g.set_u32(a + "ssm.group_count", Hk);
    g.set_u32(a + "hyper_connection.count", hc);
    g.set_u32(a + "hyper_connection.low_rank", hc_lr);
    g.set_u32(a + "attention.indexer.head_count", Hi);
    g.set_u32(a + "attention.indexer.key_length", Di);
    g.set_u32(a + "attention.indexer.top_k", c.top_k);
    std::vector<uint32_t> ratios(c.n_layer);
    for (uint32_t i = 0; i < c.n_layer; ++i) ratios[i] = (i % 2 == 1) ? c.ratio : 0;
    g.set_array(a + "attention.compress_ratios", GgufBuilder::T::U32, ratios);
    const std::vector<uint64_t> offsets{0, 64, 131, 200}, vocab{64, 67, 69, 71};
    if (c.ple) {
        g.set_array(a + "ple.layers", GgufBuilder::T::U32, std::vector<uint32_t>{0});
        g.set_u32(a + "ple.ngram_size", N);
        g.set_u32(a + "ple.heads_per_ngram", G);
        g.set_u32(a + "ple.conv_kernel", Kp);
        g.set_u32(a + "ple.eos_token_id", 0);
        g.set_u32(a + "embedding_length_per_layer_input", Dp);
        g.set_array(a + "ple.layer_multipliers", GgufBuilder::T::U64, std::vector<uint64_t>{1, 1000003, 998244353});
        g.set_array(a + "ple.head_offsets", GgufBuilder::T::U64, offsets);
        g.set_array(a + "ple.head_vocab_sizes", GgufBuilder::T::U64, vocab);
    }

    std::mt19937 rng(c.seed);
    auto rnd = [&](size_t n, float sd, float mean = 0.0f) {
        std::normal_distribution<float> dist(mean, sd);
        std::vector<float> v(n);
        for (auto & x : v) x = dist(rng);
        return v;
    };
    auto mat_type = [&](int64_t cols) { return cols % 32 == 0 ? c.matrix_type : tensor::ElemType::F32; };
    auto mat = [&](const std::string & name, int64_t cols, int64_t rows, int64_t stack = 1) {
        std::vector<int64_t> ne{cols, rows};
        if (stack > 1) ne.push_back(stack);
        g.add_tensor(name, ne, rnd(cols * rows * stack, 0.3f), mat_type(cols));
    };
    auto gamma = [&](const std::string & name, std::vector<int64_t> ne) {
        int64_t n = 1;
        for (auto x : ne) n *= x;
        g.add_tensor(name, ne, rnd(n, 0.1f, 1.0f));
    };
    auto scale = [&](const std::string & name, int64_t n = 1) {
        if (!c.with_scales) return;
        g.add_tensor(name + ".scale", {n}, rnd(n, 0.2f, 1.0f));
        g.add_tensor(name + ".input_scale", {n}, rnd(n, 5.0f));  // ignored by the model
    };
    const int64_t dim = int64_t(hc) * E;
    mat("token_embd.weight", E, V);
    if (!c.tied_output) mat("output.weight", E, V);
    gamma("output_hc_norm.weight", {E, hc});
    mat("output_hc_down.weight", dim, hc_lr);
    mat("output_hc_up.weight", hc_lr, dim);
    if (c.ple) g.add_tensor("per_layer_token_embd.weight", {Dp, 280}, rnd(Dp * 280, 1.0f));
    for (uint32_t il = 0; il < c.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        for (const char * k : {"hc_attn", "hc_ffn"}) {
            gamma(p + k + "_norm.weight", {E, hc});
            mat(p + k + "_down.weight", dim, hc_lr);
            mat(p + k + "_up.weight", hc_lr, dim);
            mat(p + k + "_inject.weight", dim, hc);
        }
        if (il % 2 == 0) {
            const int64_t conv_dim = 2 * d_state * Hk + d_state * Hv, vdim = d_state * Hv;
            mat(p + "attn_qkv.weight", E, conv_dim);
            mat(p + "attn_gate.weight", E, vdim);
            g.add_tensor(p + "ssm_conv1d.weight", {d_conv, conv_dim}, rnd(d_conv * conv_dim, 0.5f));
            g.add_tensor(p + "ssm_dt.bias", {Hv}, rnd(Hv, 0.5f));
            auto av = rnd(Hv, 1.0f);
            for (auto & x : av) x = -std::fabs(x);
            g.add_tensor(p + "ssm_a", {Hv}, av);
            mat(p + "ssm_beta.weight", E, Hv);
            mat(p + "ssm_alpha.weight", E, Hv);
            gamma(p + "ssm_norm.weight", {d_state});
            mat(p + "ssm_out.weight", vdim, E);
            for (const char * s : {"attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha", "ssm_out"}) scale(p + s);
            if (c.ple && il == 0) {
                mat(p + "ple_key.weight", E, dim);
                mat(p + "ple_value.weight", E, E);
                gamma(p + "ple_norm_key.weight", {E, hc});
                gamma(p + "ple_norm_query.weight", {E, hc});
                gamma(p + "ple_norm_conv.weight", {E, hc});
                g.add_tensor(p + "ple_conv1d.weight", {Kp, dim}, rnd(Kp * dim, 0.5f));
            }
        } else {
            mat(p + "attn_q.weight", E, 2 * D * H);
            mat(p + "attn_k.weight", E, D * Hkv);
            mat(p + "attn_v.weight", E, D * Hkv);
            mat(p + "attn_output.weight", D * H, E);
            if (c.with_scales) {
                g.add_tensor(p + "attn_q.bias", {2 * D * H}, rnd(2 * D * H, 5.0f));  // ignored by the model
                g.add_tensor(p + "attn_k.bias", {D * Hkv}, rnd(D * Hkv, 5.0f));
            }
            for (const char * s : {"attn_q", "attn_k", "attn_v", "attn_output"}) scale(p + s);
            gamma(p + "attn_q_norm.weight", {D});
            gamma(p + "attn_k_norm.weight", {D});
            mat(p + "indexer.q_proj.weight", E, Hi * Di);
            mat(p + "indexer.k_proj.weight", E, Di);
            gamma(p + "indexer.q_norm.weight", {Di});
            gamma(p + "indexer.k_norm.weight", {Di});
        }
        g.add_tensor(p + "ffn_gate_inp.weight", {E, n_exp}, rnd(E * n_exp, 0.3f));
        if (c.fused_gate_up) {
            mat(p + "ffn_gate_up_exps.weight", E, 2 * n_ff, n_exp);
        } else {
            mat(p + "ffn_gate_exps.weight", E, n_ff, n_exp);
            mat(p + "ffn_up_exps.weight", E, n_ff, n_exp);
            scale(p + "ffn_gate_exps", n_exp);
            scale(p + "ffn_up_exps", n_exp);
        }
        mat(p + "ffn_down_exps.weight", n_ff, E, n_exp);
        scale(p + "ffn_down_exps", n_exp);
        g.add_tensor(p + "ffn_gate_inp_shexp.weight", {E}, rnd(E, 0.3f));
        mat(p + "ffn_gate_shexp.weight", E, n_sh);
        mat(p + "ffn_up_shexp.weight", E, n_sh);
        mat(p + "ffn_down_shexp.weight", n_sh, E);
        for (const char * s : {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"}) scale(p + s);
    }
    return g;
}

}  // namespace offgrid::test
