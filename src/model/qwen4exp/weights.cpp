#include "model/qwen4exp/weights.h"

#include <string>

#include "common/error.h"
#include "model/common/gguf_access.h"

namespace offgrid::model::qwen4exp {

namespace {

using common::TensorLoader;
using common::shape_str;
using gguf::TensorInfo;

HcWeights load_hc(const TensorLoader & L, const std::string & prefix, const Hparams & hp, bool with_inject) {
    const int64_t E = hp.n_embd, hc = hp.hc, dim = int64_t(hp.hc) * hp.n_embd;
    HcWeights w;
    w.norm = L.any_layout(prefix + "_norm.weight", E * hc);
    w.down = L.matrix(prefix + "_down.weight", dim, hp.hc_lr);
    w.up = L.matrix(prefix + "_up.weight", hp.hc_lr, dim);
    if (with_inject) w.inject = L.matrix(prefix + "_inject.weight", dim, hc);
    common::prepare_gated_hc(w);  // the grouped `up` the mixer multiplies (decode helper)
    return w;
}


AttentionWeights load_attention(const TensorLoader & L, const std::string & p, const Hparams & hp, bool indexer) {
    const int64_t E = hp.n_embd, D = hp.head_dim, H = hp.n_head, Hkv = hp.n_head_kv;
    AttentionWeights a;
    if (L.find(p + "attn_qkv.weight")) L.fail(p + "attn_qkv.weight", "fused QKV on a full-attention layer is not supported");
    a.q = L.matrix(p + "attn_q.weight", E, 2 * D * H);
    a.k = L.matrix(p + "attn_k.weight", E, D * Hkv);
    a.v = L.matrix(p + "attn_v.weight", E, D * Hkv);
    a.o = L.matrix(p + "attn_output.weight", D * H, E);
    a.q_scale = L.scale(p + "attn_q.scale");
    a.k_scale = L.scale(p + "attn_k.scale");
    a.v_scale = L.scale(p + "attn_v.scale");
    a.o_scale = L.scale(p + "attn_output.scale");
    a.q_norm = L.vec(p + "attn_q_norm.weight", D);
    a.k_norm = L.vec(p + "attn_k_norm.weight", D);
    if (indexer) {
        const int64_t Di = hp.idx_dim;
        a.idx_q = L.matrix(p + "indexer.q_proj.weight", E, int64_t(hp.idx_heads) * Di);
        a.idx_k = L.matrix(p + "indexer.k_proj.weight", E, Di);
        a.idx_q_norm = L.vec(p + "indexer.q_norm.weight", Di);
        a.idx_k_norm = L.vec(p + "indexer.k_norm.weight", Di);
    }
    return a;
}

MoeWeights load_moe(const TensorLoader & L, const std::string & p, const Hparams & hp) {
    const int64_t E = hp.n_embd, n_exp = hp.n_expert, n_ff = hp.n_ff_exp, n_sh = hp.n_ff_shexp;
    MoeWeights m;
    m.router = L.matrix(p + "ffn_gate_inp.weight", E, n_exp);
    if (L.find(p + "ffn_gate_up_exps.weight")) {
        m.fused_gate_up = true;
        m.gate_up = L.matrix(p + "ffn_gate_up_exps.weight", E, 2 * n_ff, n_exp);
    } else {
        m.gate = L.matrix(p + "ffn_gate_exps.weight", E, n_ff, n_exp);
        m.up = L.matrix(p + "ffn_up_exps.weight", E, n_ff, n_exp);
        m.gate_scale = L.expert_scale(p + "ffn_gate_exps.scale", n_exp);
        m.up_scale = L.expert_scale(p + "ffn_up_exps.scale", n_exp);
    }
    if (m.gate_scale.empty()) m.gate_scale.assign(n_exp, 1.0f);
    if (m.up_scale.empty()) m.up_scale.assign(n_exp, 1.0f);
    m.down = L.matrix(p + "ffn_down_exps.weight", n_ff, E, n_exp);
    m.down_scale = L.expert_scale(p + "ffn_down_exps.scale", n_exp);
    common::group_expert_rows(m, n_exp);
    m.shared_gate_inp = L.vec(p + "ffn_gate_inp_shexp.weight", E);
    m.shared_gate = L.matrix(p + "ffn_gate_shexp.weight", E, n_sh);
    m.shared_up = L.matrix(p + "ffn_up_shexp.weight", E, n_sh);
    m.shared_down = L.matrix(p + "ffn_down_shexp.weight", n_sh, E);
    m.shared_gate_scale = L.scale(p + "ffn_gate_shexp.scale");
    m.shared_up_scale = L.scale(p + "ffn_up_shexp.scale");
    m.shared_down_scale = L.scale(p + "ffn_down_shexp.scale");
    return m;
}

}  // namespace

bool has_mtp_block(const gguf::Reader & reader, const Hparams & hp) {
    return hp.n_nextn > 0 && reader.find_tensor("blk." + std::to_string(hp.n_layer) + ".nextn.eh_proj.weight");
}

MtpWeights load_mtp_weights(const gguf::Reader & reader, const Hparams & hp) {
    const TensorLoader L(reader);
    const int64_t E = hp.n_embd, V = hp.n_vocab, hc_dim = int64_t(hp.hc) * hp.n_embd;
    if (hp.n_nextn != 1) {
        throw Error(reader.path() + ": nextn_predict_layers is " + std::to_string(hp.n_nextn) + "; the draft head needs exactly 1");
    }
    const std::string p = "blk." + std::to_string(hp.n_layer) + ".";
    MtpWeights m;
    m.block.hc_attn = load_hc(L, p + "hc_attn", hp, true);
    m.block.hc_ffn = load_hc(L, p + "hc_ffn", hp, true);
    // Dense attention in the draft (spec 3.3); the indexer tensors must be there but are not read.
    m.block.attn = load_attention(L, p, hp, false);
    for (const char * t : {"indexer.q_proj.weight", "indexer.k_proj.weight", "indexer.q_norm.weight", "indexer.k_norm.weight"})
        L.require(p + t);
    m.block.moe = load_moe(L, p, hp);
    m.enorm = L.vec(p + "nextn.enorm.weight", E);
    m.hnorm = L.any_layout(p + "nextn.hnorm.weight", hc_dim);
    m.eh_proj = L.matrix(p + "nextn.eh_proj.weight", 2 * E, E);
    m.eh_scale = L.scale(p + "nextn.eh_proj.scale");
    m.hc_head = load_hc(L, p + "nextn.hc_head", hp, false);
    if (L.find(p + "nextn.embed_tokens.weight")) m.embed = L.matrix(p + "nextn.embed_tokens.weight", E, V);
    if (L.find(p + "nextn.shared_head_head.weight")) m.head = L.matrix(p + "nextn.shared_head_head.weight", E, V);
    if (L.find(p + "nextn.shared_head_norm.weight")) {
        L.fail(p + "nextn.shared_head_norm.weight", "not part of the qwen4exp draft head (its hc_head mixer is the output norm)");
    }
    m.present = true;
    return m;
}

namespace {
}  // namespace

Weights load_weights(const gguf::Reader & reader, const Hparams & hp, const LoadOptions & options) {
    const TensorLoader L(reader);
    const int64_t E = hp.n_embd, V = hp.n_vocab;
    const LayerSpan & span = options.span;
    const uint32_t end = span.end_of(hp.n_layer);
    if (span.first >= end || end > hp.n_layer) {
        throw Error(reader.path() + ": layers " + std::to_string(span.first) + ".." + std::to_string(end) +
                    " are not a range of the model's " + std::to_string(hp.n_layer) + " layers");
    }
    const bool has_ple_layer = hp.has_ple && span.has(hp.ple_layer, hp.n_layer);
    Weights w;
    if (span.starts(hp.n_layer)) w.token_embd = L.matrix("token_embd.weight", E, V);
    if (span.ends(hp.n_layer)) {
        w.output = L.find("output.weight") ? L.matrix("output.weight", E, V) : L.matrix("token_embd.weight", E, V);
        w.output_hc = load_hc(L, "output_hc", hp, false);
    }

    if (has_ple_layer) {
        const TensorInfo & t = L.require("per_layer_token_embd.weight");
        uint64_t need_rows = 0;
        for (uint32_t h = 0; h < hp.ple_heads(); ++h) {
            need_rows = std::max<uint64_t>(need_rows, hp.ple_offsets[h] + hp.ple_vocab_sizes[h]);
        }
        if (t.ne.size() != 2 || t.ne[0] != hp.ple_dim || t.ne[1] < static_cast<int64_t>(need_rows)) {
            L.fail(t.name, "shape " + shape_str(t.ne) + ", expected {" + std::to_string(hp.ple_dim) + ", >= " +
                               std::to_string(need_rows) + "}");
        }
        w.ple_table = L.view(t, hp.ple_dim, t.ne[1]);
    }

    const int64_t hc_dim = int64_t(hp.hc) * E;
    w.layers.resize(hp.n_layer);
    for (uint32_t il = span.first; il < end; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        LayerWeights & l = w.layers[il];
        l.hc_attn = load_hc(L, p + "hc_attn", hp, true);
        l.hc_ffn = load_hc(L, p + "hc_ffn", hp, true);

        if (!hp.is_recurrent[il]) {
            l.attn = load_attention(L, p, hp, hp.is_qsa(il));
        } else {
            RecurrentWeights & r = l.recr;
            const int64_t conv_dim = hp.ssm_conv_dim(), vdim = hp.ssm_value_dim(), Hv = hp.ssm_n_v_heads;
            r.qkv = L.matrix(p + "attn_qkv.weight", E, conv_dim);
            r.gate = L.matrix(p + "attn_gate.weight", E, vdim);
            r.beta = L.matrix(p + "ssm_beta.weight", E, Hv);
            r.alpha = L.matrix(p + "ssm_alpha.weight", E, Hv);
            r.out = L.matrix(p + "ssm_out.weight", vdim, E);
            r.qkv_scale = L.scale(p + "attn_qkv.scale");
            r.gate_scale = L.scale(p + "attn_gate.scale");
            r.beta_scale = L.scale(p + "ssm_beta.scale");
            r.alpha_scale = L.scale(p + "ssm_alpha.scale");
            r.out_scale = L.scale(p + "ssm_out.scale");
            const std::vector<int64_t> conv_shape{int64_t(hp.ssm_d_conv), conv_dim};
            r.conv = L.floats(L.require(p + "ssm_conv1d.weight"), hp.ssm_d_conv * conv_dim, &conv_shape);
            r.dt_bias = L.vec(p + "ssm_dt.bias", Hv);
            r.a = L.vec(p + "ssm_a", Hv);
            r.norm = L.vec(p + "ssm_norm.weight", hp.ssm_d_state);
        }

        if (hp.has_ple && il == hp.ple_layer) {
            PleWeights & pw = l.ple;
            pw.key = L.matrix(p + "ple_key.weight", E, hc_dim);
            pw.value = L.matrix(p + "ple_value.weight", E, E);
            pw.norm_key = L.any_layout(p + "ple_norm_key.weight", hc_dim);
            pw.norm_query = L.any_layout(p + "ple_norm_query.weight", hc_dim);
            pw.norm_conv = L.any_layout(p + "ple_norm_conv.weight", hc_dim);
            const std::vector<int64_t> conv_shape{int64_t(hp.ple_conv_kernel), hc_dim};
            pw.conv = L.floats(L.require(p + "ple_conv1d.weight"), hp.ple_conv_kernel * hc_dim, &conv_shape);
        }

        l.moe = load_moe(L, p, hp);
    }
    if (has_ple_layer && PleProjections::bytes_for(hp) <= options.ple_projection_bytes) {
        const PleWeights & pw = w.layers[hp.ple_layer].ple;
        w.ple_proj = build_ple_projections(hp, w.ple_table, pw.key, pw.value);
    }
    if (span.ends(hp.n_layer) && has_mtp_block(reader, hp)) w.mtp = load_mtp_weights(reader, hp);
    return w;
}

std::vector<bool> tensors_for(const gguf::Reader & reader, const Hparams & hp, const LayerSpan & span) {
    const bool first = span.starts(hp.n_layer), last = span.ends(hp.n_layer);
    const bool tied = reader.find_tensor("output.weight") == nullptr;
    std::vector<bool> wanted;
    for (const TensorInfo & t : reader.tensors()) {
        bool want = last;  // outside the layers: the head, its mixer, norms
        if (const auto il = common::layer_of(t.name)) {
            want = *il < hp.n_layer ? span.has(*il, hp.n_layer) : last;  // past the trunk: the MTP block
        } else if (t.name.rfind("token_embd", 0) == 0) {
            want = first || (last && tied);
        } else if (t.name.rfind("per_layer_token_embd", 0) == 0) {
            want = hp.has_ple && span.has(hp.ple_layer, hp.n_layer);
        }
        wanted.push_back(want);
    }
    return wanted;
}

}  // namespace offgrid::model::qwen4exp
