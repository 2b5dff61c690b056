#include "model/glm5next/gen_model.h"

#include <cmath>
#include <cstdio>
#include <string_view>

#include "common/error.h"
#include "model/common/gen_support.h"

namespace offgrid::model::glm5next {

namespace {

using tensor::ElemType;
using namespace common;

// Tensors seeded by (seed, name), so one tensor's values do not depend on the others.
class Maker {
public:
    Maker(gguf::Writer & w, const GenConfig & c) : w_(w), c_(c) {}
    std::vector<float> draw(const std::string & name, size_t n, float sd, float mean = 0.0f) const {
        GenRng rng(c_.seed * 0x100000001B3ull ^ gen_name_hash(name));
        std::vector<float> v(n);
        for (float & x : v) x = mean + sd * rng.normal();
        return v;
    }
    // {cols, rows(, n_stack)} in the weight type, sd gain / sqrt(cols). Rows not 32-aligned stay F32 for Q8_0.
    void matrix(const std::string & name, int64_t cols, int64_t rows, int64_t n_stack = 1, float gain = 1.0f) {
        std::vector<int64_t> ne{cols, rows};
        if (n_stack > 1) ne.push_back(n_stack);
        const float sd = gain * c_.weight_scale / std::sqrt(static_cast<float>(cols));
        const ElemType type = (c_.weight_type == ElemType::Q8_0 && cols % 32 != 0) ? ElemType::F32 : c_.weight_type;
        w_.add_tensor_f32(name, ne, type, draw(name, static_cast<size_t>(cols * rows * n_stack), sd));
    }
    void f32(const std::string & name, std::vector<int64_t> ne, float sd, float mean = 0.0f) {
        int64_t n = 1;
        for (const int64_t x : ne) n *= x;
        w_.add_tensor_f32(name, ne, ElemType::F32, draw(name, static_cast<size_t>(n), sd, mean));
    }
    void values(const std::string & name, std::vector<int64_t> ne, const std::vector<float> & v) {
        w_.add_tensor_f32(name, ne, ElemType::F32, v);
    }
    void gamma(const std::string & name, int64_t n) { f32(name, {n}, 0.1f, 1.0f); }

private:
    gguf::Writer & w_;
    const GenConfig & c_;
};

uint32_t n_layer_all(const GenConfig & c) { return static_cast<uint32_t>(c.layer_kinds.size()) + (c.nextn ? 1 : 0); }

}  // namespace

const std::vector<std::string> & gen_preset_names() {
    static const std::vector<std::string> names{"tiny", "tiny-dense", "small"};
    return names;
}

GenConfig gen_preset(const std::string & name) {
    GenConfig c;
    c.name = name;
    if (name == "tiny") return c;
    if (name == "tiny-dense") {
        c.top_k = 131072;  // n_top_pool above any pool count: dense causal attention over pools + tail
        return c;
    }
    if (name == "small") {
        c.n_ctx = 8192;
        c.n_embd = 256;
        c.layer_kinds = {0, 0, 0, 1, 0, 0, 0, 1};
        c.indexer_types = {1, 1, 1, 1, 1, 1, 1, 0};
        c.n_head = 8;
        c.q_lora_rank = 128;
        c.kv_lora_rank = 128;
        c.key_mla = 32;
        c.value_mla = 32;
        c.kda_head_dim = 32;
        c.idx_dim = 32;
        c.top_k = 256;
        c.n_ff = 512;
        c.n_expert = 8;
        c.n_ff_exp = 128;
        return c;
    }
    unknown_preset(name, gen_preset_names());
}

void validate(const GenConfig & c) {
    check_gen_weight_type(c.weight_type);
    check_setting_range("n_vocab", c.n_vocab, 2, 1u << 20);
    check_setting_range("n_ctx", c.n_ctx, 1, 1u << 22);
    check_setting_range("n_embd", c.n_embd, 1, 16384);
    check_setting_range("layers", c.layer_kinds.size(), 1, 256);
    if (c.indexer_types.size() != c.layer_kinds.size()) bad_setting("indexer_types", "one entry per layer");
    bool first_dsa = true;
    for (size_t il = 0; il < c.layer_kinds.size(); ++il) {
        if (c.layer_kinds[il] > 1) bad_setting("layer_kinds", "0 (KDA) or 1 (DSA)");
        if (c.indexer_types[il] > 1) bad_setting("indexer_types", "0 (shared) or 1 (full)");
        if (c.layer_kinds[il] == 1) {
            if (first_dsa && c.indexer_types[il] == 0) bad_setting("indexer_types", "the first DSA layer needs a full indexer");
            first_dsa = false;
        }
    }
    check_setting_range("n_head", c.n_head, 1, 256);
    check_setting_range("q_lora_rank", c.q_lora_rank, 1, 8192);
    check_setting_range("kv_lora_rank", c.kv_lora_rank, 1, 8192);
    check_setting_range("key_mla", c.key_mla, 1, 1024);
    check_setting_range("value_mla", c.value_mla, 1, 1024);
    check_setting_range("conv_kernel", c.conv_kernel, 2, 64);
    check_setting_range("kda_head_dim", c.kda_head_dim, 1, 512);
    if (c.bounded_decay && !(c.gate_lower_bound < 0.0f)) bad_setting("gate_lower_bound", "must be < 0");
    check_setting_range("idx_heads", c.idx_heads, 1, 256);
    check_setting_range("idx_dim", c.idx_dim, 1, 1024);
    check_setting_range("kpool", c.kpool, 2, 1024);
    check_setting_range("top_k", c.top_k, 1, 1u << 24);
    if (c.top_k % c.kpool != 0) bad_setting("top_k", "must be a multiple of kpool " + std::to_string(c.kpool));
    if (c.hc != 4) bad_setting("hc", "must be 4");
    check_setting_range("sinkhorn_iterations", c.sinkhorn_iterations, 1, 1000);
    check_setting_range("n_dense", c.n_dense, 0, static_cast<uint64_t>(c.layer_kinds.size()));
    check_setting_range("n_ff", c.n_ff, 1, 1u << 20);
    check_setting_range("n_expert", c.n_expert, 1, 1024);
    check_setting_range("n_expert_used", c.n_expert_used, 1, c.n_expert);
    check_setting_range("n_shared", c.n_shared, 1, 64);
    check_setting_range("n_ff_exp", c.n_ff_exp, 1, 1u << 20);
    if (!(c.weight_scale > 0.0f) || !std::isfinite(c.weight_scale)) bad_setting("weight_scale", "must be > 0");
}

std::string describe(const GenConfig & c) {
    std::string kinds;
    for (uint32_t k : c.layer_kinds) kinds += k ? 'D' : 'K';
    char buf[400];
    std::snprintf(buf, sizeof(buf),
                  "glm5-next '%s' seed %llu: n_vocab %u, n_ctx %u, n_embd %u, layers %s%s, heads %u, kv_lora %u, "
                  "indexer %ux%u top_k %u kpool %u, experts %u/%u, decay %s, clamp %s, weights %s",
                  c.name.c_str(), static_cast<unsigned long long>(c.seed), c.n_vocab, c.n_ctx, c.n_embd, kinds.c_str(),
                  c.nextn ? "+MTP" : "", c.n_head, c.kv_lora_rank, c.idx_heads, c.idx_dim, c.top_k, c.kpool,
                  c.n_expert_used, c.n_expert, c.bounded_decay ? "bounded" : "softplus", c.clamp ? "on" : "off",
                  std::string(tensor::traits(c.weight_type).name).c_str());
    return buf;
}

gguf::Writer generate_model(const GenConfig & c, const std::vector<gguf::KeyValue> & extra) {
    validate(c);
    gguf::Writer w;
    const std::string a = "glm5-next.";
    const uint32_t n_trunk = static_cast<uint32_t>(c.layer_kinds.size()), n_all = n_layer_all(c);
    w.set_string("general.architecture", "glm5-next");
    w.set_string("general.name", c.name);
    w.set_u32(a + "context_length", c.n_ctx);
    w.set_u32(a + "embedding_length", c.n_embd);
    w.set_u32(a + "block_count", n_all);
    w.set_u32(a + "nextn_predict_layers", c.nextn ? 1 : 0);
    w.set_u32(a + "vocab_size", c.n_vocab);
    w.set_u32(a + "attention.head_count", c.n_head);
    std::vector<uint32_t> kinds = c.layer_kinds;
    if (c.nextn) kinds.push_back(1);
    w.set_u32s(a + "attention.head_count_kv", kinds);
    std::vector<bool> types;
    for (uint32_t t : c.indexer_types) types.push_back(t != 0);
    w.set_bools(a + "attention.indexer.types", types);
    w.set_u32(a + "attention.key_length", c.kv_lora_rank);
    w.set_u32(a + "attention.value_length", c.kv_lora_rank);
    w.set_u32(a + "rope.dimension_count", 0);
    w.set_u32(a + "attention.key_length_mla", c.key_mla);
    w.set_u32(a + "attention.value_length_mla", c.value_mla);
    w.set_u32(a + "attention.q_lora_rank", c.q_lora_rank);
    w.set_u32(a + "attention.kv_lora_rank", c.kv_lora_rank);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
    w.set_f32(a + "attention.layer_norm_epsilon", c.ln_eps);
    w.set_u32(a + "ssm.conv_kernel", c.conv_kernel);
    w.set_u32(a + "kda.head_dim", c.kda_head_dim);
    if (c.bounded_decay) w.set_f32(a + "kda.gate_lower_bound", c.gate_lower_bound);
    w.set_u32(a + "attention.indexer.head_count", c.idx_heads);
    w.set_u32(a + "attention.indexer.key_length", c.idx_dim);
    w.set_u32(a + "attention.indexer.top_k", c.top_k);
    w.set_u32(a + "attention.indexer.kpool", c.kpool);
    w.set_bool(a + "attention.indexer.kpool_select_tail", true);
    w.set_u32(a + "hyper_connection.count", c.hc);
    w.set_u32(a + "hyper_connection.sinkhorn_iterations", c.sinkhorn_iterations);
    w.set_f32(a + "hyper_connection.epsilon", c.hc_eps);
    w.set_u32(a + "feed_forward_length", c.n_ff);
    w.set_u32(a + "leading_dense_block_count", c.n_dense);
    w.set_u32(a + "expert_count", c.n_expert);
    w.set_u32(a + "expert_used_count", c.n_expert_used);
    w.set_u32(a + "expert_shared_count", c.n_shared);
    w.set_u32(a + "expert_feed_forward_length", c.n_ff_exp);
    w.set_u32(a + "expert_gating_func", 2);
    w.set_bool(a + "expert_weights_norm", c.expert_weights_norm);
    w.set_f32(a + "expert_weights_scale", c.expert_weights_scale);
    if (c.clamp) {
        std::vector<float> exp(n_all), shexp(n_all);
        for (uint32_t il = 0; il < n_all; ++il) {
            exp[il] = 0.6f + 0.6f * static_cast<float>(il % 5) / 4.0f;         // 0.6 .. 1.2
            shexp[il] = 0.6f + 0.6f * static_cast<float>((il + 2) % 5) / 4.0f;
        }
        w.set_f32s(a + "swiglu_clamp_exp", exp);
        w.set_f32s(a + "swiglu_clamp_shexp", shexp);
    }
    for (const auto & kv : extra) w.set(kv.key, kv.value);

    Maker t(w, c);
    const int64_t E = c.n_embd, H = c.n_head, hd = c.kda_head_dim, d_in = int64_t(c.n_head) * c.kda_head_dim;
    const int64_t K = c.conv_kernel, R = c.kv_lora_rank, Rq = c.q_lora_rank, Dn = c.key_mla, Dv = c.value_mla;
    const int64_t Di = c.idx_dim, Hi = c.idx_heads, kp = c.kpool, hc = c.hc, n_mix = (2 + hc) * hc;
    const int64_t F = c.n_ff_exp, Fs = int64_t(c.n_ff_exp) * c.n_shared, n_exp = c.n_expert;
    t.f32("token_embd.weight", {E, c.n_vocab}, 1.0f);
    t.gamma("output_norm.weight", E);
    t.matrix("output.weight", E, c.n_vocab, 1, 4.0f);
    for (uint32_t il = 0; il < n_all; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const bool trunk = il < n_trunk;
        t.gamma(p + "attn_norm.weight", E);
        t.gamma(p + "ffn_norm.weight", E);
        if (trunk) {
            for (const char * k : {"hc_attn", "hc_ffn"}) {
                t.matrix(p + k + "_fn.weight", hc * E, n_mix);
                t.f32(p + k + "_base.weight", {n_mix}, 0.5f);
                t.f32(p + k + "_scale.weight", {3}, 0.2f, 1.0f);
            }
        }
        if (trunk && kinds[il] == 0) {
            for (const char * x : {"q", "k", "v"}) {
                t.matrix(p + "attn_" + x + ".weight", E, d_in);
                t.f32(p + "ssm_conv1d_" + x + ".weight", {K, 1, d_in, 1}, 1.0f / std::sqrt(float(K)));
            }
            t.matrix(p + "ssm_f_a.weight", E, hd);
            t.matrix(p + "ssm_f_b.weight", hd, d_in);
            t.f32(p + "ssm_dt.bias", {d_in}, 0.5f);
            std::vector<float> av = t.draw(p + "ssm_a", static_cast<size_t>(H), 1.0f);
            for (float & x : av) x = -std::fabs(x) - 0.05f;  // every head decays
            t.values(p + "ssm_a", {H}, av);
            t.matrix(p + "ssm_beta.weight", E, H);
            t.matrix(p + "ssm_g_a.weight", E, hd);
            t.matrix(p + "ssm_g_b.weight", hd, d_in);
            t.gamma(p + "ssm_norm.weight", hd);
            t.matrix(p + "attn_output.weight", d_in, E);
        } else {
            t.matrix(p + "attn_q_a.weight", E, Rq);
            t.gamma(p + "attn_q_a_norm.weight", Rq);
            t.matrix(p + "attn_q_b.weight", Rq, H * Dn);
            t.matrix(p + "attn_kv_a_mqa.weight", E, R);
            t.gamma(p + "attn_kv_a_norm.weight", R);
            t.matrix(p + "attn_k_b.weight", Dn, R, H);
            t.matrix(p + "attn_v_b.weight", R, Dv, H);
            t.matrix(p + "attn_output.weight", H * Dv, E);
            if (!trunk || c.indexer_types[il] == 1) {
                t.matrix(p + "indexer.attn_k.weight", E, Di);
                t.gamma(p + "indexer.k_norm.weight", Di);
                t.f32(p + "indexer.k_norm.bias", {Di}, 0.1f);
                t.f32(p + "indexer_compressor_gate.weight", {E, Di}, 1.0f / std::sqrt(float(E)));
                t.f32(p + "indexer_compressor_ape.weight", {Di, kp}, 0.5f);
                t.matrix(p + "indexer.attn_q_b.weight", Rq, Hi * Di);
                t.matrix(p + "indexer.proj.weight", E, Hi);
            }
        }
        if (trunk && il < c.n_dense) {
            t.matrix(p + "ffn_gate.weight", E, c.n_ff);
            t.matrix(p + "ffn_up.weight", E, c.n_ff);
            t.matrix(p + "ffn_down.weight", c.n_ff, E);
        } else {
            t.f32(p + "ffn_gate_inp.weight", {E, n_exp}, 1.0f / std::sqrt(float(E)));
            t.f32(p + "exp_probs_b.bias", {n_exp}, 0.1f);
            t.matrix(p + "ffn_gate_exps.weight", E, F, n_exp);
            t.matrix(p + "ffn_up_exps.weight", E, F, n_exp);
            t.matrix(p + "ffn_down_exps.weight", F, E, n_exp);
            t.matrix(p + "ffn_gate_shexp.weight", E, Fs);
            t.matrix(p + "ffn_up_shexp.weight", E, Fs);
            t.matrix(p + "ffn_down_shexp.weight", Fs, E);
        }
        if (!trunk) {
            t.matrix(p + "nextn.eh_proj.weight", 2 * E, E);
            t.gamma(p + "nextn.enorm.weight", E);
            t.gamma(p + "nextn.hnorm.weight", E);
            t.gamma(p + "nextn.shared_head_norm.weight", E);
        }
    }
    return w;
}

}  // namespace offgrid::model::glm5next
