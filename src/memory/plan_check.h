// The one check of a plan before a model runs it (the runtime calls it for every ubatch; a forward may then
// trust the plan's structure). What it checks is what every model reads: token ids and positions, sequence
// groups covering each token once, pool size, tails, new pools and each token's view of its sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "memory/plan.h"

namespace offgrid::memory {

struct PlanLimits {
    uint32_t n_vocab = 0;  // token ids in 0..n_vocab-1
    uint32_t kpool = 0;    // the model's pool size (0: no pools; the plan's must be equal)
};

// Throws offgrid::Error naming the ubatch token (or group, or pool) and the rule it breaks. `seen` is working
// space kept by the caller (resized to the plan's token count; a steady caller allocates nothing).
void check_plan(const Plan & plan, const PlanLimits & limits, std::vector<uint8_t> & seen);

}  // namespace offgrid::memory
