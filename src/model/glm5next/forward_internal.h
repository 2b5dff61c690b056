// Pieces of the glm5-next forward (one file per block kind). Not part of the public interface.
#pragma once

#include <cstddef>
#include <vector>

#include "memory/plan.h"
#include "model/glm5next/model.h"
#include "ops/thread_pool.h"

namespace offgrid::model::glm5next::detail {

struct Batch {
    const Model & model;
    const Hparams & hp;
    const memory::CacheShape & shape;
    const memory::Plan & plan;
    memory::Storage & storage;
    ops::ThreadPool * pool;
    size_t n_tokens;
    bool dense = false;  // ForwardOptions::dense
};

// Per ubatch token, the cells its DSA layers attend to (set by a full-indexer layer, reused by shared ones).
using Selection = std::vector<std::vector<uint32_t>>;
// The selection as a LayerCarry's side data ({n_tokens, then per token: count, cells}) and back; an empty side
// (or n_tokens 0) is no selection. A side for another ubatch or cut short throws offgrid::Error.
std::vector<uint32_t> selection_to_side(const Selection & selection);
Selection selection_from_side(const std::vector<uint32_t> & side, size_t n_tokens);

// Token mixers and the FFN: input a (n_tokens x E), output y (n_tokens x E).
void kda_layer(const Batch & b, uint32_t il, const float * a, float * y);
void dsa_layer(const Batch & b, uint32_t il, const float * a, float * y, Selection & selection);
void ffn_layer(const Batch & b, uint32_t il, const float * f, float * y);

// One KDA token for one head: S[i + hd*j] (i key channel, j value channel) decays per key channel by
// exp(g[i]), then the delta rule; out[j] = scale * sum_i S[i,j] q[i].
void kda_step(float * S, size_t hd, const float * q, const float * k, const float * v, const float * g, float beta,
              float scale, float * out);

}  // namespace offgrid::model::glm5next::detail
