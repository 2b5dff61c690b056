// A loaded glm5-next model (GLM-5.3-Flash): KDA recurrent layers and DSA layers (nope MLA with a latent-only
// cache and a k-pool lightning indexer whose rows are key | gate | pooled, pools fixed by position), mHC, MoE
// with sigmoid routing. Implements the architecture seam (model/architecture.h); spec: ../shared/spec/glm5next.md.
#pragma once

#include <memory>
#include <string>

#include "gguf/reader.h"
#include "model/architecture.h"
#include "model/glm5next/hparams.h"
#include "model/glm5next/weights.h"

namespace offgrid::model::glm5next {

class Model final : public Architecture {
public:
    static Model load(const std::string & path);
    // With a span: only those layers (model/architecture.h, tensors_for in weights.h).
    static Model from_reader(gguf::Reader reader, const LayerSpan & span = {});

    const Hparams & hparams() const { return hp_; }
    const Weights & weights() const { return w_; }
    // Index of trunk layer il among the DSA layers (attention and indexer rows) or the KDA layers (recurrent
    // rows); -1 when il is the other kind.
    int attn_index(uint32_t il) const { return attn_index_[il]; }
    int recr_index(uint32_t il) const { return recr_index_[il]; }
    bool has_mtp() const { return hp_.n_nextn > 0 && w_.layers.back().nextn.present; }

    memory::CacheShape cache_shape(tensor::ElemType type_k = tensor::ElemType::F16,
                                   tensor::ElemType type_v = tensor::ElemType::F16) const override;
    const std::string & name() const override { return hp_.arch; }
    uint32_t n_vocab() const override { return hp_.n_vocab; }
    uint32_t n_ctx_train() const override { return hp_.n_ctx_train; }
    uint32_t n_layers() const override { return hp_.n_layer; }
    uint32_t carry_width() const override { return hp_.hc * hp_.n_embd; }
    LayerCaches layer_caches(uint32_t il) const override { return {attn_index_.at(il), recr_index_.at(il), false}; }
    uint32_t hidden_width() const override { return hp_.n_embd; }
    const gguf::Reader & reader() const override { return *reader_; }
    MemoryTraits memory_traits() const override;
    void forward(const ForwardContext & fc) const override;
    ops::WorkspaceSize workspace_size(const WorkspaceLimits & limits) const override;
    // Nothing in the caches is rotated (no RoPE): a shift changes positions only.
    void rerotate_keys(const memory::CacheShape &, memory::Storage &, uint32_t, memory::Pos,
                       memory::Pos) const override {}
    std::string describe() const override;

private:
    Model() = default;
    std::unique_ptr<gguf::Reader> reader_;
    Hparams hp_;
    Weights w_;
    std::vector<int> attn_index_, recr_index_;
    LayerSpan span_;  // the layers loaded
};

}  // namespace offgrid::model::glm5next
