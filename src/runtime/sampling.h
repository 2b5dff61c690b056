// Token sampling from a logits row. The chain runs in the order llama.cpp users know:
//   penalties (repetition / frequency / presence over the last n accepted tokens) -> top-k -> top-p -> min-p
//   -> temperature -> draw.
// A temperature <= 0 means greedy: the largest logit after the penalties (lowest id on ties).
// Draws are deterministic for a seed (own generator, no std:: distributions, so every platform agrees).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "offgrid/sampler.h"

namespace offgrid::runtime {

using SamplingParams = offgrid::SamplingParams;  // the public struct

// Throws offgrid::Error naming the first invalid field (the public function, offgrid/sampler.h).
using offgrid::validate;

using TokenProb = offgrid::TokenProb;

class Sampler {
public:
    explicit Sampler(const SamplingParams & params);  // validates

    // Draws a token from logits (one per vocabulary entry). Does not record it: call accept() for the token
    // actually used (sampled or forced), so the penalties see it.
    int32_t sample(std::span<const float> logits);
    void accept(int32_t token);
    // Forgets the history and restarts the generator from the seed.
    void reset();

    // The distribution the draw would use: candidates left after the chain, by decreasing probability (ties by
    // increasing id), probabilities summing to 1. Greedy gives the single winner with p = 1.
    std::vector<TokenProb> distribution(std::span<const float> logits) const;

    const SamplingParams & params() const { return params_; }
    // The accepted tokens of the penalty window, oldest first.
    std::vector<int32_t> history() const;

private:
    struct Candidate {
        int32_t id;
        float logit;
    };
    double next_uniform();  // in [0, 1)
    // The chain into cand_ and prob_ (sorted, summing to 1): what distribution() returns, in buffers kept from
    // call to call, so a steady sample() allocates nothing.
    void run_chain(std::span<const float> logits) const;

    SamplingParams params_;
    // The penalty window: a ring of repeat_last_n entries (ring_start_ the oldest once full), or the whole
    // history in order when repeat_last_n is -1.
    std::vector<int32_t> ring_;
    size_t ring_start_ = 0;
    uint64_t rng_state_ = 0;
    mutable std::vector<Candidate> cand_;
    mutable std::vector<double> prob_;
    mutable std::vector<int32_t> window_;
};

}  // namespace offgrid::runtime
