// `offgrid bench --spec-type`: speculative against plain greedy decoding on the same prompts in one run.
// Each prompt is `depth + n_prompt` tokens of a text (successive passages); with `repeat` the passage's first
// half follows it again (a workload that repeats its prompt, as code editing does). Both runs decode the prompt
// untimed in a fresh context, then generate n_gen tokens greedily; the time of the generation loop (drafting,
// verifying, sampling) is compared, and the two outputs must be identical.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "offgrid/context.h"
#include "offgrid/speculative.h"

namespace offgrid::tools {

struct SpecBenchParams {
    SpecParams spec;
    std::vector<uint32_t> depths{0};
    uint32_t n_prompt = 64;
    uint32_t n_gen = 128;
    uint32_t n_prompts = 8;      // passages per depth
    bool repeat = false;
    int n_threads = 1;
    uint32_t n_batch = 512;
    std::vector<int32_t> text;   // the tokens the passages are cut from (successive, wrapping)
    std::function<void(const std::string &)> status;
};

struct SpecBenchResult {
    uint32_t depth = 0;
    uint32_t prompts = 0;
    uint64_t tokens = 0;          // generated per run (plain and speculative alike)
    double plain_seconds = 0;
    double spec_seconds = 0;
    SpecStats stats;
    uint32_t identical = 0;       // prompts whose outputs agreed
    double decode_ms = 0;         // one one-token decode call after the last prompt (best of several)
    double verify_ms = 0;         // one decode call of n_max + 1 tokens there, rolled back (best of several)
    double plain_tps() const { return plain_seconds > 0 ? double(tokens) / plain_seconds : 0.0; }
    double spec_tps() const { return spec_seconds > 0 ? double(tokens) / spec_seconds : 0.0; }
    double speedup() const { return spec_seconds > 0 ? plain_seconds / spec_seconds : 0.0; }
};

// Throws offgrid::Error when the text is too short for one prompt or the model's context cannot hold a test.
std::vector<SpecBenchResult> run_spec_bench(const std::shared_ptr<const Model> & model, const SpecBenchParams & p);

}  // namespace offgrid::tools
