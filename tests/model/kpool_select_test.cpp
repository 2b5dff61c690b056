// common::best_pools, the O(n) selection of the sparse path, against the plain top-k twin (ops::top_k_ref, sorted):
// the same set (score descending, ties to the lower index, NaN as -inf) in sequence order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/common/kpool_select.h"
#include "ops/elementwise.h"

namespace offgrid::model::common {
namespace {

std::vector<uint32_t> twin(const std::vector<float> & v, size_t k) {
    std::vector<uint32_t> r = ops::top_k_ref(v.data(), v.size(), k);
    std::sort(r.begin(), r.end());
    return r;
}

TEST(BestPools, LinearSelectionEqualsTopKTwin) {
    std::mt19937 rng(5);
    std::vector<uint32_t> scratch;
    std::vector<uint32_t> picked;
    for (int round = 0; round < 200; ++round) {
        const size_t n = 1 + rng() % 300, k = rng() % (n + 3);
        std::vector<float> v(n);
        const int levels = 1 + static_cast<int>(rng() % 6);  // few levels: many ties
        for (auto & x : v) {
            const uint32_t r = rng() % 100;
            x = r < 3 ? NAN : r < 6 ? -INFINITY : r < 20 ? 0.0f : r < 23 ? -0.0f : static_cast<float>(rng() % levels);
        }
        best_pools(v.data(), n, k, scratch, picked);
        EXPECT_EQ(picked, twin(v, k)) << "round " << round << " n " << n << " k " << k;
        EXPECT_EQ(best_pools(v.data(), n, k), picked);
    }
}

TEST(BestPools, ContinuousScores) {
    std::mt19937 rng(6);
    std::normal_distribution<float> nd;
    std::vector<float> v(5000);
    for (auto & x : v) x = nd(rng);
    std::vector<uint32_t> scratch;
    std::vector<uint32_t> picked;
    for (size_t k : {0u, 1u, 512u, 4999u, 5000u, 6000u}) {
        best_pools(v.data(), v.size(), k, scratch, picked);
        EXPECT_EQ(picked, twin(v, k)) << k;
    }
}

// The decode shape of the bench file at 64k (16384 pools, budget 512), scores like the indexer's (sums of relu'd
// dots, positive, many with one top digit), rounded so that the threshold value repeats: ties at scale.
TEST(BestPools, ModelSizeWithTies) {
    std::mt19937 rng(8);
    std::normal_distribution<float> nd;
    std::vector<float> v(16384);
    std::vector<uint32_t> scratch, picked;
    for (float step : {0.0f, 1.0f / 64, 1.0f / 4}) {
        for (auto & x : v) {
            const float s = std::max(0.0f, nd(rng)) + std::max(0.0f, nd(rng)) + std::max(0.0f, nd(rng));
            x = step > 0 ? std::round(s / step) * step : s;
        }
        for (size_t k : {512u, 511u}) {
            best_pools(v.data(), v.size(), k, scratch, picked);
            EXPECT_EQ(picked, twin(v, k)) << "step " << step << " k " << k;
        }
    }
}

// The decode step's split selection: each range of a split keeps its own best, the union is selected again
// (best_pools_among). Any split, ties included, gives best_pools' set.
TEST(BestPools, AmongTheRangesBestEqualsTheWhole) {
    std::mt19937 rng(9);
    std::vector<uint32_t> scratch, picked, cand, range;
    std::vector<float> work;
    for (int round = 0; round < 300; ++round) {
        const size_t n = 1 + rng() % 3000, k = rng() % (n / 2 + 2);
        std::vector<float> v(n);
        const int levels = 1 + static_cast<int>(rng() % 8);
        for (auto & x : v) {
            const uint32_t r = rng() % 100;
            x = r < 3 ? NAN : r < 10 ? 0.0f : r < 12 ? -0.0f : static_cast<float>(rng() % levels);
        }
        cand.clear();
        for (size_t p0 = 0; p0 < n;) {
            const size_t p1 = std::min(n, p0 + 1 + rng() % 700);
            best_pools(v.data() + p0, p1 - p0, k, scratch, range);
            for (uint32_t p : range) cand.push_back(static_cast<uint32_t>(p0 + p));
            p0 = p1;
        }
        best_pools_among(v.data(), cand.data(), cand.size(), k, work, scratch, picked);
        EXPECT_EQ(picked, twin(v, k)) << "round " << round << " n " << n << " k " << k;
    }
}

// Scores over the whole float range (every exponent, both signs, infinities): the radix digits of all three
// passes decide, and equal keys sit in every bin.
TEST(BestPools, EveryExponentAndSign) {
    std::mt19937 rng(7);
    std::vector<uint32_t> scratch, picked;
    for (int round = 0; round < 60; ++round) {
        std::vector<float> v(1 + rng() % 800);
        for (auto & x : v) {
            const uint32_t r = rng() % 50;
            x = r == 0 ? INFINITY : r == 1 ? -INFINITY : std::ldexp(static_cast<float>(rng() % 64) - 32.0f,
                                                                    static_cast<int>(rng() % 200) - 100);
        }
        const size_t k = rng() % (v.size() + 1);
        best_pools(v.data(), v.size(), k, scratch, picked);
        EXPECT_EQ(picked, twin(v, k)) << "round " << round;
    }
}

}  // namespace
}  // namespace offgrid::model::common
