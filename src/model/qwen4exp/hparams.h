// qwen4exp hyper-parameters, read from GGUF metadata and validated once at load (spec sections 1 and 7).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/reader.h"

namespace offgrid::model::qwen4exp {

struct Hparams {
    std::string arch = "qwen4exp";
    uint32_t n_vocab = 0;        // rows of token_embd
    uint32_t n_ctx_train = 0;
    uint32_t n_embd = 0;         // E
    uint32_t n_layer = 0;        // trunk layers (block_count minus MTP layers)
    uint32_t n_nextn = 0;        // nextn_predict_layers: MTP blocks after the trunk (blk.n_layer ...)

    // Full attention.
    uint32_t n_head = 0;         // H
    uint32_t n_head_kv = 0;      // Hkv
    uint32_t head_dim = 0;       // D (key length = value length)
    uint32_t n_rot = 0;
    std::array<int, 4> rope_sections{};
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    float rope_attn_factor = 1.0f;
    float rms_eps = 0.0f;

    // MoE.
    uint32_t n_expert = 0;
    uint32_t n_expert_used = 0;
    uint32_t n_ff_exp = 0;
    uint32_t n_ff_shexp = 0;

    // Gated DeltaNet.
    uint32_t ssm_d_conv = 0;
    uint32_t ssm_d_inner = 0;
    uint32_t ssm_d_state = 0;    // dk = dv
    uint32_t ssm_n_v_heads = 0;  // Hv = time_step_rank
    uint32_t ssm_n_k_heads = 0;  // Hk = group_count

    // Hyper-connections.
    uint32_t hc = 0;
    uint32_t hc_lr = 0;

    // QSA indexer.
    uint32_t idx_heads = 0;      // Hi
    uint32_t idx_dim = 0;        // Di
    uint32_t idx_top_k = 0;      // token budget
    uint32_t kpool = 0;          // the one compress ratio shared by all QSA layers; 0 = no QSA layer

    std::vector<uint32_t> compress_ratio;  // per trunk layer; 0 = dense attention
    std::vector<bool> is_recurrent;        // per trunk layer: Gated DeltaNet (else full attention)

    // PLE n-gram embeddings.
    bool has_ple = false;
    uint32_t ple_layer = 0;
    uint32_t ple_ngram = 0;          // N
    uint32_t ple_heads_per_ngram = 0;  // G
    uint32_t ple_conv_kernel = 0;    // Kp
    uint32_t ple_eos = 0;
    uint32_t ple_dim = 0;            // Dp
    std::vector<uint64_t> ple_multipliers;   // N used
    std::vector<uint64_t> ple_offsets;       // Hp used
    std::vector<uint64_t> ple_vocab_sizes;   // Hp used

    uint32_t ple_heads() const { return (ple_ngram - 1) * ple_heads_per_ngram; }  // Hp
    uint32_t ssm_key_dim() const { return ssm_d_state * ssm_n_k_heads; }
    uint32_t ssm_value_dim() const { return ssm_d_state * ssm_n_v_heads; }
    uint32_t ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }
    bool is_qsa(uint32_t il) const { return !is_recurrent[il] && compress_ratio[il] > 0; }
    uint32_t n_attn_layers() const;
    uint32_t n_recr_layers() const;
};

// Reads and validates every key. Throws offgrid::Error naming the file and key. The vocabulary size and the
// PLE table height come from the tensor infos (token_embd.weight, per_layer_token_embd.weight).
// borrowed_vocab > 0: a file without token_embd.weight (an MTP-only file) takes that vocabulary size.
Hparams load_hparams(const gguf::Reader & reader, uint32_t borrowed_vocab = 0);

}  // namespace offgrid::model::qwen4exp
