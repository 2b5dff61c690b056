// common::best_pools, the O(n) selection of the sparse path, against the plain top-k twin (ops::top_k_ref, sorted):
// the same set (score descending, ties to the lower index, NaN as -inf) in sequence order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/common/kpool_select.h"
#include "ops/elementwise.h"
#include "ops/attention.h"

namespace offgrid::model::common {
namespace {

std::vector<uint32_t> twin(const std::vector<float> & v, size_t k) {
    std::vector<uint32_t> r = ops::top_k_ref(v.data(), v.size(), k);
    std::sort(r.begin(), r.end());
    return r;
}

// The weighted scores over the memory's element-major key blocks are the per-pool scores' bits (F32 and F16
// keys, a last partial block, several heads), so the sparse selection of glm5-next does not depend on the path.
TEST(ScorePoolBlocksWeighted, SameBitsAsPerPoolScores) {
    constexpr size_t B = memory::kPoolKeyBlock;
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (tensor::ElemType type : {tensor::ElemType::F32, tensor::ElemType::F16}) {
        const size_t elem = type == tensor::ElemType::F32 ? 4 : 2;
        for (size_t n : {1u, 16u, 37u}) {
            const size_t heads = 3, dim = 20;
            std::vector<float> q(heads * dim), w(heads);
            for (float & x : q) x = nd(rng);
            for (float & x : w) x = nd(rng);
            // Keys one after the other (the rep rows' pooled parts) and in blocks (the memory's table).
            std::vector<uint8_t> rows(n * dim * elem), blocks((n + B - 1) / B * B * dim * elem, 0xff);
            std::vector<const void *> keys(n);
            for (size_t p = 0; p < n; ++p) {
                std::vector<float> key(dim);
                for (float & x : key) x = nd(rng);
                ops::store_cache_row(&rows[p * dim * elem], type, key.data(), dim);
                keys[p] = &rows[p * dim * elem];
            }
            const memory::PoolKeyTable table{blocks.data(), dim, elem};
            for (size_t p = 0; p < n; ++p)
                for (size_t e = 0; e < dim; ++e)
                    std::memcpy(const_cast<uint8_t *>(table.element(p, e)), &rows[(p * dim + e) * elem], elem);
            std::vector<float> per_pool(n), blocked(n);
            score_pools_weighted(q.data(), w.data(), heads, dim, keys, type, per_pool.data());
            score_pool_blocks_weighted(q.data(), w.data(), heads, dim, table, type, n, blocked.data());
            for (size_t p = 0; p < n; ++p) ASSERT_EQ(blocked[p], per_pool[p]) << "pool " << p << " of " << n;
        }
    }
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

// Many pools per budget (a decode at depth) take a floor from a sample of every 16th score. Arrangements that make
// the sample say too little (the best pools all off the sampled places: many candidates) or too much (only the
// sampled places high: fewer than a budget at or above the floor, so the full selection runs), sorted either
// way, ties at the threshold and NaN: always the twin's set.
TEST(BestPools, SampledFloorAnyArrangement) {
    std::mt19937 rng(10);
    std::normal_distribution<float> nd;
    std::vector<uint32_t> scratch, picked;
    for (int round = 0; round < 48; ++round) {
        const size_t n = 2048 + rng() % 6000, k = 1 + rng() % (n / 8);
        std::vector<float> v(n);
        const int arrangement = round % 6;
        for (size_t p = 0; p < n; ++p) {
            const bool sampled = p % 16 == 8;
            float x = nd(rng);
            if (arrangement == 1) x = sampled ? x - 10.0f : x;          // the best never sampled
            if (arrangement == 2) x = sampled ? x + 10.0f : x;          // only sampled places high
            if (arrangement == 3) x = static_cast<float>(p);            // ascending
            if (arrangement == 4) x = -static_cast<float>(p);           // descending
            if (arrangement == 5) x = std::round(x * 2.0f) / 2.0f;      // few levels: ties at the threshold
            if (rng() % 50 == 0) x = NAN;
            v[p] = x;
        }
        best_pools(v.data(), n, k, scratch, picked);
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
