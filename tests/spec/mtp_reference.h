// Test-only plain reference of the qwen4exp MTP row (../shared/spec/qwen4exp-mtp.md 3.2-3.4): plain loops over
// the weights' scalar row products, one row at a time, dense attention over every row before it (and itself).
#pragma once

#include <cstdint>
#include <vector>

#include "model/qwen4exp/model.h"

namespace offgrid::spec_test {

struct RefRow {
    int32_t token;
    int32_t pos;
    std::vector<float> h;   // hc x E
};

struct RefOut {
    std::vector<float> logits;  // n_vocab
    std::vector<float> h_out;   // hc x E
};

// Runs `rows` in order through the MTP block of `m` (its own tables). global_hnorm: one RMSNorm over all hc x E
// values of h instead of one per stream.
std::vector<RefOut> mtp_reference(const model::qwen4exp::Model & m, const std::vector<RefRow> & rows, bool global_hnorm);

}  // namespace offgrid::spec_test
