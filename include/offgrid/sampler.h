// Choosing the next token from a row of logits. The chain runs in the order llama.cpp users know:
//   penalties (repetition / frequency / presence over the last accepted tokens) -> top-k -> top-p -> min-p
//   -> temperature -> draw.
//
// Thread safety: a Sampler holds mutable state (the accepted history and the generator). Use one Sampler per
// sequence and per thread, or guard it; const methods may run concurrently with each other only.
//
// Invariants:
//  1. A temperature <= 0 is greedy: the largest logit after the penalties, the lowest id among equals.
//  2. Draws depend only on the seed, the logits and the accepted history (own generator, no std::
//     distributions), so every platform and build draws the same tokens.
//  3. sample() never records its token: accept() does, for the token actually used (sampled or forced).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "offgrid/error.h"

namespace offgrid {

class Context;
namespace runtime { class Sampler; }

struct SamplingParams {
    float temperature = 0.8f;     // <= 0: greedy
    int32_t top_k = 40;           // 0: off; must be >= 0
    float top_p = 0.95f;          // 1: off; must be in (0, 1]
    float min_p = 0.05f;          // 0: off; must be in [0, 1]
    float repeat_penalty = 1.0f;  // 1: off; must be > 0. Positive logits are divided by it, negative multiplied
    float frequency_penalty = 0;  // subtracted once per occurrence in the window
    float presence_penalty = 0;   // subtracted once if the token occurs in the window
    int32_t repeat_last_n = 64;   // penalty window: 0 off, -1 the whole history; must be >= -1
    uint64_t seed = 0;
};

// Throws Error naming the first invalid field (what the Sampler constructor checks).
void validate(const SamplingParams & params);

struct TokenProb {
    int32_t id;
    float p;
};

class Sampler {
public:
    // Throws Error naming the first invalid field of `params`.
    explicit Sampler(const SamplingParams & params);
    ~Sampler();
    Sampler(Sampler &&) noexcept;
    Sampler & operator=(Sampler &&) noexcept;

    // Draws a token from one logit per vocabulary entry. Throws Error when `logits` is empty.
    int32_t sample(std::span<const float> logits);
    // The same from output row `i` of the context's last decode call (negative i: the last row).
    int32_t sample(const Context & ctx, int32_t i = -1);
    void accept(int32_t token);
    // Forgets the history and restarts the generator from the seed.
    void reset();

    // The candidates the draw would use, by decreasing probability (ties by increasing id), summing to 1.
    // Greedy gives the single winner with p = 1.
    std::vector<TokenProb> distribution(std::span<const float> logits) const;

    const SamplingParams & params() const;

private:
    std::unique_ptr<runtime::Sampler> impl_;
};

}  // namespace offgrid
