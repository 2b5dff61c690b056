#include "model/glm5next/model.h"

#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "model/glm5next/forward.h"

namespace offgrid::model::glm5next {

Model Model::load(const std::string & path) { return from_reader(gguf::Reader::open(path)); }

Model Model::from_reader(gguf::Reader reader, const LayerSpan & span) {
    Model m;
    m.reader_ = std::make_unique<gguf::Reader>(std::move(reader));
    m.hp_ = load_hparams(*m.reader_);
    m.w_ = load_weights(*m.reader_, m.hp_, span);
    m.span_ = span;
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
        if (t != tensor::ElemType::F32 && t != tensor::ElemType::F16) {
            throw Error("cache type " + std::to_string(static_cast<uint32_t>(t)) + " is not supported (f32, f16)");
        }
    }
    // Per trunk layer: KDA keeps its q, k and v conv histories and one state matrix per head; DSA keeps the
    // normed latent as its K row (V reads the same row: no V rows) and indexer rows [key | gate | pooled].
    memory::CacheShape s;
    for (uint32_t il = 0; il < hp_.n_layer; ++il) {
        s.layers.push_back(hp_.is_recurrent[il]
                               ? memory::LayerCache::recurrent_rows(3 * (hp_.conv_kernel - 1) * hp_.d_inner(),
                                                                    hp_.kda_head_dim * hp_.kda_head_dim * hp_.n_head)
                               : memory::LayerCache::attention_rows(hp_.kv_lora_rank, 0, hp_.idx_dim, 3));
    }
    s.type_k = type_k;
    s.type_v = type_v;
    s.type_idx = type_k;
    return s;
}

MemoryTraits Model::memory_traits() const {
    MemoryTraits t;
    t.kpool = hp_.kpool;
    t.kpool_by_order = false;  // pools are kpool consecutive positions aligned to the sequence's first one
    return t;
}

void Model::forward(const ForwardContext & fc) const {
    check_in_span(fc, span_, hp_.n_layer);
    glm5next::forward(*this, fc);
}

ops::WorkspaceSize Model::workspace_size(const WorkspaceLimits & limits) const {
    return glm5next::workspace_size(*this, limits);
}

std::string Model::describe() const {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "glm5-next n_vocab=%u n_embd=%u n_layer=%u (dsa %u, kda %u) n_ctx_train=%u kpool=%u top_k=%u "
                  "kv_lora=%u decay=%s mtp=%s",
                  hp_.n_vocab, hp_.n_embd, hp_.n_layer, hp_.n_attn_layers(), hp_.n_recr_layers(), hp_.n_ctx_train,
                  hp_.kpool, hp_.idx_top_k, hp_.kv_lora_rank, std::isinf(hp_.gate_lower_bound) ? "softplus" : "bounded",
                  has_mtp() ? "yes" : "no");
    return buf;
}

}  // namespace offgrid::model::glm5next
