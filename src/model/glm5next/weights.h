// glm5-next weights (spec section 2): large matrices are views into the GGUF mapping, small vectors F32 copies.
// Every tensor's presence, shape and element type is checked at load.
#pragma once

#include <vector>

#include "gguf/reader.h"
#include "model/architecture.h"
#include "model/common/hyper_connections.h"
#include "model/common/moe.h"
#include "model/glm5next/hparams.h"
#include "ops/matmul.h"

namespace offgrid::model::glm5next {

struct KdaWeights {
    ops::Matrix q, k, v;                  // d_in x E each
    std::vector<float> conv_q, conv_k, conv_v;  // K taps per channel: conv[k + K*c]
    ops::Matrix f_a, f_b;                 // decay LoRA: hd x E, d_in x hd
    std::vector<float> dt_bias;           // d_in
    std::vector<float> a;                 // H, = -exp(A_log)
    ops::Matrix beta;                     // H x E
    ops::Matrix g_a, g_b;                 // output-gate LoRA: hd x E, d_in x hd
    std::vector<float> norm;              // hd, shared by the heads
    ops::Matrix o;                        // E x d_in
};

struct IndexerWeights {
    bool present = false;                 // full-indexer layers (and NextN)
    ops::Matrix k;                        // Di x E
    std::vector<float> k_norm, k_bias;    // Di: LayerNorm gamma, beta
    ops::Matrix gate;                     // Di x E
    std::vector<float> ape;               // kpool x Di: ape[m*Di + d]
    ops::Matrix q_b;                      // Hi*Di x Rq
    ops::Matrix proj;                     // Hi x E
};

struct DsaWeights {
    ops::Matrix q_a;                      // Rq x E
    std::vector<float> q_a_norm;          // Rq
    ops::Matrix q_b;                      // H*Dn x Rq
    ops::Matrix kv_a;                     // R x E
    std::vector<float> kv_a_norm;         // R
    ops::Matrix k_b;                      // H*R rows of Dn: row h*R + r
    ops::Matrix v_b;                      // H*Dv rows of R: row h*Dv + v
    ops::Matrix o;                        // E x H*Dv
    IndexerWeights idx;
};

struct FfnWeights {
    bool dense = false;
    ops::Matrix gate, up, down;           // dense SwiGLU, or the shared expert (width F * n_shared)
    ops::Matrix router;                   // n_expert x E
    std::vector<float> probs_bias;        // n_expert (selection only)
    common::ExpertWeights experts;
};

struct NextnWeights {                     // the MTP block, loaded when present (not run by plain decoding)
    bool present = false;
    ops::Matrix eh_proj;                  // E x 2E
    std::vector<float> enorm, hnorm;      // E
    ops::Matrix embed_tokens, head;       // optional: n_vocab x E
    std::vector<float> head_norm;         // optional: E
};

struct LayerWeights {
    std::vector<float> attn_norm, ffn_norm;  // E
    common::MhcWeights hc_attn, hc_ffn;
    KdaWeights kda;
    DsaWeights dsa;
    FfnWeights ffn;
    NextnWeights nextn;
};

struct Weights {
    ops::Matrix token_embd;               // n_vocab x E
    std::vector<float> output_norm;       // E
    ops::Matrix output;                   // n_vocab x E (required: no tying)
    std::vector<LayerWeights> layers;     // n_layer_all
};

// With a span (model/architecture.h): only the tensors tensors_for names are bound.
Weights load_weights(const gguf::Reader & reader, const Hparams & hp, const LayerSpan & span = {});
// Which tensors load_weights(span) binds, one flag per tensor of reader.tensors(): the span's blk.<il>.*, the
// embedding when it starts at layer 0, every other tensor (output norm, head, NextN blocks) when it ends at the
// last layer.
std::vector<bool> tensors_for(const gguf::Reader & reader, const Hparams & hp, const LayerSpan & span);

}  // namespace offgrid::model::glm5next
