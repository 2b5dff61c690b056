// Deterministic random-weight qwen4exp GGUF files (`offgrid gen-model`, the embedded default model, the speed
// benchmarks). The files follow the GGUF conventions of the spec (sections 1-2): the keys and their types,
// tensor names and shapes, gammas stored +1-folded, ssm_a negative, the GDN conv kernel in F32, the PLE hash
// arrays as u64, one shared QSA compress ratio whose multiple is the indexer budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/value.h"
#include "gguf/writer.h"
#include "tensor/types.h"

namespace offgrid::model::qwen4exp {

struct GenConfig {
    std::string name = "tiny";       // general.name
    uint64_t seed = 1;
    tensor::ElemType weight_type = tensor::ElemType::F32;  // large matrices: F32, F16, BF16 or Q8_0

    uint32_t n_vocab = 256;          // rows of token_embd (set from the tokenizer when one is attached)
    uint32_t n_ctx = 4096;           // context_length
    uint32_t n_embd = 64;            // E
    uint32_t n_layer = 4;
    uint32_t attn_interval = 2;      // every attn_interval-th layer is full attention, the others Gated DeltaNet
    uint32_t n_head = 4;
    uint32_t n_head_kv = 2;
    uint32_t head_dim = 16;          // D
    uint32_t n_rot = 8;              // rotary width (partial rotary)
    float rope_base = 10000.0f;
    float rms_eps = 1e-6f;

    uint32_t n_expert = 4;
    uint32_t n_expert_used = 2;
    uint32_t n_ff_exp = 64;
    uint32_t n_ff_shexp = 64;

    uint32_t ssm_d_conv = 4;
    uint32_t ssm_d_state = 16;
    uint32_t ssm_n_v_heads = 4;      // Hv (time_step_rank)
    uint32_t ssm_n_k_heads = 2;      // Hk (group_count)

    uint32_t hc = 4;                 // hyper-connection streams (> 1)
    uint32_t hc_lr = 8;

    uint32_t qsa_ratio = 4;          // compress ratio of every full-attention layer (0 = dense attention)
    uint32_t top_k = 64;             // indexer budget in tokens (a multiple of qsa_ratio)
    uint32_t idx_heads = 4;          // Hi
    uint32_t idx_dim = 16;           // Di (>= n_rot)

    bool ple = true;                 // PLE n-gram embeddings on layer 0 (a Gated DeltaNet layer)
    uint32_t ple_ngram = 3;          // N
    uint32_t ple_heads_per_ngram = 2;  // G; Hp = (N-1) G heads of width E / Hp
    uint32_t ple_conv_kernel = 4;
    uint32_t ple_head_vocab = 257;   // rows per PLE head
    uint32_t eos_token = 0;          // ple.eos_token_id (the tokenizer's EOS when one is attached)

    float weight_scale = 1.0f;       // multiplies the standard deviation of every random matrix

    bool mtp = false;                // append a NextN (MTP) block, blk.n_layer (qwen4exp-mtp.md 2.2)
    bool mtp_only = false;           // with mtp: only the MTP block (an MTP-only file for -md): no trunk tensors,
                                     // no token_embd / output (borrowed from the target), no PLE keys
};

// The preset names: "tiny" (the embedded default model), "small", "bench" (the shape of the project's speed
// figures, docs/kernels.md) and "bench-small" (small widths, 64k cells: long-context runs).
const std::vector<std::string> & gen_preset_names();
// Throws offgrid::Error for an unknown name.
GenConfig gen_preset(const std::string & name);

// Throws offgrid::Error naming the first setting that gives no valid model (dimension rules of the spec).
void validate(const GenConfig & config);

// The whole file as a writer: hyper-parameter keys, then `extra` (e.g. tokenizer.ggml.*), then the tensors.
// Identical arguments give identical bytes.
gguf::Writer generate_model(const GenConfig & config, const std::vector<gguf::KeyValue> & extra = {});

// One line: the main sizes and the weight count.
std::string describe(const GenConfig & config);

}  // namespace offgrid::model::qwen4exp
