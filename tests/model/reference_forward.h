// Test-only plain reference forward: one sequence at positions 0..n-1, F32, no caches. Every layer is
// recomputed over the whole token list with plain loops and the scalar twin kernels; QSA selection sets are
// built explicitly (pools of r consecutive tokens, top top_k/r pools by score with ties to the earlier pool,
// plus the incomplete tail; dense while every visible pool fits). Returns n x n_vocab logits.
#pragma once

#include <cmath>
#include <vector>

#include "model/qwen4exp/model.h"

namespace offgrid::test {

struct ReferenceOptions {
    bool force_dense = false;   // ignore QSA selection (attend to every visible token)
    // true: every product in f32, even for weight types whose kernel multiplies 8-bit activations (the
    // default quantises x per row like the engine does, with the plain quantiser).
    bool f32_activations = false;
    size_t window = 0;          // > 0: dense attention sees only the last `window` positions (a standard window)
    // Out: the smallest relative gap, over every sparse selection, between the last kept and the first
    // dropped pool score (exact zero ties excluded). A selection whose gap is within float noise may
    // legitimately differ between two correct implementations that round differently.
    mutable double min_selection_gap = INFINITY;
};

std::vector<float> reference_forward(const model::qwen4exp::Model & m, const std::vector<int32_t> & tokens,
                                     const ReferenceOptions & opt = {});

}  // namespace offgrid::test
