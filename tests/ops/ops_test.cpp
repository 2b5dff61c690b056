// Kernels against their plain twins and against hand-computed values.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <vector>

#include "random_data.h"
#include "common/error.h"
#include "ops/attention.h"
#include "ops/cpu/dispatch.h"
#include "ops/elementwise.h"
#include "ops/half.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/sequence.h"
#include "ops/thread_pool.h"

namespace offgrid::ops {
namespace {

using tensor::ElemType;

using test_data::random_floats;

TEST(Half, KnownEncodings) {
    EXPECT_EQ(float_to_half(1.0f), 0x3c00);
    EXPECT_EQ(float_to_half(-2.0f), 0xc000);
    EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
    EXPECT_EQ(float_to_half(65520.0f), 0x7c00);          // halfway to 65536 rounds to even: infinity
    EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
    EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, even stays
    EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, odd rounds up
    EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
    EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
    EXPECT_TRUE(std::isinf(half_to_float(0x7c00)));
    EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
    EXPECT_EQ(bf16_to_float(float_to_bf16(1.5f)), 1.5f);
    EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
}

TEST(Half, RoundTripAllHalves) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = half_to_float(static_cast<uint16_t>(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(float_to_half(f), h) << h;
    }
}

// Encodes a row-major out x in float matrix in the given type.
std::vector<uint8_t> encode(const std::vector<float> & w, int64_t cols, int64_t rows, ElemType type) {
    std::vector<uint8_t> out(weight_row_bytes(type, cols) * rows);
    for (int64_t r = 0; r < rows; ++r) {
        uint8_t * dst = out.data() + weight_row_bytes(type, cols) * r;
        const float * src = w.data() + r * cols;
        if (type == ElemType::F32) {
            std::memcpy(dst, src, 4 * cols);
        } else if (type == ElemType::F16 || type == ElemType::BF16) {
            for (int64_t i = 0; i < cols; ++i) {
                const uint16_t h = type == ElemType::F16 ? float_to_half(src[i]) : float_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
        } else {
            for (int64_t b = 0; b < cols / 32; ++b) {
                float amax = 0;
                for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(src[b * 32 + i]));
                const float d = amax / 127.0f;
                const uint16_t dh = float_to_half(d);
                std::memcpy(dst + b * 34, &dh, 2);
                for (int i = 0; i < 32; ++i) {
                    const int q = d == 0 ? 0 : static_cast<int>(std::lround(src[b * 32 + i] / d));
                    dst[b * 34 + 2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
                }
            }
        }
    }
    return out;
}

class MatmulTypes : public ::testing::TestWithParam<ElemType> {};

TEST_P(MatmulTypes, MatchesScalarTwinAndDoubleMaths) {
    const ElemType type = GetParam();
    const int64_t cols = 96, rows = 37, n_tok = 5;
    const auto wf = random_floats(cols * rows, 1);
    const auto x = random_floats(cols * n_tok, 2);
    const auto bytes = encode(wf, cols, rows, type);
    const Matrix m = make_matrix(type, bytes.data(), cols, rows);
    std::vector<float> y(rows * n_tok), y_ref(rows * n_tok), y_threads(rows * n_tok);
    matmul(m, x.data(), n_tok, y.data());
    matmul_ref(m, x.data(), n_tok, y_ref.data());
    ThreadPool pool(3);
    matmul(m, x.data(), n_tok, y_threads.data(), &pool);
    // The kernel's activation format: f32, or each token row quantised (then y is the exact dot of the
    // dequantised weights with the dequantised activations, up to float rounding).
    const cpu::TypeKernels * k = cpu::kernels_for(type, cpu::active_isa());
    ASSERT_NE(k, nullptr);
    std::vector<float> x_seen = x;
    if (k->act_type != ElemType::F32) {
        std::vector<uint8_t> q(cpu::act_row_bytes(k->act_type, cols));
        for (int64_t t = 0; t < n_tok; ++t) {
            k->quantize_act(x.data() + t * cols, q.data(), cols);
            tensor::dequantize_row(k->act_type, q.data(), x_seen.data() + t * cols, cols);
        }
    }
    std::vector<float> deq(cols);
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t o = 0; o < rows; ++o) {
            dequantize_matrix_row(m, o, deq.data());
            double exact = 0, exact_seen = 0;
            for (int64_t i = 0; i < cols; ++i) exact += double(deq[i]) * x[t * cols + i];
            for (int64_t i = 0; i < cols; ++i) exact_seen += double(deq[i]) * x_seen[t * cols + i];
            EXPECT_NEAR(y[t * rows + o], exact_seen, 1e-4);
            EXPECT_NEAR(y_ref[t * rows + o], exact, 1e-4);
            EXPECT_EQ(y[t * rows + o], y_threads[t * rows + o]);  // bit-identical for any thread count
            // The stored type only perturbs the weights by its rounding (f32 activations only: quantised
            // activations are checked against exact_seen above).
            if (k->act_type != ElemType::F32) continue;
            double from_float = 0;
            for (int64_t i = 0; i < cols; ++i) from_float += double(wf[o * cols + i]) * x[t * cols + i];
            const double tol = type == ElemType::F32 ? 1e-4 : type == ElemType::F16 ? 2e-2 : 0.2;
            EXPECT_NEAR(y[t * rows + o], from_float, tol);
        }
    }
}

TEST_P(MatmulTypes, TokenGroupingDoesNotChangeBits) {
    const ElemType type = GetParam();
    const int64_t cols = 224, rows = 9, n_tok = 7;
    const auto wf = random_floats(cols * rows, 11);
    const auto x = random_floats(cols * n_tok, 12);
    const auto bytes = encode(wf, cols, rows, type);
    const Matrix m = make_matrix(type, bytes.data(), cols, rows);
    std::vector<float> all(rows * n_tok), one(rows);
    matmul(m, x.data(), n_tok, all.data());
    for (int64_t t = 0; t < n_tok; ++t) {
        matvec(m, x.data() + t * cols, one.data());
        for (int64_t o = 0; o < rows; ++o) {
            EXPECT_EQ(all[t * rows + o], one[o]) << "token " << t << " row " << o;
            EXPECT_NEAR(one[o], dot_row(m, o, x.data() + t * cols), 1e-4);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTypes,
                         ::testing::Values(ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::Q8_0));

TEST(Matmul, RejectsUnsupportedAndBadShapes) {
    float dummy[64] = {};
    EXPECT_THROW(make_matrix(ElemType::I32, dummy, 32, 1), Error);  // not a weight type
    EXPECT_THROW(make_matrix(ElemType::Q8_0, dummy, 20, 1), Error);
    EXPECT_THROW(make_matrix(ElemType::F32, dummy, 0, 1), Error);
}

TEST(Norm, RmsNormHandComputed) {
    const float x[4] = {1, 2, 3, 4};
    const float g[4] = {1, 1, 2, 0.5f};
    float y[4];
    rms_norm(x, 4, 1e-6f, g, y);
    const double s = 1.0 / std::sqrt(30.0 / 4 + 1e-6);
    EXPECT_NEAR(y[0], 1 * s, 1e-6);
    EXPECT_NEAR(y[2], 3 * s * 2, 1e-6);
    EXPECT_NEAR(y[3], 4 * s * 0.5, 1e-6);
    l2_norm(x, 4, 0.0f, y);
    EXPECT_NEAR(y[1], 2 / std::sqrt(30.0), 1e-7);
}

TEST(Softmax, SumsToOneAndIsShiftInvariant) {
    float a[3] = {1, 2, 3}, b[3] = {1001, 1002, 1003};
    softmax(a, 3);
    softmax(b, 3);
    const double e = std::exp(1.0), z = 1 + e + e * e;
    EXPECT_NEAR(a[0], 1 / z, 1e-7);
    EXPECT_NEAR(a[2], e * e / z, 1e-7);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(a[i], b[i], 1e-7);
}

TEST(Activations, Values) {
    EXPECT_NEAR(sigmoid(0.0f), 0.5f, 1e-7);
    EXPECT_NEAR(silu(2.0f), 2.0 / (1 + std::exp(-2.0)), 1e-6);
    EXPECT_EQ(softplus(30.0f), 30.0f);
    EXPECT_NEAR(softplus(0.0f), std::log(2.0), 1e-7);
    EXPECT_EQ(relu(-1.0f), 0.0f);
}

TEST(TopK, TiesGoToTheLowerIndex) {
    const float v[7] = {1, 3, 2, 3, 0, 3, 2};
    EXPECT_EQ(top_k(v, 7, 2), (std::vector<uint32_t>{1, 3}));
    EXPECT_EQ(top_k(v, 7, 4), (std::vector<uint32_t>{1, 3, 5, 2}));
    EXPECT_EQ(top_k(v, 7, 10).size(), 7u);
    const float nan_v[3] = {NAN, 1, NAN};
    EXPECT_EQ(top_k(nan_v, 3, 1), (std::vector<uint32_t>{1}));
}

TEST(TopK, MatchesTwinOnManyTies) {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> v(50);
        for (auto & x : v) x = static_cast<float>(rng() % 6);
        const size_t k = rng() % 52;
        EXPECT_EQ(top_k(v.data(), v.size(), k), top_k_ref(v.data(), v.size(), k));
    }
}

TEST(Rope, ComponentRule) {
    // [2,1,1,0]: S = 4, pairs 0..3 -> t, h, w, t.
    const std::array<int, 4> s1{2, 1, 1, 0};
    EXPECT_EQ(rope_component(s1, 0), 0);
    EXPECT_EQ(rope_component(s1, 1), 1);
    EXPECT_EQ(rope_component(s1, 2), 2);
    EXPECT_EQ(rope_component(s1, 3), 0);
    // [8,8,8,8]: sectors 24..31 fail their residue test and use e.
    const std::array<int, 4> s2{8, 8, 8, 8};
    EXPECT_EQ(rope_component(s2, 23), 2);
    for (int i = 24; i < 32; ++i) EXPECT_EQ(rope_component(s2, i), 3) << i;
}

TEST(Rope, MatchesDoubleFormulaAndPassesThroughTail) {
    RopeParams p;
    p.n_rot = 8;
    p.sections = {2, 1, 1, 0};
    const int head_dim = 16;
    auto x = random_floats(2 * head_dim, 9);
    auto y = x;
    const int pos = 37;
    imrope(y.data(), 2, head_dim, p, {pos, pos, pos, 0});
    for (int h = 0; h < 2; ++h) {
        const float * xh = x.data() + h * head_dim;
        const float * yh = y.data() + h * head_dim;
        for (int i = 0; i < 4; ++i) {
            const double theta = pos * std::pow(10000.0, -2.0 * i / 8);
            EXPECT_NEAR(yh[i], xh[i] * std::cos(theta) - xh[i + 4] * std::sin(theta), 2e-5);
            EXPECT_NEAR(yh[i + 4], xh[i] * std::sin(theta) + xh[i + 4] * std::cos(theta), 2e-5);
        }
        for (int i = 8; i < head_dim; ++i) EXPECT_EQ(yh[i], xh[i]);
    }
    // With the e component set, a [8,8,8,8] rotation differs from the token one only in pairs >= 24.
    RopeParams q;
    q.n_rot = 64;
    q.sections = {8, 8, 8, 8};
    auto a = rope_angles(q, {5, 5, 5, 0});
    auto b = rope_angles(q, {5, 5, 5, 5});
    for (int i = 0; i < 24; ++i) EXPECT_EQ(a.cos[i], b.cos[i]);
    for (int i = 24; i < 32; ++i) EXPECT_EQ(a.cos[i], 1.0f);
    EXPECT_NE(a.cos[24], b.cos[24]);
    RopeParams bad;
    bad.n_rot = 8;
    EXPECT_THROW(rope_angles(bad, {0, 0, 0, 0}), Error);
}

TEST(Conv, StepMatchesTwinWithDilation) {
    for (size_t dil : {1u, 3u}) {
        const size_t kernel = 4, ch = 5, n = 11, h = (kernel - 1) * dil;
        const auto w = random_floats(kernel * ch, 3);
        const auto x = random_floats(n * ch, 4);
        auto hist_a = random_floats(h * ch, 6);
        auto hist_b = hist_a;
        std::vector<float> out_a(n * ch), out_b(n * ch);
        for (size_t t = 0; t < n; ++t) causal_conv_step(w.data(), kernel, dil, ch, hist_a.data(), &x[t * ch], &out_a[t * ch]);
        causal_conv_ref(w.data(), kernel, dil, ch, hist_b.data(), x.data(), n, out_b.data());
        // Not bit-equal: the compiler may contract either loop into fused multiply-adds differently.
        for (size_t i = 0; i < out_a.size(); ++i) EXPECT_NEAR(out_a[i], out_b[i], 1e-5);
        EXPECT_EQ(hist_a, hist_b);
    }
    // Hand-computed: kernel 2, dilation 2, one channel, zero history: out[t] = w0*x[t-2] + w1*x[t].
    const float w[2] = {10, 1};
    float hist[2] = {0, 0};
    const float xs[4] = {1, 2, 3, 4};
    float out[4];
    causal_conv_ref(w, 2, 2, 1, hist, xs, 4, out);
    EXPECT_EQ(out[0], 1);
    EXPECT_EQ(out[1], 2);
    EXPECT_EQ(out[2], 13);
    EXPECT_EQ(out[3], 24);
    EXPECT_EQ(hist[0], 3);
    EXPECT_EQ(hist[1], 4);
}

TEST(DeltaRule, MatchesTwinAndHandValue) {
    const size_t dk = 8, dv = 6;
    auto s_a = random_floats(dk * dv, 7);
    auto s_b = s_a;
    for (int t = 0; t < 5; ++t) {
        const auto q = random_floats(dk, 10 + t), k = random_floats(dk, 20 + t), v = random_floats(dv, 30 + t);
        std::vector<float> oa(dv), ob(dv);
        gated_delta_step(s_a.data(), dk, dv, q.data(), k.data(), v.data(), 0.9f, 0.3f, 0.25f, oa.data());
        gated_delta_step_ref(s_b.data(), dk, dv, q.data(), k.data(), v.data(), 0.9f, 0.3f, 0.25f, ob.data());
        for (size_t m = 0; m < dv; ++m) EXPECT_NEAR(oa[m], ob[m], 1e-5);
    }
    for (size_t i = 0; i < s_a.size(); ++i) EXPECT_NEAR(s_a[i], s_b[i], 1e-5);
    // dk = dv = 1: S = 2 -> 1 after decay 0.5; delta = 0.5*(3 - 1*2) = 0.5; S = 1 + 2*0.5 = 2; out = 1*2*4.
    float s = 2, q = 4, k = 2, v = 3, o;
    gated_delta_step(&s, 1, 1, &q, &k, &v, 0.5f, 0.5f, 1.0f, &o);
    EXPECT_EQ(s, 2);
    EXPECT_EQ(o, 8);
}

// The KDA step against its plain twin: the same bits, token after token, for several head sizes (the state,
// the outputs); and a worked 1x1 case.
TEST(Sequence, KdaStepMatchesTwinBitForBit) {
    for (size_t hd : {1u, 7u, 16u, 64u}) {
        std::vector<float> s_a = random_floats(hd * hd, 200 + hd), s_b = s_a, decay(hd);
        for (int t = 0; t < 5; ++t) {
            auto q = random_floats(hd, 210 + t), k = random_floats(hd, 220 + t);
            const auto v = random_floats(hd, 230 + t);
            auto g = random_floats(hd, 240 + t);
            for (float & x : g) x = -std::fabs(x);  // log decays are <= 0
            std::vector<float> oa(hd), ob(hd);
            kda_step(s_a.data(), hd, q.data(), k.data(), v.data(), g.data(), 0.4f, 0.125f, oa.data(), decay.data());
            kda_step_ref(s_b.data(), hd, q.data(), k.data(), v.data(), g.data(), 0.4f, 0.125f, ob.data());
            for (size_t j = 0; j < hd; ++j) ASSERT_EQ(oa[j], ob[j]) << "hd " << hd << " token " << t << " out " << j;
        }
        for (size_t n = 0; n < s_a.size(); ++n) ASSERT_EQ(s_a[n], s_b[n]) << "hd " << hd << " state " << n;
    }
    // hd = 1: S = 2 decays by exp(log 0.5) to 1; delta = (3 - 1*2) * 0.5 = 0.5; S = 1 + 2*0.5 = 2; out = 2*4*1.
    float s = 2, q = 4, k = 2, v = 3, g = std::log(0.5f), o, d;
    kda_step(&s, 1, &q, &k, &v, &g, 0.5f, 1.0f, &o, &d);
    EXPECT_FLOAT_EQ(s, 2);
    EXPECT_FLOAT_EQ(o, 8);
}

TEST(Attention, MatchesTwinForF32AndF16Rows) {
    const size_t d = 16, width = 32, n = 9;
    const auto q = random_floats(d, 40);
    for (ElemType type : {ElemType::F32, ElemType::F16}) {
        std::vector<std::vector<uint8_t>> kr(n, std::vector<uint8_t>(width * 4)), vr(n, std::vector<uint8_t>(width * 4));
        std::vector<const void *> kp, vp;
        for (size_t j = 0; j < n; ++j) {
            const auto kf = random_floats(width, 50 + j), vf = random_floats(width, 70 + j);
            store_cache_row(kr[j].data(), type, kf.data(), width);
            store_cache_row(vr[j].data(), type, vf.data(), width);
            kp.push_back(kr[j].data());
            vp.push_back(vr[j].data());
        }
        CacheRows k{kp, type}, v{vp, type};
        std::vector<float> out(d), ref(d), scratch(n);
        attend_head(q.data(), d, k, v, 16, 0.25f, scratch.data(), out.data());
        attend_head_ref(q.data(), d, k, v, 16, 0.25f, ref.data());
        for (size_t i = 0; i < d; ++i) EXPECT_NEAR(out[i], ref[i], 1e-6);
        // One row: the output is that row's V slice.
        CacheRows k1{std::span<const void * const>(kp.data(), 1), type}, v1{std::span<const void * const>(vp.data(), 1), type};
        attend_head(q.data(), d, k1, v1, 16, 0.25f, scratch.data(), out.data());
        for (size_t i = 0; i < d; ++i) EXPECT_EQ(out[i], cache_element(vp[0], type, 16 + i));
    }
}

// The blocked pool scorer gives the plain loop's bits for any pool count (full blocks and a remainder), and the
// hand-computed value on a small case.
TEST(ScorePools, MatchesTwinAndIgnoresOtherPools) {
    const size_t heads = 3, dim = 16;
    const auto q = random_floats(heads * dim, 90);
    for (ElemType type : {ElemType::F32, ElemType::F16}) {
        for (size_t n : {0u, 1u, 4u, 7u, 13u}) {
            std::vector<std::vector<uint8_t>> rows(n, std::vector<uint8_t>(dim * 4));
            std::vector<const void *> keys;
            for (size_t p = 0; p < n; ++p) {
                const auto k = random_floats(dim, 100 + p);
                store_cache_row(rows[p].data(), type, k.data(), dim);
                keys.push_back(rows[p].data());
            }
            std::vector<float> got(n), want(n);
            score_pools(q.data(), heads, dim, keys, type, got.data());
            score_pools_ref(q.data(), heads, dim, keys, type, want.data());
            std::vector<float> key(dim);
            for (size_t p = 0; p < n; ++p) {
                // The SIMD dot sums in another order than the twin: a few roundings of sum |q k|.
                load_cache_row(keys[p], type, key.data(), dim);
                double magnitude = 0;
                for (size_t i = 0; i < heads * dim; ++i) magnitude += std::fabs(double(q[i]) * key[i % dim]);
                EXPECT_NEAR(got[p], want[p], 1e-6 * magnitude) << "pool " << p << " of " << n;
                float alone;
                score_pools(q.data(), heads, dim, std::span<const void * const>(keys).subspan(p, 1), type, &alone);
                EXPECT_EQ(alone, got[p]) << "pool " << p << " scored alone";
            }
        }
    }
    // Two heads of width 2: relu(1*2 + 2*(-3)) + relu(-1*2 + 0.5*(-3)) = 0, relu(1*1 + 2*1) + relu(-1 + 0.5) = 3.
    const float q2[4] = {1.0f, 2.0f, -1.0f, 0.5f};
    const float k0[2] = {2.0f, -3.0f}, k1[2] = {1.0f, 1.0f};
    const void * keys2[2] = {k0, k1};
    float out[2];
    score_pools(q2, 2, 2, keys2, ElemType::F32, out);
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 3.0f);
}

TEST(ThreadPool, CoversRangeOnceAndRethrows) {
    ThreadPool pool(4);
    std::vector<std::atomic<int>> hits(1000);
    pool.parallel_for(1000, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto & h : hits) EXPECT_EQ(h.load(), 1);
    EXPECT_THROW(pool.parallel_for(100, [](size_t b, size_t) {
        if (b > 0) throw std::runtime_error("boom");
    }), std::runtime_error);
    // Still usable afterwards.
    std::atomic<int> sum{0};
    pool.parallel_for(10, [&](size_t b, size_t e) { sum += static_cast<int>(e - b); });
    EXPECT_EQ(sum.load(), 10);
}

// Claimed ranges: every index exactly once, no range below min_chunk but the last of [0, n), the ranges shrink
// towards the end, and small jobs or a one-thread pool run as one range on the caller.
TEST(ThreadPool, ClaimsCoverRangeOnceLargestFirst) {
    for (int threads : {1, 2, 4}) {
        ThreadPool pool(threads);
        for (size_t n : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{4099}}) {
            for (size_t min_chunk : {size_t{1}, size_t{4}, size_t{16}}) {
                std::vector<std::atomic<int>> hits(n);
                std::mutex m;
                std::vector<std::pair<size_t, size_t>> ranges;
                pool.parallel_claims(n, [&](size_t b, size_t e) {
                    for (size_t i = b; i < e; ++i) hits[i]++;
                    std::lock_guard<std::mutex> lock(m);
                    ranges.emplace_back(b, e);
                }, min_chunk);
                for (auto & h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, n " << n;
                std::sort(ranges.begin(), ranges.end());
                if (threads == 1 || n <= min_chunk) {
                    EXPECT_EQ(ranges.size(), 1u);
                }
                for (size_t r = 0; r + 1 < ranges.size(); ++r) {
                    const size_t size = ranges[r].second - ranges[r].first;
                    EXPECT_GE(size, min_chunk);
                    // A claim takes 1/(2 threads) of what is left, so a later range is never the larger.
                    EXPECT_GE(size, ranges[r + 1].second - ranges[r + 1].first);
                }
                if (threads > 1 && n >= 64 * min_chunk) {
                    EXPECT_GT(ranges.size(), static_cast<size_t>(2 * threads));
                }
            }
        }
    }
    ThreadPool pool(2);
    EXPECT_THROW(pool.parallel_claims(100, [](size_t b, size_t) {
        if (b > 0) throw std::runtime_error("boom");
    }), std::runtime_error);
    std::atomic<int> sum{0};
    pool.parallel_claims(10, [&](size_t b, size_t e) { sum += static_cast<int>(e - b); }, 2);
    EXPECT_EQ(sum.load(), 10);
}

}  // namespace
}  // namespace offgrid::ops
