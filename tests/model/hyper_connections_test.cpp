// common::gated_hc_mix (the qwen4exp gated mean, with the grouped `up` of prepare_gated_hc) against a plain
// reference written here from the formula, bit for bit, for 1, 2 and 5 tokens, with no pool and with pools of
// 1 and 2 threads:
//   xn[h] = RMSNorm(R[h]) * gamma[h]            (rms_norm's definition: sum of squares in double, index order)
//   lo    = silu((down xn) / hc)
//   gate  = sigmoid(sum_k up[o][k] lo[k])        (each product rounded, added in k order)
//   mixed = (sum_h xn[h] gate[h]) * (1 / hc)     (streams in order, each product rounded)
//   inject = inject_w xn
// The two matrix products down xn and inject_w xn are ops::dot_row's (the matmul kernels' own order, not what
// this test is about).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "model/common/hyper_connections.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"

namespace offgrid::model::common {
namespace {

// A product rounded on its own even where the compiler would contract it into a following addition.
float product(float a, float b) {
    volatile float p = a * b;
    return p;
}

struct Mixer {
    GatedHcShape shape;
    std::vector<float> down_w, up_w, inject_w;  // row-major: lr x dim, dim x lr, hc x dim
    GatedHcWeights w;
};

std::unique_ptr<Mixer> make_mixer(size_t E, size_t hc, size_t lr, bool with_inject, uint32_t seed) {
    auto m = std::make_unique<Mixer>();
    m->shape = {E, hc, lr, 1e-6f};
    const size_t dim = hc * E;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](std::vector<float> & v, size_t count, float scale) {
        v.resize(count);
        for (float & x : v) x = scale * nd(rng);
    };
    fill(m->w.norm, dim, 1.0f);
    fill(m->down_w, lr * dim, 0.5f);
    fill(m->up_w, dim * lr, 1.0f);
    m->w.down = ops::make_matrix(tensor::ElemType::F32, m->down_w.data(), static_cast<int64_t>(dim), static_cast<int64_t>(lr));
    m->w.up = ops::make_matrix(tensor::ElemType::F32, m->up_w.data(), static_cast<int64_t>(lr), static_cast<int64_t>(dim));
    if (with_inject) {
        fill(m->inject_w, hc * dim, 0.1f);
        m->w.inject = ops::make_matrix(tensor::ElemType::F32, m->inject_w.data(), static_cast<int64_t>(dim),
                                       static_cast<int64_t>(hc));
    }
    prepare_gated_hc(m->w);
    return m;
}

void reference_mix(const Mixer & m, const float * R, size_t n, float * mixed, float * inject) {
    const size_t E = m.shape.E, hc = m.shape.hc, lr = m.shape.lr, dim = hc * E;
    const float inv_hc = 1.0f / static_cast<float>(hc);
    std::vector<float> xn(dim), lo(lr), gate(dim);
    for (size_t t = 0; t < n; ++t) {
        const float * X = R + t * dim;
        for (size_t h = 0; h < hc; ++h) {
            double ss = 0.0;
            for (size_t i = 0; i < E; ++i) ss += static_cast<double>(X[h * E + i]) * static_cast<double>(X[h * E + i]);
            const float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(E)) + m.shape.eps);
            for (size_t i = 0; i < E; ++i) xn[h * E + i] = (X[h * E + i] * scale) * m.w.norm[h * E + i];
        }
        for (size_t k = 0; k < lr; ++k) {
            const float d = ops::dot_row(m.w.down, static_cast<int64_t>(k), xn.data()) * inv_hc;
            lo[k] = d / (1.0f + std::exp(-d));
        }
        for (size_t o = 0; o < dim; ++o) {
            // Narrow ranks: lr products summed in k order (the grouped layout); wide ones: the matrix product.
            float s;
            if (lr <= kGroupedUpMaxRank) {
                s = product(m.up_w[o * lr], lo[0]);
                for (size_t k = 1; k < lr; ++k) s += product(m.up_w[o * lr + k], lo[k]);
            } else {
                s = ops::dot_row(m.w.up, static_cast<int64_t>(o), lo.data());
            }
            gate[o] = 1.0f / (1.0f + std::exp(-s));
        }
        for (size_t i = 0; i < E; ++i) {
            float sum = 0.0f;
            for (size_t h = 0; h < hc; ++h) sum += product(xn[h * E + i], gate[h * E + i]);
            mixed[t * E + i] = sum * inv_hc;
        }
        if (inject) {
            for (size_t h = 0; h < hc; ++h) inject[t * hc + h] = ops::dot_row(m.w.inject, static_cast<int64_t>(h), xn.data());
        }
    }
}

size_t first_difference(const std::vector<float> & a, const std::vector<float> & b) {
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    }
    return a.size();
}

TEST(GatedHcMix, EqualsThePlainFormulaBitForBit) {
    ops::ThreadPool one(1), two(2);
    ops::ThreadPool * const pools[3] = {nullptr, &one, &two};
    struct Case {
        size_t E, hc, lr;
        bool inject;
    };
    // The bench shape (E 1024, hc 4, lr 8); E not a multiple of the weight group nor of a block; no inject (the
    // output mixer); ranks 1 and 3.
    // The real model's rank 320 (and 48) multiply `up` as a matrix.
    for (const Case c : {Case{1024, 4, 8, true}, Case{300, 4, 8, true}, Case{100, 3, 3, false}, Case{37, 2, 1, true},
                         Case{160, 4, 320, true}, Case{96, 2, 48, false}}) {
        const auto m = make_mixer(c.E, c.hc, c.lr, c.inject, static_cast<uint32_t>(c.E + c.lr));
        const size_t dim = c.hc * c.E;
        for (size_t n : {1u, 2u, 5u}) {
            std::mt19937 rng(static_cast<uint32_t>(n));
            std::normal_distribution<float> nd(0.0f, 3.0f);
            std::vector<float> R(n * dim);
            for (float & x : R) x = nd(rng);
            std::vector<float> want(n * c.E), want_inject(n * c.hc);
            reference_mix(*m, R.data(), n, want.data(), c.inject ? want_inject.data() : nullptr);
            for (ops::ThreadPool * pool : pools) {
                std::vector<float> got(n * c.E, -1.0f), got_inject(n * c.hc, -1.0f);
                gated_hc_mix(m->shape, m->w, R.data(), n, got.data(), c.inject ? got_inject.data() : nullptr, pool);
                const int threads = pool ? pool->n_threads() : 0;
                const size_t at = first_difference(got, want);
                EXPECT_EQ(at, got.size()) << "E=" << c.E << " hc=" << c.hc << " lr=" << c.lr << " n=" << n
                                          << " pool threads=" << threads << ": first difference at " << at
                                          << (at < got.size() ? " got " + std::to_string(got[at]) + " want " +
                                                                    std::to_string(want[at])
                                                              : std::string());
                if (c.inject) {
                    EXPECT_EQ(first_difference(got_inject, want_inject), got_inject.size())
                        << "inject, E=" << c.E << " n=" << n << " pool threads=" << threads;
                }
            }
        }
    }
}

TEST(GatedHcMix, WideRanksKeepNoCopyOfUp) {
    EXPECT_TRUE(make_mixer(64, 4, kGroupedUpMaxRank + 1, true, 3)->w.up_grouped.empty());
    EXPECT_FALSE(make_mixer(64, 4, kGroupedUpMaxRank, true, 3)->w.up_grouped.empty());
}

TEST(GatedHcMix, GroupedUpHoldsEveryWeightAndZeroPadding) {
    const auto m = make_mixer(37, 2, 3, false, 9);  // dim 74: the last group has 6 outputs and 10 pads
    const size_t dim = 74, lr = 3, G = ops::kLowrankGroup;
    ASSERT_EQ(m->w.up_grouped.size(), (dim + G - 1) / G * G * lr);
    for (size_t o = 0; o < (dim + G - 1) / G * G; ++o) {
        for (size_t k = 0; k < lr; ++k) {
            const float v = m->w.up_grouped[(o / G) * lr * G + k * G + o % G];
            EXPECT_EQ(v, o < dim ? m->up_w[o * lr + k] : 0.0f) << "o=" << o << " k=" << k;
        }
    }
}

}  // namespace
}  // namespace offgrid::model::common
