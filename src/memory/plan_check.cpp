#include "memory/plan_check.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace offgrid::memory {

namespace {

[[noreturn]] void bad_token(size_t t, const std::string & what) {
    throw Error("forward: ubatch token " + std::to_string(t) + ": " + what);
}

}  // namespace

void check_plan(const Plan & plan, const PlanLimits & limits, std::vector<uint8_t> & seen) {
    if (plan.kpool != limits.kpool) {
        throw Error("forward: plan pool size " + std::to_string(plan.kpool) + " differs from the model's " +
                    std::to_string(limits.kpool));
    }
    const size_t T = plan.tokens.size();
    for (size_t t = 0; t < T; ++t) {
        const TokenPlan & tp = plan.tokens[t];
        if (tp.token < 0 || static_cast<uint32_t>(tp.token) >= limits.n_vocab) {
            bad_token(t, "id " + std::to_string(tp.token) + " out of range (n_vocab " + std::to_string(limits.n_vocab) + ")");
        }
        if (tp.pos < 0) bad_token(t, "negative position");
        if (limits.kpool > 0 && tp.tail.size() >= limits.kpool) {
            bad_token(t, "tail of " + std::to_string(tp.tail.size()) + " cells, the pool size is " +
                             std::to_string(limits.kpool));
        }
        const SeqView view = plan.seq_view(tp.seq);
        if (view.reps.size() != view.pools.size()) bad_token(t, "its sequence's view has no rep for some pool");
        if (tp.n_visible > view.cells.size() || tp.first_visible > tp.n_visible || tp.n_pools > view.pools.size()) {
            bad_token(t, "plan sees more cells or pools than its sequence has");
        }
    }
    // Every token in exactly one sequence group (recurrent layers run along the groups).
    seen.assign(T, 0);
    for (const SeqGroup & g : plan.groups) {
        for (uint32_t t : g.tokens) {
            if (t >= T || seen[t]++) {
                throw Error("forward: sequence group of seq " + std::to_string(g.seq) + " lists ubatch token " +
                            std::to_string(t) + " that is out of range or already in a group");
            }
        }
    }
    for (size_t t = 0; t < T; ++t) {
        if (!seen[t]) bad_token(t, "in no sequence group");
    }
    for (const NewPool & np : plan.new_pools) {
        if (np.members.size() != limits.kpool) {
            throw Error("forward: a new pool has " + std::to_string(np.members.size()) + " members, expected " +
                        std::to_string(limits.kpool));
        }
    }
}

}  // namespace offgrid::memory
