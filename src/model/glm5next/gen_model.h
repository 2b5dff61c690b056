// Deterministic random-weight glm5-next GGUF files (`offgrid gen-model --arch glm5-next`, tests). The `tiny`
// preset is the spec's section 7 test configuration: 6 layers KDA KDA KDA DSA KDA DSA (the last DSA layer a
// shared indexer), E 64, H 4, R = Rq = 32, Dn = Dv = 16, hd 16, indexer 4 x 16 with top_k 8 and kpool 4,
// mHC 4 streams / 3 Sinkhorn iterations, one leading dense layer, 4 experts (2 used, 1 shared), clamps 0.6..1.2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/value.h"
#include "gguf/writer.h"
#include "tensor/types.h"

namespace offgrid::model::glm5next {

struct GenConfig {
    std::string name = "tiny";
    uint64_t seed = 1;
    tensor::ElemType weight_type = tensor::ElemType::F32;  // large matrices: F32, F16, BF16 or Q8_0

    uint32_t n_vocab = 128;
    uint32_t n_ctx = 256;
    uint32_t n_embd = 64;
    std::vector<uint32_t> layer_kinds{0, 0, 0, 1, 0, 1};   // head_count_kv: 0 KDA, 1 DSA
    std::vector<uint32_t> indexer_types{1, 1, 1, 1, 1, 0};  // 1 full, 0 shared
    bool nextn = false;               // append a NextN (MTP) block
    uint32_t n_head = 4;
    uint32_t q_lora_rank = 32, kv_lora_rank = 32, key_mla = 16, value_mla = 16;
    float rms_eps = 1e-5f, ln_eps = 1e-6f;
    uint32_t conv_kernel = 4, kda_head_dim = 16;
    bool bounded_decay = true;        // write kda.gate_lower_bound (else the softplus decay)
    float gate_lower_bound = -5.0f;
    uint32_t idx_heads = 4, idx_dim = 16, top_k = 8, kpool = 4;
    uint32_t hc = 4, sinkhorn_iterations = 3;
    float hc_eps = 1e-6f;
    uint32_t n_ff = 96, n_dense = 1;
    uint32_t n_expert = 4, n_expert_used = 2, n_shared = 1, n_ff_exp = 32;
    bool expert_weights_norm = true;
    float expert_weights_scale = 2.5f;
    bool clamp = true;                // write swiglu_clamp_exp / _shexp (per-layer limits in 0.6..1.2)
    float weight_scale = 1.0f;
};

const std::vector<std::string> & gen_preset_names();  // "tiny", "tiny-dense" (top_k 131072), "small"
GenConfig gen_preset(const std::string & name);        // throws offgrid::Error for an unknown name
void validate(const GenConfig & config);               // throws offgrid::Error naming the setting
gguf::Writer generate_model(const GenConfig & config, const std::vector<gguf::KeyValue> & extra = {});
std::string describe(const GenConfig & config);

}  // namespace offgrid::model::glm5next
