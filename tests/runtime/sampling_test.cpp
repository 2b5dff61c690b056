// The sampling chain on distributions worked out by hand: logits are logs of simple probabilities, so every
// filter's result is a small fraction.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/sampling.h"

namespace offgrid::runtime {
namespace {

// p = {1/2, 1/4, 1/8, 1/8}
const std::vector<float> kHalves = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};

SamplingParams plain() {
    SamplingParams p;
    p.temperature = 1;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.repeat_penalty = 1;
    return p;
}

void expect_dist(const std::vector<TokenProb> & got, const std::vector<std::pair<int, double>> & want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].id, want[i].first) << "rank " << i;
        EXPECT_NEAR(got[i].p, want[i].second, 1e-6) << "rank " << i;
    }
}

TEST(Sampling, PlainSoftmax) {
    expect_dist(Sampler(plain()).distribution(kHalves), {{0, 0.5}, {1, 0.25}, {2, 0.125}, {3, 0.125}});
}

TEST(Sampling, TopK) {
    SamplingParams p = plain();
    p.top_k = 2;
    expect_dist(Sampler(p).distribution(kHalves), {{0, 2.0 / 3}, {1, 1.0 / 3}});
    p.top_k = 3;  // the tie at 1/8 goes to the lower id
    expect_dist(Sampler(p).distribution(kHalves), {{0, 4.0 / 7}, {1, 2.0 / 7}, {2, 1.0 / 7}});
    p.top_k = 10;
    expect_dist(Sampler(p).distribution(kHalves), {{0, 0.5}, {1, 0.25}, {2, 0.125}, {3, 0.125}});
}

TEST(Sampling, TopP) {
    SamplingParams p = plain();
    p.top_p = 0.7f;  // 1/2 + 1/4 reaches it
    expect_dist(Sampler(p).distribution(kHalves), {{0, 2.0 / 3}, {1, 1.0 / 3}});
    p.top_p = 0.8f;  // needs the third
    expect_dist(Sampler(p).distribution(kHalves), {{0, 4.0 / 7}, {1, 2.0 / 7}, {2, 1.0 / 7}});
    p.top_p = 0.4f;
    expect_dist(Sampler(p).distribution(kHalves), {{0, 1.0}});
}

TEST(Sampling, MinP) {
    SamplingParams p = plain();
    p.min_p = 0.3f;  // keeps p >= 0.15
    expect_dist(Sampler(p).distribution(kHalves), {{0, 2.0 / 3}, {1, 1.0 / 3}});
    p.min_p = 0.2f;  // keeps p >= 0.1: all
    expect_dist(Sampler(p).distribution(kHalves), {{0, 0.5}, {1, 0.25}, {2, 0.125}, {3, 0.125}});
    p.min_p = 0.6f;
    expect_dist(Sampler(p).distribution(kHalves), {{0, 1.0}});
}

TEST(Sampling, Temperature) {
    SamplingParams p = plain();
    p.temperature = 0.5f;  // p^2: 1/4, 1/16, 1/64, 1/64 over 11/32
    expect_dist(Sampler(p).distribution(kHalves), {{0, 8.0 / 11}, {1, 2.0 / 11}, {2, 0.5 / 11}, {3, 0.5 / 11}});
    p.temperature = 2;  // sqrt(p)
    const double s = std::sqrt(0.5) + std::sqrt(0.25) + 2 * std::sqrt(0.125);
    expect_dist(Sampler(p).distribution(kHalves),
                {{0, std::sqrt(0.5) / s}, {1, 0.5 / s}, {2, std::sqrt(0.125) / s}, {3, std::sqrt(0.125) / s}});
}

TEST(Sampling, ChainOrder) {
    // top-k 3 -> {4/7, 2/7, 1/7}; top-p 0.8 on that -> {1/2, 1/4} (over the full row it would keep three);
    // min-p 0.3 keeps both (ratio 1/2); temperature 2 last -> sqrt(1/2) : sqrt(1/4).
    SamplingParams p = plain();
    p.top_k = 3;
    p.top_p = 0.8f;
    p.min_p = 0.3f;
    p.temperature = 2;
    const double s = std::sqrt(0.5) + 0.5;
    expect_dist(Sampler(p).distribution(kHalves), {{0, std::sqrt(0.5) / s}, {1, 0.5 / s}});
}

TEST(Sampling, RepetitionPenalty) {
    SamplingParams p = plain();
    p.repeat_penalty = 2;
    Sampler s(p);
    const std::vector<float> logits = {2.0f, 1.0f, -1.0f, 0.5f};
    for (const int t : {0, 2, 0}) s.accept(t);
    // -> {1, 1, -2, 0.5}: each distinct token once, positive divided, negative multiplied.
    const double z = 2 * std::exp(1.0) + std::exp(-2.0) + std::exp(0.5);
    expect_dist(s.distribution(logits),
                {{0, std::exp(1.0) / z}, {1, std::exp(1.0) / z}, {3, std::exp(0.5) / z}, {2, std::exp(-2.0) / z}});
}

TEST(Sampling, FrequencyAndPresencePenalties) {
    SamplingParams p = plain();
    p.repeat_penalty = 2;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    Sampler s(p);
    for (const int t : {0, 0, 2}) s.accept(t);
    // token 0: 2/2 - 2*0.5 - 0.25 = -0.25; token 2: -1*2 - 0.5 - 0.25 = -2.75
    const std::vector<float> logits = {2.0f, 1.0f, -1.0f, 0.5f};
    const double z = std::exp(-0.25) + std::exp(1.0) + std::exp(-2.75) + std::exp(0.5);
    expect_dist(s.distribution(logits),
                {{1, std::exp(1.0) / z}, {3, std::exp(0.5) / z}, {0, std::exp(-0.25) / z}, {2, std::exp(-2.75) / z}});
}

TEST(Sampling, PenaltyWindow) {
    SamplingParams p = plain();
    p.temperature = 0;
    p.repeat_penalty = 4;
    p.repeat_last_n = 2;
    Sampler s(p);
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f};
    EXPECT_EQ(s.sample(logits), 0);
    for (const int t : {0, 1, 2}) s.accept(t);  // the window keeps {1, 2}
    EXPECT_EQ(s.history(), (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(s.sample(logits), 0);
    s.accept(0);  // now {2, 0}: 0 falls to 0.75, 1 wins
    EXPECT_EQ(s.sample(logits), 1);
    s.reset();
    EXPECT_TRUE(s.history().empty());

    p.repeat_last_n = 0;  // off
    Sampler off(p);
    off.accept(0);
    EXPECT_TRUE(off.history().empty());
    EXPECT_EQ(off.sample(logits), 0);
}

TEST(Sampling, GreedyTakesTheLargestLowestIdOnTies) {
    SamplingParams p = plain();
    p.temperature = 0;
    Sampler s(p);
    EXPECT_EQ(s.sample(std::vector<float>{1, 5, 5, -2}), 1);
    EXPECT_EQ(s.sample(std::vector<float>{-INFINITY, -INFINITY}), 0);
    expect_dist(s.distribution(std::vector<float>{0, 1, 7, 2}), {{2, 1.0}});
    p.temperature = -1;
    EXPECT_EQ(Sampler(p).sample(std::vector<float>{0, 1, 7, 2}), 2);
}

TEST(Sampling, DrawsFollowTheDistribution) {
    Sampler s(plain());
    const int n = 40000;
    std::vector<int> count(4, 0);
    for (int i = 0; i < n; ++i) ++count[s.sample(kHalves)];
    const double want[4] = {0.5, 0.25, 0.125, 0.125};
    for (int t = 0; t < 4; ++t) EXPECT_NEAR(count[t] / double(n), want[t], 0.01) << t;
}

TEST(Sampling, DeterministicForASeed) {
    SamplingParams p = plain();
    p.seed = 1234;
    Sampler a(p), b(p);
    std::vector<int> first;
    for (int i = 0; i < 200; ++i) {
        first.push_back(a.sample(kHalves));
        EXPECT_EQ(first.back(), b.sample(kHalves));
    }
    a.reset();
    for (int i = 0; i < 200; ++i) EXPECT_EQ(a.sample(kHalves), first[i]);
    p.seed = 1235;
    Sampler c(p);
    int same = 0;
    for (int i = 0; i < 200; ++i) same += c.sample(kHalves) == first[i];
    EXPECT_LT(same, 150);
}

TEST(Sampling, ImpossibleTokensAreNeverDrawn) {
    Sampler s(plain());
    const std::vector<float> logits = {-INFINITY, 0.0f, -INFINITY, 0.0f};
    expect_dist(s.distribution(logits), {{1, 0.5}, {3, 0.5}});
    for (int i = 0; i < 100; ++i) {
        const int t = s.sample(logits);
        EXPECT_TRUE(t == 1 || t == 3);
    }
}

template <typename F>
void expect_error(F && f, const std::string & fragment) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning '" << fragment << "'";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

TEST(Sampling, RejectsInvalidParameters) {
    const auto with = [](auto edit) {
        SamplingParams p;
        edit(p);
        return p;
    };
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.top_p = 0; })); }, "top_p");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.top_p = 1.5f; })); }, "top_p");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.top_p = NAN; })); }, "top_p");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.top_k = -1; })); }, "top_k");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.min_p = -0.1f; })); }, "min_p");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.min_p = 1.1f; })); }, "min_p");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.repeat_penalty = 0; })); }, "repeat_penalty");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.repeat_last_n = -2; })); }, "repeat_last_n");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.temperature = NAN; })); }, "temperature");
    expect_error([&] { Sampler(with([](SamplingParams & p) { p.frequency_penalty = INFINITY; })); },
                 "frequency_penalty");
    EXPECT_NO_THROW(validate(with([](SamplingParams & p) {
        p.top_p = 1;
        p.min_p = 1;
        p.top_k = 0;
        p.repeat_last_n = -1;
    })));
}

// Greedy without penalties takes a one-pass argmax; it must pick what the full chain picks (ties to the lowest id,
// signed zeros equal) and fail the same way.
TEST(Sampling, GreedyFastPathEqualsTheChain) {
    SamplingParams p = plain();
    p.temperature = 0;
    Sampler fast(p);
    uint32_t x = 7;
    for (int round = 0; round < 50; ++round) {
        std::vector<float> l(300);
        for (auto & v : l) {
            x = x * 1664525u + 1013904223u;
            v = static_cast<float>(static_cast<int>(x >> 28) - 8);  // few distinct values: many ties
        }
        if (round % 5 == 0) l[static_cast<size_t>(round)] = -0.0f;
        if (round % 7 == 0) l[3] = -INFINITY;
        EXPECT_EQ(fast.sample(l), fast.distribution(l).front().id) << "round " << round;
    }
    expect_error([&] { fast.sample(std::vector<float>{0, NAN}); }, "logits[1] is NaN");
    expect_error([&] { fast.sample(std::vector<float>{3, INFINITY}); }, "logits[1] is +inf");
    expect_error([&] { fast.sample(std::vector<float>{}); }, "empty");
    EXPECT_EQ(fast.sample(std::vector<float>{-INFINITY, -INFINITY}), 0);
}

TEST(Sampling, RejectsBadLogits) {
    Sampler s(plain());
    expect_error([&] { s.sample(std::vector<float>{}); }, "empty");
    expect_error([&] { s.sample(std::vector<float>{0, NAN}); }, "logits[1] is NaN");
    expect_error([&] { s.sample(std::vector<float>{INFINITY}); }, "logits[0] is +inf");
    expect_error([&] { s.sample(std::vector<float>{-INFINITY, -INFINITY}); }, "every logit is -inf");
}

}  // namespace
}  // namespace offgrid::runtime
