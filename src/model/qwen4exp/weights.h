// qwen4exp weights: large matrices are views into the GGUF memory map, each of any type tensor::dequantize_row
// reads (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K..Q6_K IQ4_NL IQ4_XS; files mix them), multiplied through
// the type's kernels; small vectors (norm gammas, biases, conv kernels, scales) of any of those types are
// converted to F32 copies once at load. Every tensor's presence, shape and element type is checked at load (spec section 2).
#pragma once

#include "model/architecture.h"

#include <vector>

#include "gguf/reader.h"
#include "model/common/hyper_connections.h"
#include "model/common/moe.h"
#include "model/qwen4exp/hparams.h"
#include "model/qwen4exp/ple_projection.h"
#include "ops/matmul.h"

namespace offgrid::model::qwen4exp {

// Gated-mean hyper-connections (model/common/hyper_connections.h), low rank hc_lr.
using HcWeights = common::GatedHcWeights;

struct AttentionWeights {
    ops::Matrix q, k, v, o;    // q: 2*D*H rows ([q_h | gate_h] per head); k, v: D*Hkv; o: E x D*H
    float q_scale = 1, k_scale = 1, v_scale = 1, o_scale = 1;
    std::vector<float> q_norm, k_norm;  // D
    // QSA indexer (present on layers with compress ratio > 0).
    ops::Matrix idx_q, idx_k;           // Hi*Di x E, Di x E
    std::vector<float> idx_q_norm, idx_k_norm;  // Di
};

struct RecurrentWeights {
    ops::Matrix qkv, gate, beta, alpha, out;
    float qkv_scale = 1, gate_scale = 1, beta_scale = 1, alpha_scale = 1, out_scale = 1;
    std::vector<float> conv;      // d_conv taps per channel: conv[k + ch*d_conv]
    std::vector<float> dt_bias;   // Hv
    std::vector<float> a;         // Hv, = -exp(A_log)
    std::vector<float> norm;      // d_state, used as-is
};

struct PleWeights {
    ops::Matrix key;              // hc*E x E
    ops::Matrix value;            // E x E
    std::vector<float> norm_key, norm_query, norm_conv;  // hc x E each
    std::vector<float> conv;      // Kp taps per channel (hc*E channels)
};

// The routed experts (fused or separate gate/up, per-expert scales) are common::ExpertWeights.
struct MoeWeights : common::ExpertWeights {
    ops::Matrix router;           // n_expert x E
    std::vector<float> shared_gate_inp;  // E
    ops::Matrix shared_gate, shared_up, shared_down;
    float shared_gate_scale = 1, shared_up_scale = 1, shared_down_scale = 1;
};

struct LayerWeights {
    HcWeights hc_attn, hc_ffn;
    AttentionWeights attn;        // full-attention layers
    RecurrentWeights recr;        // Gated DeltaNet layers
    PleWeights ple;               // the PLE layer only
    MoeWeights moe;
};

// The NextN (MTP) draft block, blk.N with N = the trunk's layer count (qwen4exp-mtp.md 2.2): a full-attention
// layer run dense (its indexer tensors are required in the file but not read), the MoE FFN, and the nextn tensors.
struct MtpWeights {
    bool present = false;
    LayerWeights block;           // hc_attn, hc_ffn, attn, moe
    std::vector<float> enorm;     // E, gamma of the embedding's RMSNorm
    std::vector<float> hnorm;     // hc x E, gamma of each stream's RMSNorm
    ops::Matrix eh_proj;          // E x 2E: input columns [embedding | hidden]
    float eh_scale = 1;
    HcWeights hc_head;            // the draft's output mixer (no inject)
    ops::Matrix embed;            // nextn.embed_tokens; data null: the trunk's (or the target's) token_embd
    ops::Matrix head;             // nextn.shared_head_head; data null: the trunk's (or the target's) output
};

struct Weights {
    ops::Matrix token_embd;       // n_vocab x E
    ops::Matrix output;           // n_vocab x E (token_embd when the head is tied)
    HcWeights output_hc;
    ops::Matrix ple_table;        // rows x Dp
    PleProjections ple_proj;      // the PLE layer's products folded into the table; empty: multiply per token
    std::vector<LayerWeights> layers;
    MtpWeights mtp;               // present when the file carries blk.N.nextn.eh_proj
};

struct LoadOptions {
    // The largest PleProjections built at load, in bytes (0: never). A model whose n-gram tables are too
    // large for it multiplies ple_key and ple_value per token, as the spec writes them.
    size_t ple_projection_bytes = size_t{256} << 20;
    // The layers to load (model/architecture.h); the others' tensors are neither bound nor read.
    LayerSpan span;
};

// Throws offgrid::Error naming the file and the tensor for anything missing, misshapen or of a type the
// kernels cannot read.
Weights load_weights(const gguf::Reader & reader, const Hparams & hp, const LoadOptions & options = {});

// Which tensors load_weights(span) binds, one flag per tensor of reader.tensors(): the span's blk.<il>.*, the
// embedding when it starts at layer 0 (and when it ends at the last layer with a tied head), the PLE table when it
// holds the PLE layer, and every other tensor (head, output mixer, MTP block) when it ends at the last layer.
std::vector<bool> tensors_for(const gguf::Reader & reader, const Hparams & hp, const LayerSpan & span);

// True when the file has an MTP block to load (nextn_predict_layers > 0 and blk.N.nextn.eh_proj.weight).
bool has_mtp_block(const gguf::Reader & reader, const Hparams & hp);
// The MTP block alone (every tensor of spec 2.2 required but the two optional nextn tables). Throws
// offgrid::Error naming the file and tensor.
MtpWeights load_mtp_weights(const gguf::Reader & reader, const Hparams & hp);

}  // namespace offgrid::model::qwen4exp
