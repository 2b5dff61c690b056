#include "model/qwen4exp/model.h"

#include <cstdio>

#include "common/error.h"
#include "model/qwen4exp/forward.h"
#include "model/qwen4exp/shift.h"

namespace offgrid::model::qwen4exp {

Model Model::load(const std::string & path, const LoadOptions & options) {
    return from_reader(gguf::Reader::open(path), options);
}

Model Model::from_reader(gguf::Reader reader, const LoadOptions & options) {
    Model m;
    m.reader_ = std::make_unique<gguf::Reader>(std::move(reader));
    m.hp_ = load_hparams(*m.reader_);
    m.w_ = load_weights(*m.reader_, m.hp_, options);
    m.span_ = options.span;
    int n_attn = 0, n_recr = 0;
    for (uint32_t il = 0; il < m.hp_.n_layer; ++il) {
        const bool recr = m.hp_.is_recurrent[il];
        m.attn_index_.push_back(recr ? -1 : n_attn++);
        m.recr_index_.push_back(recr ? n_recr++ : -1);
    }
    return m;
}

memory::CacheShape Model::cache_shape(tensor::ElemType type_k, tensor::ElemType type_v) const {
    for (auto t : {type_k, type_v}) {
        if (t != tensor::ElemType::F32 && t != tensor::ElemType::F16 && t != tensor::ElemType::Q8_0) {
            throw Error("cache type " + std::to_string(static_cast<uint32_t>(t)) + " is not supported (f32, f16, q8_0)");
        }
        if (t == tensor::ElemType::Q8_0 && hp_.head_dim % 32 != 0) {
            throw Error("cache type q8_0 needs a head size that is a multiple of 32 (its blocks of 32 must not "
                        "straddle heads); this model's head size is " + std::to_string(hp_.head_dim));
        }
    }
    // Per trunk layer: Gated DeltaNet keeps its conv history and delta-rule state; full attention keeps K and V
    // rows of every KV head and, with k-pools, indexer rows [raw key | pooled key] (on every attention layer, QSA
    // or not, so all attention layers share one row layout).
    memory::CacheShape s;
    const uint32_t kv_width = hp_.head_dim * hp_.n_head_kv;
    for (const bool recurrent : hp_.is_recurrent) {
        s.layers.push_back(recurrent ? memory::LayerCache::recurrent_rows(
                                           (hp_.ssm_d_conv - 1) * hp_.ssm_conv_dim(),
                                           hp_.ssm_d_state * hp_.ssm_d_state * hp_.ssm_n_v_heads)
                                     : memory::LayerCache::attention_rows(kv_width, kv_width,
                                                                          hp_.kpool > 0 ? hp_.idx_dim : 0,
                                                                          hp_.kpool > 0 ? 2 : 0));
    }
    // The PLE conv history lives in the recurrent row, beside the layers' states.
    s.row_floats = hp_.has_ple ? (hp_.ple_conv_kernel - 1) * hp_.ple_ngram * hp_.hc * hp_.n_embd : 0;
    s.type_k = type_k;
    s.type_v = type_v;
    s.type_idx = type_k == tensor::ElemType::Q8_0 ? tensor::ElemType::F16 : type_k;
    return s;
}

MemoryTraits Model::memory_traits() const {
    MemoryTraits t;
    t.kpool = hp_.kpool;
    t.kpool_by_order = true;
    return t;
}

// A token shared by several sequences has one cell and one hidden state, and the memory continues every
// sequence of the set from its first sequence's recurrent row (PLE conv history included). Its PLE n-gram is
// taken from that first sequence's predecessors, the history the whole set continues from: with equal
// histories (a prompt decoded once for several sequences) every sequence gets exactly the row it would get
// decoded alone. So no batch rule is needed beyond the memory's own.
std::string Model::check_token_seqs(const std::vector<memory::SeqId> &) const { return {}; }

void Model::forward(const ForwardContext & fc) const {
    check_in_span(fc, span_, hp_.n_layer);
    qwen4exp::forward(*this, fc);
}

ops::WorkspaceSize Model::workspace_size(const WorkspaceLimits & limits) const {
    return qwen4exp::workspace_size(*this, limits);
}

void Model::rerotate_keys(const memory::CacheShape & shape, memory::Storage & storage, uint32_t cell,
                          memory::Pos old_pos, memory::Pos new_pos) const {
    qwen4exp::rerotate_keys(*this, shape, storage, cell, old_pos, new_pos);
}

std::string Model::describe() const {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "qwen4exp n_vocab=%u n_embd=%u n_layer=%u (attention %u, recurrent %u) n_ctx_train=%u "
                  "qsa_ratio=%u top_k=%u ple=%s",
                  hp_.n_vocab, hp_.n_embd, hp_.n_layer, hp_.n_attn_layers(), hp_.n_recr_layers(), hp_.n_ctx_train,
                  hp_.kpool, hp_.idx_top_k,
                  !hp_.has_ple ? "no" : (w_.ple_proj.empty() ? "yes (products per token)" : "yes (products folded into the table)"));
    return buf;
}

}  // namespace offgrid::model::qwen4exp
