#include "model/qwen4exp/gen_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "common/error.h"
#include "model/common/gen_support.h"

namespace offgrid::model::qwen4exp {

namespace {

using tensor::ElemType;
using namespace common;

bool is_attention_layer(const GenConfig & c, uint32_t il) { return (il + 1) % c.attn_interval == 0; }

uint32_t ple_heads(const GenConfig & c) { return (c.ple_ngram - 1) * c.ple_heads_per_ngram; }

// Adds tensors with weights seeded by (seed, tensor name), so a tensor's values do not depend on the others.
class TensorMaker {
public:
    TensorMaker(gguf::Writer & w, const GenConfig & c) : w_(w), c_(c) {}

    static std::vector<float> draw(uint64_t seed, const std::string & name, size_t n, float sd, float mean = 0.0f) {
        GenRng rng(seed * 0x100000001B3ull ^ gen_name_hash(name));
        std::vector<float> v(n);
        for (float & x : v) x = mean + sd * rng.normal();
        return v;
    }

    // The values are drawn while the file is written, so a file larger than memory can be made.
    void add_drawn(const std::string & name, std::vector<int64_t> ne, ElemType type, float sd, float mean = 0.0f) {
        size_t n = 1;
        for (const int64_t x : ne) n *= static_cast<size_t>(x);
        w_.add_tensor_f32_lazy(name, std::move(ne), type,
                               [seed = c_.seed, name, n, sd, mean] { return draw(seed, name, n, sd, mean); });
    }

    // A projection {cols, rows} (or a stack of n_stack of them) in the chosen weight type; standard deviation
    // gain / sqrt(cols) keeps each output about as large as its input.
    void matrix(const std::string & name, int64_t cols, int64_t rows, int64_t n_stack = 1, float gain = 1.0f) {
        std::vector<int64_t> ne{cols, rows};
        if (n_stack > 1) ne.push_back(n_stack);
        const float sd = gain * c_.weight_scale / std::sqrt(static_cast<float>(cols));
        // Q8_0 blocks are 32 wide; narrower rows stay F32, as quantisers leave them.
        const ElemType type = (c_.weight_type == ElemType::Q8_0 && cols % 32 != 0) ? ElemType::F32 : c_.weight_type;
        add_drawn(name, std::move(ne), type, sd);
    }

    // Small F32 vectors and kernels.
    void f32(const std::string & name, std::vector<int64_t> ne, float sd, float mean = 0.0f) {
        add_drawn(name, std::move(ne), ElemType::F32, sd, mean);
    }
    void f32_values(const std::string & name, std::vector<int64_t> ne, const std::vector<float> & v) {
        w_.add_tensor_f32(name, ne, ElemType::F32, v);
    }

    // A norm gamma as the converter stores it: 1 + w with w small (Gemma-style zero-centred, folded).
    void gamma(const std::string & name, std::vector<int64_t> ne) { f32(name, std::move(ne), 0.1f, 1.0f); }

private:
    gguf::Writer & w_;
    const GenConfig & c_;
};

uint32_t file_type(ElemType t) {
    switch (t) {
        case ElemType::F16: return 1;
        case ElemType::Q8_0: return 7;
        case ElemType::BF16: return 32;
        default: return 0;
    }
}

}  // namespace

const std::vector<std::string> & gen_preset_names() {
    static const std::vector<std::string> names{"tiny", "small", "bench", "bench-small", "scale"};
    return names;
}

GenConfig gen_preset(const std::string & name) {
    GenConfig c;  // the defaults are the tiny preset
    c.name = name;
    if (name == "tiny") return c;
    if (name == "small") {
        c.n_ctx = 8192;
        c.n_embd = 256;
        c.n_layer = 8;
        c.attn_interval = 4;
        c.n_head = 8;
        c.n_head_kv = 2;
        c.head_dim = 32;
        c.n_rot = 16;
        c.n_expert = 8;
        c.n_ff_exp = 128;
        c.n_ff_shexp = 256;
        c.ssm_d_state = 32;
        c.ssm_n_v_heads = 8;
        c.ssm_n_k_heads = 4;
        c.top_k = 256;
        c.idx_dim = 32;
        return c;
    }
    if (name == "bench") {
        // The shape of every speed figure of the project: one file serves offgrid and llama.cpp.
        c.n_vocab = 16384;  // the byte vocabulary padded with unused tokens
        c.n_ctx = 131072;
        c.n_embd = 1024;
        c.n_layer = 8;
        c.attn_interval = 4;
        c.n_head = 8;
        c.n_head_kv = 2;
        c.head_dim = 128;
        c.n_rot = 64;
        c.n_expert = 16;
        c.n_expert_used = 4;
        c.n_ff_exp = 256;
        c.n_ff_shexp = 256;
        c.ssm_d_conv = 4;
        c.ssm_d_state = 128;
        c.ssm_n_v_heads = 8;
        c.ssm_n_k_heads = 4;
        c.hc = 4;
        c.hc_lr = 8;
        c.qsa_ratio = 4;
        c.top_k = 2048;
        c.idx_heads = 4;
        c.idx_dim = 128;
        c.ple_ngram = 3;
        c.ple_heads_per_ngram = 2;
        c.ple_conv_kernel = 4;
        return c;
    }
    if (name == "scale") {
        // The file of record for speed figures: the real model's per-layer widths (spec qwen4exp-mtp.md section
        // 1: E 2560, HC 4 / rank 320, 24/2 heads of 256, n_rot 64, indexer 4 x 128, top_k 2048, r 4, GDN 32 value /
        // 16 key heads of 128, experts of 640 and a shared 640, vocabulary 248320), with 24 layers and 32
        // experts (top-10) so that its BF16 file fits a 24 GB machine.
        c.n_vocab = 248320;
        c.n_ctx = 131072;
        c.n_embd = 2560;
        c.n_layer = 24;
        c.attn_interval = 4;
        c.n_head = 24;
        c.n_head_kv = 2;
        c.head_dim = 256;
        c.n_rot = 64;
        c.n_expert = 32;
        c.n_expert_used = 10;
        c.n_ff_exp = 640;
        c.n_ff_shexp = 640;
        c.ssm_d_conv = 4;
        c.ssm_d_state = 128;
        c.ssm_n_v_heads = 32;
        c.ssm_n_k_heads = 16;
        c.hc = 4;
        c.hc_lr = 320;
        c.qsa_ratio = 4;
        c.top_k = 2048;
        c.idx_heads = 4;
        c.idx_dim = 128;
        c.ple_ngram = 3;
        c.ple_heads_per_ngram = 2;
        c.ple_conv_kernel = 4;
        return c;
    }
    if (name == "bench-small") {
        // Long-context runs on a small CPU (modest widths, 64k cells, r = 8 so the
        // pool scores that a sparse decode reads grow slowly with depth); bench_decode_depth uses it.
        c.n_ctx = 65536;
        c.n_embd = 256;
        c.n_layer = 4;
        c.attn_interval = 2;
        c.n_head = 8;
        c.n_head_kv = 2;
        c.head_dim = 32;
        c.n_rot = 16;
        c.n_expert = 4;
        c.n_ff_exp = 256;
        c.n_ff_shexp = 256;
        c.ssm_d_state = 32;
        c.ssm_n_v_heads = 4;
        c.ssm_n_k_heads = 2;
        c.qsa_ratio = 8;
        c.top_k = 256;
        c.idx_heads = 2;
        c.idx_dim = 16;
        return c;
    }
    unknown_preset(name, gen_preset_names());
}

void validate(const GenConfig & c) {
    check_gen_weight_type(c.weight_type);
    check_setting_range("n_vocab", c.n_vocab, 2, 1u << 20);
    check_setting_range("n_ctx", c.n_ctx, 1, 1u << 22);
    check_setting_range("n_embd", c.n_embd, 1, 65536);
    check_setting_range("n_layer", c.n_layer, 1, 512);
    check_setting_range("attn_interval", c.attn_interval, 1, 512);
    check_setting_range("n_head", c.n_head, 1, 1024);
    check_setting_range("n_head_kv", c.n_head_kv, 1, c.n_head);
    if (c.n_head % c.n_head_kv != 0) bad_setting("n_head_kv", "must divide n_head");
    check_setting_range("head_dim", c.head_dim, 2, 1024);
    if (c.n_rot == 0 || c.n_rot % 2 != 0 || c.n_rot > c.head_dim) bad_setting("n_rot", "must be even, > 0 and at most head_dim");
    if (!(c.rope_base > 0.0f) || !std::isfinite(c.rope_base)) bad_setting("rope_base", "must be > 0");
    if (!(c.rms_eps >= 0.0f) || !std::isfinite(c.rms_eps)) bad_setting("rms_eps", "must be >= 0");
    check_setting_range("n_expert", c.n_expert, 1, 1024);
    check_setting_range("n_expert_used", c.n_expert_used, 1, c.n_expert);
    check_setting_range("n_ff_exp", c.n_ff_exp, 1, 1u << 20);
    check_setting_range("n_ff_shexp", c.n_ff_shexp, 1, 1u << 20);
    check_setting_range("ssm_d_conv", c.ssm_d_conv, 1, 64);
    check_setting_range("ssm_d_state", c.ssm_d_state, 1, 1024);
    check_setting_range("ssm_n_v_heads", c.ssm_n_v_heads, 1, 1024);
    check_setting_range("ssm_n_k_heads", c.ssm_n_k_heads, 1, c.ssm_n_v_heads);
    if (c.ssm_n_v_heads % c.ssm_n_k_heads != 0) bad_setting("ssm_n_k_heads", "must divide ssm_n_v_heads");
    check_setting_range("hc", c.hc, 2, 64);
    check_setting_range("hc_lr", c.hc_lr, 1, 4096);
    check_setting_range("idx_heads", c.idx_heads, 1, 1024);
    check_setting_range("idx_dim", c.idx_dim, 1, 4096);
    check_setting_range("top_k", c.top_k, 1, 1u << 24);
    check_setting_range("qsa_ratio", c.qsa_ratio, 0, 65536);
    bool has_attention = false;
    for (uint32_t il = 0; il < c.n_layer; ++il) has_attention = has_attention || is_attention_layer(c, il);
    if (c.qsa_ratio > 0 && has_attention) {
        if (c.top_k % c.qsa_ratio != 0) bad_setting("top_k", "must be a multiple of the QSA ratio " + std::to_string(c.qsa_ratio));
        if (c.idx_dim < c.n_rot) bad_setting("idx_dim", "must be >= n_rot");
    }
    if (!(c.weight_scale > 0.0f) || !std::isfinite(c.weight_scale)) bad_setting("weight_scale", "must be > 0");
    check_setting_range("eos_token", c.eos_token, 0, c.n_vocab - 1);
    if (c.ple) {
        if (is_attention_layer(c, 0)) bad_setting("ple", "the PLE layer (0) must be a Gated DeltaNet layer (attn_interval > 1)");
        check_setting_range("ple_ngram", c.ple_ngram, 2, 8);
        check_setting_range("ple_heads", ple_heads(c), 1, 64);
        if (c.n_embd % ple_heads(c) != 0) {
            bad_setting("n_embd", "must be a multiple of the PLE head count " + std::to_string(ple_heads(c)));
        }
        check_setting_range("ple_conv_kernel", c.ple_conv_kernel, 1, 64);
        check_setting_range("ple_head_vocab", c.ple_head_vocab, 1, 1u << 24);
    }
    // Keep files within reason: every matrix (and so the file) under 4 GiB of F32.
    const uint64_t E = c.n_embd;
    const uint64_t biggest = std::max<uint64_t>({E * c.n_vocab, E * c.n_ff_exp * c.n_expert,
                                       E * 2ull * c.head_dim * c.n_head, uint64_t(c.hc) * E * E});
    if (biggest > (1ull << 30)) bad_setting("sizes", "a weight matrix would exceed 2^30 elements");
}

std::string describe(const GenConfig & c) {
    char buf[400];
    std::snprintf(buf, sizeof(buf),
                  "qwen4exp '%s' seed %llu: n_vocab %u, n_ctx %u, n_embd %u, %u layers (attention every %u), "
                  "heads %u/%u x %u, experts %u/%u, QSA r=%u top_k=%u, PLE %s, weights %s%s",
                  c.name.c_str(), static_cast<unsigned long long>(c.seed), c.n_vocab, c.n_ctx, c.n_embd, c.n_layer,
                  c.attn_interval, c.n_head, c.n_head_kv, c.head_dim, c.n_expert_used, c.n_expert, c.qsa_ratio,
                  c.top_k, c.ple ? "on" : "off", std::string(tensor::traits(c.weight_type).name).c_str(),
                  !c.mtp ? "" : c.mtp_only ? ", MTP block only" : ", MTP block");
    return buf;
}

gguf::Writer generate_model(const GenConfig & c, const std::vector<gguf::KeyValue> & extra) {
    validate(c);
    gguf::Writer w;
    const std::string a = "qwen4exp.";
    w.set_string("general.architecture", "qwen4exp");
    w.set_string("general.name", c.name);
    w.set_u32("general.file_type", file_type(c.weight_type));
    w.set_u32(a + "context_length", c.n_ctx);
    w.set_u32(a + "embedding_length", c.n_embd);
    const uint32_t n_all = c.n_layer + (c.mtp ? 1 : 0);
    w.set_u32(a + "block_count", n_all);
    if (c.mtp) w.set_u32(a + "nextn_predict_layers", 1);
    w.set_u32(a + "expert_count", c.n_expert);
    w.set_u32(a + "expert_used_count", c.n_expert_used);
    w.set_u32(a + "expert_feed_forward_length", c.n_ff_exp);
    w.set_u32(a + "expert_shared_feed_forward_length", c.n_ff_shexp);
    w.set_u32(a + "attention.head_count", c.n_head);
    w.set_u32(a + "attention.head_count_kv", c.n_head_kv);
    w.set_u32(a + "attention.key_length", c.head_dim);
    w.set_u32(a + "attention.value_length", c.head_dim);
    w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
    w.set_u32(a + "rope.dimension_count", c.n_rot);
    w.set_f32(a + "rope.freq_base", c.rope_base);
    // M-RoPE sections over the n_rot/2 rotary pairs, split t/h/w as Qwen does ([11, 11, 10, 0] for 32 pairs).
    const int32_t pairs = static_cast<int32_t>(c.n_rot / 2);
    w.set_i32s(a + "rope.dimension_sections", {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0});
    w.set_u32(a + "full_attention_interval", c.attn_interval);
    // The MTP block is a dense full-attention layer (compress ratio 0, not recurrent).
    std::vector<bool> recurrent(n_all, false);
    std::vector<uint32_t> ratios(n_all, 0);
    for (uint32_t il = 0; il < c.n_layer; ++il) {
        recurrent[il] = !is_attention_layer(c, il);
        ratios[il] = recurrent[il] ? 0 : c.qsa_ratio;
    }
    w.set_bools(a + "attention.recurrent_layers", recurrent);
    w.set_u32s(a + "attention.compress_ratios", ratios);
    w.set_u32(a + "ssm.conv_kernel", c.ssm_d_conv);
    w.set_u32(a + "ssm.inner_size", c.ssm_d_state * c.ssm_n_v_heads);
    w.set_u32(a + "ssm.state_size", c.ssm_d_state);
    w.set_u32(a + "ssm.time_step_rank", c.ssm_n_v_heads);
    w.set_u32(a + "ssm.group_count", c.ssm_n_k_heads);
    w.set_u32(a + "hyper_connection.count", c.hc);
    w.set_u32(a + "hyper_connection.low_rank", c.hc_lr);
    w.set_u32(a + "attention.indexer.head_count", c.idx_heads);
    w.set_u32(a + "attention.indexer.key_length", c.idx_dim);
    w.set_u32(a + "attention.indexer.top_k", c.top_k);

    const bool ple = c.ple && !(c.mtp && c.mtp_only);
    const uint32_t Hp = ple ? ple_heads(c) : 0;
    uint64_t ple_rows = 0;
    if (ple) {
        w.set_u32s(a + "ple.layers", {0});
        w.set_u32(a + "ple.ngram_size", c.ple_ngram);
        w.set_u32(a + "ple.heads_per_ngram", c.ple_heads_per_ngram);
        w.set_u32(a + "ple.conv_kernel", c.ple_conv_kernel);
        w.set_u32(a + "ple.eos_token_id", c.eos_token);
        w.set_u32(a + "embedding_length_per_layer_input", c.n_embd / Hp);
        // Odd 64-bit hash multipliers drawn from the seed, and heads of slightly different sizes laid end to end.
        GenRng rng(c.seed ^ 0x504C45ull);
        std::vector<uint64_t> mult(c.ple_ngram), offsets(Hp), sizes(Hp);
        for (auto & m : mult) m = rng.next() | 1u;
        for (uint32_t h = 0; h < Hp; ++h) {
            offsets[h] = ple_rows;
            sizes[h] = c.ple_head_vocab + 2 * h;
            ple_rows += sizes[h];
        }
        w.set_u64s(a + "ple.layer_multipliers", mult);
        w.set_u64s(a + "ple.head_offsets", offsets);
        w.set_u64s(a + "ple.head_vocab_sizes", sizes);
    }
    for (const auto & kv : extra) w.set(kv.key, kv.value);

    TensorMaker t(w, c);
    const int64_t E = c.n_embd, hc_dim = int64_t(c.hc) * E;
    const bool trunk = !(c.mtp && c.mtp_only);
    if (trunk) t.f32("token_embd.weight", {E, c.n_vocab}, 1.0f);
    if (ple) t.matrix("per_layer_token_embd.weight", E / Hp, static_cast<int64_t>(ple_rows), 1, std::sqrt(float(E / Hp)));
    for (uint32_t il = trunk ? 0 : c.n_layer; il < n_all; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const bool mtp_block = il == c.n_layer;
        for (const char * k : {"hc_attn", "hc_ffn"}) {
            t.gamma(p + k + "_norm.weight", {E, c.hc});
            t.matrix(p + k + "_down.weight", hc_dim, c.hc_lr);
            t.matrix(p + k + "_up.weight", c.hc_lr, hc_dim);
            t.matrix(p + k + "_inject.weight", hc_dim, c.hc);
        }
        if (mtp_block || is_attention_layer(c, il)) {
            const int64_t D = c.head_dim;
            t.matrix(p + "attn_q.weight", E, 2 * D * c.n_head);
            t.matrix(p + "attn_k.weight", E, D * c.n_head_kv);
            t.matrix(p + "attn_v.weight", E, D * c.n_head_kv);
            t.matrix(p + "attn_output.weight", D * c.n_head, E);
            t.gamma(p + "attn_q_norm.weight", {D});
            t.gamma(p + "attn_k_norm.weight", {D});
            if (c.qsa_ratio > 0 || mtp_block) {  // the MTP block carries (unused) indexer tensors
                t.matrix(p + "indexer.q_proj.weight", E, int64_t(c.idx_heads) * c.idx_dim);
                t.matrix(p + "indexer.k_proj.weight", E, c.idx_dim);
                t.gamma(p + "indexer.q_norm.weight", {c.idx_dim});
                t.gamma(p + "indexer.k_norm.weight", {c.idx_dim});
            }
        } else {
            const int64_t key_dim = int64_t(c.ssm_d_state) * c.ssm_n_k_heads;
            const int64_t value_dim = int64_t(c.ssm_d_state) * c.ssm_n_v_heads, Hv = c.ssm_n_v_heads;
            const int64_t conv_dim = 2 * key_dim + value_dim;
            t.matrix(p + "attn_qkv.weight", E, conv_dim);
            t.matrix(p + "attn_gate.weight", E, value_dim);
            // The GDN kernel stays F32 whatever the weight type (the reference's conv asserts an F32 kernel).
            t.f32(p + "ssm_conv1d.weight", {c.ssm_d_conv, conv_dim}, 1.0f / std::sqrt(float(c.ssm_d_conv)));
            t.f32(p + "ssm_dt.bias", {Hv}, 0.5f);
            // ssm_a = -exp(A_log), A_log spread around 0: every head decays, at different rates.
            std::vector<float> a_log = t.draw(c.seed, p + "ssm_a", static_cast<size_t>(Hv), 0.5f);
            for (float & x : a_log) x = -std::exp(x);
            t.f32_values(p + "ssm_a", {Hv}, a_log);
            t.matrix(p + "ssm_beta.weight", E, Hv);
            t.matrix(p + "ssm_alpha.weight", E, Hv);
            t.f32(p + "ssm_norm.weight", {c.ssm_d_state}, 0.1f, 1.0f);  // a plain gamma (not folded)
            t.matrix(p + "ssm_out.weight", value_dim, E);
            if (c.ple && il == 0) {
                t.matrix(p + "ple_key.weight", E, hc_dim);
                t.matrix(p + "ple_value.weight", E, E);
                t.gamma(p + "ple_norm_key.weight", {E, c.hc});
                t.gamma(p + "ple_norm_query.weight", {E, c.hc});
                t.gamma(p + "ple_norm_conv.weight", {E, c.hc});
                t.f32(p + "ple_conv1d.weight", {c.ple_conv_kernel, hc_dim}, 1.0f / std::sqrt(float(c.ple_conv_kernel)));
            }
        }
        // MoE: the router stays F32 (as the converter keeps it); separate gate and up expert stacks.
        t.f32(p + "ffn_gate_inp.weight", {E, c.n_expert}, 1.0f / std::sqrt(float(E)));
        t.matrix(p + "ffn_gate_exps.weight", E, c.n_ff_exp, c.n_expert);
        t.matrix(p + "ffn_up_exps.weight", E, c.n_ff_exp, c.n_expert);
        t.matrix(p + "ffn_down_exps.weight", c.n_ff_exp, E, c.n_expert);
        t.f32(p + "ffn_gate_inp_shexp.weight", {E}, 1.0f / std::sqrt(float(E)));
        t.matrix(p + "ffn_gate_shexp.weight", E, c.n_ff_shexp);
        t.matrix(p + "ffn_up_shexp.weight", E, c.n_ff_shexp);
        t.matrix(p + "ffn_down_shexp.weight", c.n_ff_shexp, E);
        if (mtp_block) {
            t.gamma(p + "nextn.enorm.weight", {E});
            t.gamma(p + "nextn.hnorm.weight", {E, c.hc});
            t.matrix(p + "nextn.eh_proj.weight", 2 * E, E);
            t.gamma(p + "nextn.hc_head_norm.weight", {E, c.hc});
            t.matrix(p + "nextn.hc_head_down.weight", hc_dim, c.hc_lr);
            t.matrix(p + "nextn.hc_head_up.weight", c.hc_lr, hc_dim);
        }
    }
    if (!trunk) return w;
    t.gamma("output_hc_norm.weight", {E, c.hc});
    t.matrix("output_hc_down.weight", hc_dim, c.hc_lr);
    t.matrix("output_hc_up.weight", c.hc_lr, hc_dim);
    // A stronger head than unit gain, so the random model's next-token distributions are not flat.
    t.matrix("output.weight", E, c.n_vocab, 1, 4.0f);
    return w;
}

}  // namespace offgrid::model::qwen4exp
