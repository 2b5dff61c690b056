// A loaded qwen4exp model: the GGUF file (kept mapped), its hyper-parameters and weight views, and the cache
// shape the hybrid memory must provide for it. Implements the architecture seam (model/architecture.h).
#pragma once

#include <memory>
#include <string>

#include "gguf/reader.h"
#include "memory/plan.h"
#include "model/architecture.h"
#include "model/qwen4exp/hparams.h"
#include "model/qwen4exp/weights.h"

namespace offgrid::model::qwen4exp {

class Model final : public Architecture {
public:
    // Opens, validates and maps a GGUF file. Throws offgrid::Error / FileError naming the key or tensor.
    static Model load(const std::string & path, const LoadOptions & options = {});
    // Takes ownership of an open reader (tests build models in memory).
    static Model from_reader(gguf::Reader reader, const LoadOptions & options = {});

    const Hparams & hparams() const { return hp_; }
    const Weights & weights() const { return w_; }

    // What the memory must store for this model. type_k applies to K rows, type_v to V rows: F32, F16 or Q8_0
    // (Q8_0 only when the head size is a multiple of 32, so no block straddles two heads). The indexer rows take
    // type_k when it is F32 or F16, else F16.
    memory::CacheShape cache_shape(tensor::ElemType type_k = tensor::ElemType::F16,
                                   tensor::ElemType type_v = tensor::ElemType::F16) const override;

    // Model-order layer numbering of the caches: the index of layer il among the full-attention layers
    // (attention and indexer rows) or among the recurrent layers (recurrent rows); -1 when il is the other kind.
    int attn_index(uint32_t il) const { return attn_index_[il]; }
    int recr_index(uint32_t il) const { return recr_index_[il]; }

    // --- Architecture ---
    const std::string & name() const override { return hp_.arch; }
    uint32_t n_vocab() const override { return hp_.n_vocab; }
    uint32_t n_ctx_train() const override { return hp_.n_ctx_train; }
    uint32_t n_layers() const override { return hp_.n_layer; }
    uint32_t carry_width() const override { return hp_.hc * hp_.n_embd; }
    LayerCaches layer_caches(uint32_t il) const override { return {attn_index_.at(il), recr_index_.at(il), hp_.has_ple && il == hp_.ple_layer}; }
    uint32_t hidden_width() const override { return hp_.n_embd; }
    // The final residual, all hc streams (the MTP head's hidden input).
    uint32_t wide_hidden_width() const override { return hp_.hc * hp_.n_embd; }
    const gguf::Reader & reader() const override { return *reader_; }
    // Pools by order, no window (spec 5.5).
    MemoryTraits memory_traits() const override;
    // Shared tokens are allowed with PLE too (see model.cpp: the n-gram follows the set's first sequence).
    std::string check_token_seqs(const std::vector<memory::SeqId> & seqs) const override;
    void forward(const ForwardContext & fc) const override;
    ops::WorkspaceSize workspace_size(const WorkspaceLimits & limits) const override;
    void rerotate_keys(const memory::CacheShape & shape, memory::Storage & storage, uint32_t cell,
                       memory::Pos old_pos, memory::Pos new_pos) const override;
    std::string describe() const override;

private:
    Model() = default;
    std::unique_ptr<gguf::Reader> reader_;
    Hparams hp_;
    Weights w_;
    std::vector<int> attn_index_, recr_index_;
    LayerSpan span_;  // the layers loaded
};

}  // namespace offgrid::model::qwen4exp
