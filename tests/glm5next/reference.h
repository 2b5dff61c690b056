// A plain reference forward for glm5-next, written from the spec (../shared/spec/glm5next.md section 3) and
// independent of the engine: one sequence at positions 0..n-1, token by token, no caches (every past latent,
// indexer key and projected KDA input kept in plain vectors), pools and selection sets computed explicitly
// from positions, double-precision dot products. F32 caches on the engine side compare with it at 1e-4.
#pragma once

#include <cstdint>
#include <vector>

#include "model/glm5next/model.h"

namespace offgrid::test {

struct GlmReferenceOptions {
    bool dense = false;  // every visible pool (plus the tail), whatever the budget
};

// Logits of every token (n_vocab each); with `hidden` non-null also each token's hidden state
// (RMSNorm(mean of the streams) * output_norm).
std::vector<std::vector<float>> glm_reference(const model::glm5next::Model & m, const std::vector<int32_t> & tokens,
                                              const GlmReferenceOptions & opt = {},
                                              std::vector<std::vector<float>> * hidden = nullptr);

// The cells (positions) token t attends to on the first full-indexer layer of the last glm_reference call.
const std::vector<std::vector<uint32_t>> & glm_reference_selections();

}  // namespace offgrid::test
