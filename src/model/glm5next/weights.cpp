#include "model/glm5next/weights.h"

#include <string>

#include "common/error.h"
#include "model/common/gguf_access.h"

namespace offgrid::model::glm5next {

namespace {

using common::TensorLoader;

common::MhcWeights load_mhc(const TensorLoader & L, const std::string & prefix, const Hparams & hp) {
    const int64_t hc = hp.hc, E = hp.n_embd;
    common::MhcWeights w;
    w.fn = L.matrix(prefix + "_fn.weight", hc * E, (2 + hc) * hc);
    w.base = L.vec(prefix + "_base.weight", (2 + hc) * hc);
    w.scale = L.vec(prefix + "_scale.weight", 3);
    return w;
}

// A depthwise conv kernel {K, 1, d_in(, 1)} (or {K, d_in}): K taps per channel. The reference's conv reads F32 only.
std::vector<float> conv_kernel(const TensorLoader & L, const std::string & name, int64_t K, int64_t d_in) {
    const gguf::TensorInfo & t = L.require(name);
    if (t.type != tensor::ElemType::F32) L.fail(name, "the conv kernel must be f32");
    std::vector<int64_t> ne = t.ne;
    ne.erase(std::remove(ne.begin() + 1, ne.end(), int64_t(1)), ne.end());
    if (ne != std::vector<int64_t>{K, d_in}) L.fail(name, "shape " + common::shape_str(t.ne) + ", expected {K, 1, d_in}");
    return L.floats(t, K * d_in);
}

void load_ffn(const TensorLoader & L, const std::string & p, const Hparams & hp, bool dense, FfnWeights & f) {
    const int64_t E = hp.n_embd;
    f.dense = dense;
    if (dense) {
        f.gate = L.matrix(p + "ffn_gate.weight", E, hp.n_ff);
        f.up = L.matrix(p + "ffn_up.weight", E, hp.n_ff);
        f.down = L.matrix(p + "ffn_down.weight", hp.n_ff, E);
        return;
    }
    const int64_t F = hp.n_ff_exp, n_exp = hp.n_expert, Fs = int64_t(hp.n_ff_exp) * hp.n_shared;
    f.router = L.matrix(p + "ffn_gate_inp.weight", E, n_exp);
    f.probs_bias = L.vec(p + "exp_probs_b.bias", n_exp);
    f.experts.fused_gate_up = false;
    f.experts.gate = L.matrix(p + "ffn_gate_exps.weight", E, F, n_exp);
    f.experts.up = L.matrix(p + "ffn_up_exps.weight", E, F, n_exp);
    f.experts.down = L.matrix(p + "ffn_down_exps.weight", F, E, n_exp);
    f.experts.gate_scale.assign(n_exp, 1.0f);
    f.experts.up_scale.assign(n_exp, 1.0f);
    f.experts.down_scale.assign(n_exp, 1.0f);
    common::group_expert_rows(f.experts, n_exp);
    f.gate = L.matrix(p + "ffn_gate_shexp.weight", E, Fs);
    f.up = L.matrix(p + "ffn_up_shexp.weight", E, Fs);
    f.down = L.matrix(p + "ffn_down_shexp.weight", Fs, E);
}

void load_dsa(const TensorLoader & L, const std::string & p, const Hparams & hp, bool need_indexer, DsaWeights & d) {
    const int64_t E = hp.n_embd, H = hp.n_head, Rq = hp.q_lora_rank, R = hp.kv_lora_rank;
    const int64_t Dn = hp.key_mla, Dv = hp.value_mla, Di = hp.idx_dim, Hi = hp.idx_heads;
    d.q_a = L.matrix(p + "attn_q_a.weight", E, Rq);
    d.q_a_norm = L.vec(p + "attn_q_a_norm.weight", Rq);
    d.q_b = L.matrix(p + "attn_q_b.weight", Rq, H * Dn);
    d.kv_a = L.matrix(p + "attn_kv_a_mqa.weight", E, R);
    d.kv_a_norm = L.vec(p + "attn_kv_a_norm.weight", R);
    d.k_b = L.matrix(p + "attn_k_b.weight", Dn, R, H);
    d.v_b = L.matrix(p + "attn_v_b.weight", R, Dv, H);
    d.o = L.matrix(p + "attn_output.weight", H * Dv, E);
    // The seven indexer tensors: required on full-indexer layers, unused (optional) on shared ones.
    if (!need_indexer && !L.find(p + "indexer.attn_k.weight")) return;
    IndexerWeights & x = d.idx;
    x.present = true;
    x.k = L.matrix(p + "indexer.attn_k.weight", E, Di);
    x.k_norm = L.vec(p + "indexer.k_norm.weight", Di);
    x.k_bias = L.vec(p + "indexer.k_norm.bias", Di);
    x.gate = L.matrix(p + "indexer_compressor_gate.weight", E, Di);
    const std::vector<int64_t> ape_shape{Di, int64_t(hp.kpool)};
    x.ape = L.floats(L.require(p + "indexer_compressor_ape.weight"), Di * hp.kpool, &ape_shape);
    x.q_b = L.matrix(p + "indexer.attn_q_b.weight", Rq, Hi * Di);
    x.proj = L.matrix(p + "indexer.proj.weight", E, Hi);
}

}  // namespace

Weights load_weights(const gguf::Reader & reader, const Hparams & hp, const LayerSpan & span) {
    const TensorLoader L(reader);
    const int64_t E = hp.n_embd, V = hp.n_vocab, H = hp.n_head, hd = hp.kda_head_dim, d_in = hp.d_inner();
    const int64_t K = hp.conv_kernel;
    const uint32_t end = span.end_of(hp.n_layer);
    if (span.first >= end || end > hp.n_layer) {
        throw Error(reader.path() + ": layers " + std::to_string(span.first) + ".." + std::to_string(end) +
                    " are not a range of the model's " + std::to_string(hp.n_layer) + " layers");
    }
    const bool last = span.ends(hp.n_layer);
    Weights w;
    if (span.starts(hp.n_layer)) w.token_embd = L.matrix("token_embd.weight", E, V);
    if (last) {
        w.output_norm = L.vec("output_norm.weight", E);
        w.output = L.matrix("output.weight", E, V);
    }
    w.layers.resize(hp.n_layer_all);
    // A trunk-only file (nextn_predict_layers > 0 without the NextN projection): the MTP block is not loaded.
    const bool have_nextn = hp.n_nextn > 0 && L.find("blk." + std::to_string(hp.n_layer) + ".nextn.eh_proj.weight");
    for (uint32_t il = 0; il < hp.n_layer_all; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights & l = w.layers[il];
        const bool trunk = il < hp.n_layer;
        if (!trunk && !have_nextn) continue;
        if (trunk ? !span.has(il, hp.n_layer) : !last) continue;
        l.attn_norm = L.vec(p + "attn_norm.weight", E);
        l.ffn_norm = L.vec(p + "ffn_norm.weight", E);
        if (trunk) {
            l.hc_attn = load_mhc(L, p + "hc_attn", hp);
            l.hc_ffn = load_mhc(L, p + "hc_ffn", hp);
        }
        if (hp.is_recurrent[il]) {
            KdaWeights & k = l.kda;
            if (L.find(p + "attn_qkv.weight")) L.fail(p + "attn_qkv.weight", "a fused KDA projection is not supported (spec H9)");
            k.q = L.matrix(p + "attn_q.weight", E, d_in);
            k.k = L.matrix(p + "attn_k.weight", E, d_in);
            k.v = L.matrix(p + "attn_v.weight", E, d_in);
            k.conv_q = conv_kernel(L, p + "ssm_conv1d_q.weight", K, d_in);
            k.conv_k = conv_kernel(L, p + "ssm_conv1d_k.weight", K, d_in);
            k.conv_v = conv_kernel(L, p + "ssm_conv1d_v.weight", K, d_in);
            k.f_a = L.matrix(p + "ssm_f_a.weight", E, hd);
            k.f_b = L.matrix(p + "ssm_f_b.weight", hd, d_in);
            k.dt_bias = L.vec(p + "ssm_dt.bias", d_in);
            k.a = L.vec(p + "ssm_a", H);
            k.beta = L.matrix(p + "ssm_beta.weight", E, H);
            k.g_a = L.matrix(p + "ssm_g_a.weight", E, hd);
            k.g_b = L.matrix(p + "ssm_g_b.weight", hd, d_in);
            k.norm = L.vec(p + "ssm_norm.weight", hd);
            k.o = L.matrix(p + "attn_output.weight", d_in, E);
        } else {
            load_dsa(L, p, hp, !trunk || hp.idx_full[il], l.dsa);
        }
        load_ffn(L, p, hp, trunk && il < hp.n_dense, l.ffn);
        if (!trunk) {
            NextnWeights & n = l.nextn;
            n.present = true;
            n.eh_proj = L.matrix(p + "nextn.eh_proj.weight", 2 * E, E);
            n.enorm = L.vec(p + "nextn.enorm.weight", E);
            n.hnorm = L.vec(p + "nextn.hnorm.weight", E);
            if (L.find(p + "nextn.embed_tokens.weight")) n.embed_tokens = L.matrix(p + "nextn.embed_tokens.weight", E, V);
            if (L.find(p + "nextn.shared_head_head.weight")) n.head = L.matrix(p + "nextn.shared_head_head.weight", E, V);
            if (L.find(p + "nextn.shared_head_norm.weight")) n.head_norm = L.vec(p + "nextn.shared_head_norm.weight", E);
        }
    }
    return w;
}

std::vector<bool> tensors_for(const gguf::Reader & reader, const Hparams & hp, const LayerSpan & span) {
    const bool first = span.starts(hp.n_layer), last = span.ends(hp.n_layer);
    std::vector<bool> wanted;
    for (const gguf::TensorInfo & t : reader.tensors()) {
        bool want = last;  // outside the layers: the output norm and head
        if (const auto il = common::layer_of(t.name)) {
            want = *il < hp.n_layer ? span.has(*il, hp.n_layer) : last;  // past the trunk: the NextN blocks
        } else if (t.name.rfind("token_embd", 0) == 0) {
            want = first;
        }
        wanted.push_back(want);
    }
    return wanted;
}

}  // namespace offgrid::model::glm5next
