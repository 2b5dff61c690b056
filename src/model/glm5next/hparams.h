// glm5-next hyper-parameters, read from GGUF metadata and validated once at load (../shared/spec/glm5next.md
// section 1). Layer kinds: head_count_kv[il] == 0 is a KDA (recurrent) layer, 1 a DSA (MLA + indexer) layer.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gguf/reader.h"

namespace offgrid::model::glm5next {

struct Hparams {
    std::string arch = "glm5-next";
    uint32_t n_vocab = 0;          // rows of token_embd
    uint32_t n_ctx_train = 0;
    uint32_t n_embd = 0;           // E
    uint32_t n_layer = 0;          // trunk layers (block_count - nextn_predict_layers)
    uint32_t n_layer_all = 0;      // block_count
    uint32_t n_nextn = 0;          // NextN (MTP) blocks after the trunk: 0 or 1
    uint32_t n_head = 0;           // H: KDA heads and MLA query heads
    float rms_eps = 0.0f;
    float ln_eps = 0.0f;           // indexer key LayerNorm (0 when the key is absent, as the reference)

    // MLA.
    uint32_t q_lora_rank = 0;      // Rq
    uint32_t kv_lora_rank = 0;     // R: the cached latent width
    uint32_t key_mla = 0;          // Dn
    uint32_t value_mla = 0;        // Dv

    // KDA.
    uint32_t conv_kernel = 0;      // K
    uint32_t kda_head_dim = 0;     // hd
    float gate_lower_bound = -std::numeric_limits<float>::infinity();  // -inf: softplus decay

    // FFN.
    uint32_t n_dense = 0;          // leading dense layers
    uint32_t n_ff = 0;             // their width
    uint32_t n_expert = 0, n_expert_used = 0;
    uint32_t n_ff_exp = 0;         // F
    uint32_t n_shared = 0;         // shared expert width F * n_shared
    float expert_weights_scale = 0.0f;
    bool expert_weights_norm = false;
    std::vector<float> clamp_exp, clamp_shexp;  // per layer (all), 0 = off

    // Indexer.
    uint32_t idx_heads = 0;        // Hi
    uint32_t idx_dim = 0;          // Di
    uint32_t idx_top_k = 0;
    uint32_t kpool = 0;
    bool select_tail = true;
    bool index_share_mtp = false;
    std::vector<bool> idx_full;    // per trunk layer: a full indexer (else the DSA layer reuses the previous one's)

    // mHC.
    uint32_t hc = 0;
    uint32_t sinkhorn_iterations = 0;
    float hc_eps = 0.0f;

    std::vector<bool> is_recurrent;  // per layer (all): KDA

    uint32_t d_inner() const { return n_head * kda_head_dim; }  // d_in
    uint32_t n_attn_layers() const;  // DSA layers of the trunk
    uint32_t n_recr_layers() const;  // KDA layers of the trunk
};

// Reads and validates every key. Throws offgrid::Error naming the file and key.
Hparams load_hparams(const gguf::Reader & reader);

}  // namespace offgrid::model::glm5next
