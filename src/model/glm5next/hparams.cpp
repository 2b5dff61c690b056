#include "model/glm5next/hparams.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "model/common/gguf_access.h"

namespace offgrid::model::glm5next {

uint32_t Hparams::n_attn_layers() const {
    return static_cast<uint32_t>(std::count(is_recurrent.begin(), is_recurrent.begin() + n_layer, false));
}

uint32_t Hparams::n_recr_layers() const {
    return static_cast<uint32_t>(std::count(is_recurrent.begin(), is_recurrent.begin() + n_layer, true));
}

Hparams load_hparams(const gguf::Reader & r) {
    Hparams hp;
    const std::string & arch = r.get_string("general.architecture");
    if (arch != "glm5-next") {
        throw Error(r.path() + ": key general.architecture: \"" + arch + "\" is not supported (expected glm5-next)");
    }
    const common::Keys k(r, arch + ".");
    auto range = [&](const char * name, uint32_t v, uint32_t lo, uint32_t hi) {
        if (v < lo || v > hi) {
            k.fail(name, "value " + std::to_string(v) + " is outside " + std::to_string(lo) + ".." + std::to_string(hi));
        }
        return v;
    };

    hp.n_ctx_train = k.u32("context_length");
    hp.n_embd = k.positive("embedding_length");
    hp.n_layer_all = range("block_count", k.u32("block_count"), 1, 512);
    hp.n_nextn = k.u32_opt("nextn_predict_layers").value_or(0);
    // The reference's MTP graph takes exactly one NextN block.
    if (hp.n_nextn > 1 || hp.n_nextn >= hp.n_layer_all) k.fail("nextn_predict_layers", "must be 0 or 1 and below block_count");
    hp.n_layer = hp.n_layer_all - hp.n_nextn;
    hp.n_head = k.positive("attention.head_count");
    hp.rms_eps = k.f32("attention.layer_norm_rms_epsilon");
    hp.ln_eps = k.f32_opt("attention.layer_norm_epsilon").value_or(0.0f);
    if (!(hp.rms_eps >= 0.0f) || !(hp.ln_eps >= 0.0f)) k.fail("attention.layer_norm_rms_epsilon", "epsilons must be >= 0");

    // Layer kinds.
    const auto kv = k.per_layer("attention.head_count_kv", hp.n_layer_all);
    hp.is_recurrent.assign(hp.n_layer_all, false);
    if (kv) {
        for (uint32_t il = 0; il < hp.n_layer_all; ++il) {
            const int64_t v = (*kv)[il];
            if (v != 0 && v != 1) k.fail("attention.head_count_kv", "entry " + std::to_string(il) + " is " + std::to_string(v) +
                                                                      " (0: KDA layer, 1: DSA layer)");
            hp.is_recurrent[il] = v == 0;
        }
    }
    for (uint32_t il = hp.n_layer; il < hp.n_layer_all; ++il) {
        if (hp.is_recurrent[il]) k.fail("attention.head_count_kv", "the NextN block " + std::to_string(il) + " must be a DSA layer");
    }

    // MLA: nope heads, the cache row is the latent.
    hp.key_mla = k.positive("attention.key_length_mla");
    hp.value_mla = k.positive("attention.value_length_mla");
    hp.q_lora_rank = k.positive("attention.q_lora_rank");
    hp.kv_lora_rank = k.positive("attention.kv_lora_rank");
    const auto key_length = k.u32_opt("attention.key_length");
    if (!key_length || *key_length != hp.kv_lora_rank) {
        k.fail("attention.key_length", "must be present and equal kv_lora_rank (" + std::to_string(hp.kv_lora_rank) +
                                           "): the MLA cache row is the latent");
    }
    const auto n_rot = k.u32_opt("rope.dimension_count");
    if (!n_rot || *n_rot != 0) k.fail("rope.dimension_count", "must be present and 0 (glm5-next uses no RoPE)");

    // KDA.
    hp.conv_kernel = range("ssm.conv_kernel", k.u32("ssm.conv_kernel"), 1, 64);
    hp.kda_head_dim = k.positive("kda.head_dim");
    if (const auto lb = k.f32_opt("kda.gate_lower_bound")) {
        if (!(*lb < 0.0f) && !std::isinf(*lb)) k.fail("kda.gate_lower_bound", "must be < 0");
        hp.gate_lower_bound = *lb;
    }

    // FFN.
    hp.n_dense = k.u32_opt("leading_dense_block_count").value_or(0);
    if (hp.n_dense > hp.n_layer) k.fail("leading_dense_block_count", "more than the trunk layers");
    if (hp.n_dense > 0) {
        const auto ff = k.uniform("feed_forward_length", hp.n_layer_all, true);
        if (!ff || *ff == 0) k.fail("feed_forward_length", "must be present and > 0 with leading dense layers");
        hp.n_ff = *ff;
    }
    hp.n_expert = k.positive("expert_count");
    const auto used = k.uniform("expert_used_count", hp.n_layer_all, true);
    if (!used) k.fail("expert_used_count", "missing");
    hp.n_expert_used = *used;
    if (hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert) k.fail("expert_used_count", "must be in 1..expert_count");
    hp.n_ff_exp = k.positive("expert_feed_forward_length");
    hp.n_shared = k.positive("expert_shared_count");
    hp.expert_weights_scale = k.f32_opt("expert_weights_scale").value_or(0.0f);
    hp.expert_weights_norm = k.boolean_opt("expert_weights_norm", false);
    const uint32_t gating = k.u32_opt("expert_gating_func").value_or(0);
    if (gating != 0 && gating != 2) {
        k.fail("expert_gating_func", std::to_string(gating) + " is not supported (2: sigmoid, the glm5-next router)");
    }
    const uint32_t groups = k.u32_opt("expert_group_count").value_or(0);
    if (groups > 1) k.fail("expert_group_count", "group-limited routing is not supported");
    hp.clamp_exp = k.floats_per_layer("swiglu_clamp_exp", hp.n_layer_all).value_or(std::vector<float>(hp.n_layer_all, 0.0f));
    hp.clamp_shexp = k.floats_per_layer("swiglu_clamp_shexp", hp.n_layer_all).value_or(hp.clamp_exp);
    for (float L : hp.clamp_exp) if (!(L >= 0.0f)) k.fail("swiglu_clamp_exp", "limits must be >= 0");
    for (float L : hp.clamp_shexp) if (!(L >= 0.0f)) k.fail("swiglu_clamp_shexp", "limits must be >= 0");

    // Indexer.
    hp.idx_heads = k.positive("attention.indexer.head_count");
    hp.idx_dim = k.positive("attention.indexer.key_length");
    hp.idx_top_k = k.positive("attention.indexer.top_k");
    hp.kpool = k.u32("attention.indexer.kpool");
    if (hp.kpool < 2) k.fail("attention.indexer.kpool", "must be > 1");
    if (hp.idx_top_k % hp.kpool != 0) k.fail("attention.indexer.top_k", "must be a multiple of kpool " + std::to_string(hp.kpool));
    hp.select_tail = k.boolean_opt("attention.indexer.kpool_select_tail", true);
    // Spec hazard H7: without the tail a decoding token with no visible pool attends to nothing.
    if (!hp.select_tail) k.fail("attention.indexer.kpool_select_tail", "false is not supported (a token could attend to no cell)");
    hp.index_share_mtp = k.boolean_opt("attention.indexer.index_share_mtp", false);
    hp.idx_full.assign(hp.n_layer, true);
    if (const gguf::Value * v = k.find("attention.indexer.types")) {
        std::vector<int64_t> types;
        if (v->type == gguf::ValueType::ARRAY) {
            if (v->array.size() != hp.n_layer) {
                k.fail("attention.indexer.types", "has " + std::to_string(v->array.size()) +
                                                      " entries, expected one per trunk layer (" + std::to_string(hp.n_layer) + ")");
            }
            for (const auto & e : v->array) types.push_back(k.integer("attention.indexer.types", e));
        } else {
            types.assign(hp.n_layer, k.integer("attention.indexer.types", *v));
        }
        for (uint32_t il = 0; il < hp.n_layer; ++il) {
            if (types[il] != 0 && types[il] != 1) k.fail("attention.indexer.types", "entries must be 0 (shared) or 1 (full)");
            hp.idx_full[il] = hp.is_recurrent[il] || types[il] == 1;
        }
    }
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        if (hp.is_recurrent[il]) continue;
        if (!hp.idx_full[il]) k.fail("attention.indexer.types", "the first DSA layer (" + std::to_string(il) + ") must have a full indexer");
        break;
    }

    // mHC.
    hp.hc = k.u32("hyper_connection.count");
    if (hp.hc != 4) k.fail("hyper_connection.count", "must be 4");
    hp.sinkhorn_iterations = k.u32("hyper_connection.sinkhorn_iterations");
    if (hp.sinkhorn_iterations < 1 || hp.sinkhorn_iterations > 1000) k.fail("hyper_connection.sinkhorn_iterations", "must be in 1..1000");
    hp.hc_eps = k.f32("hyper_connection.epsilon");
    if (!(hp.hc_eps >= 0.0f)) k.fail("hyper_connection.epsilon", "must be >= 0");

    const gguf::TensorInfo * embd = r.find_tensor("token_embd.weight");
    if (!embd) throw Error(r.path() + ": tensor token_embd.weight: missing");
    if (embd->ne.size() < 2 || embd->ne[1] < 1 || embd->ne[1] > INT32_MAX) {
        throw Error(r.path() + ": tensor token_embd.weight: needs {n_embd, n_vocab}");
    }
    hp.n_vocab = static_cast<uint32_t>(embd->ne[1]);
    return hp;
}

}  // namespace offgrid::model::glm5next
