// The engine's forward against the plain reference forward on random-weight tiny models: sparse QSA with
// r in {2, 4, 8}, dense, weight types, optional tensors; batch-layout and thread-count invariance; rollback
// snapshots.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "gguf/reader.h"
#include "model/qwen4exp/forward.h"
#include "model/qwen4exp/shift.h"
#include "model/qwen4exp/model.h"
#include "ops/cpu/dispatch.h"
#include "reference_forward.h"
#include "test_memory.h"
#include "tiny_model.h"

namespace offgrid::model::qwen4exp {
namespace {

struct Built {
    std::vector<uint8_t> bytes;
    Model model;
};

Built build(const test::TinyConfig & c) {
    std::vector<uint8_t> bytes = test::tiny_model(c).build();
    Model m = Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "tiny"));
    return {std::move(bytes), std::move(m)};
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, uint32_t n_vocab) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto & x : t) x = 1 + static_cast<int32_t>(rng() % (n_vocab - 1));
    // A few EOS tokens, to exercise the PLE reset.
    for (size_t i = 50; i < n; i += 97) t[i] = 0;
    return t;
}

std::vector<float> engine(const Model & m, const std::vector<int32_t> & tokens, size_t n_ubatch,
                          ops::ThreadPool * pool = nullptr, tensor::ElemType cache = tensor::ElemType::F32) {
    test::TestMemory mem(m, static_cast<uint32_t>(tokens.size()), m.hparams().kpool, cache, cache);
    std::vector<float> out;
    for (size_t s = 0; s < tokens.size(); s += n_ubatch) {
        const size_t n = std::min(n_ubatch, tokens.size() - s);
        const auto l = mem.decode({tokens.begin() + s, tokens.begin() + s + n}, std::vector<bool>(n, true), pool);
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

double max_abs_diff(const std::vector<float> & a, const std::vector<float> & b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
        d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    }
    return d;
}

// 2048 tokens: long enough for many pools per budget, a few seconds in Release.
size_t sequence_length() { return 2048; }

class SparseRatio : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SparseRatio, EngineEqualsReference) {
    test::TinyConfig c;
    c.ratio = GetParam();
    c.top_k = 8 * c.ratio;  // 8 pools: sparse from 8 * r + r visible tokens on
    const Built b = build(c);
    // Two correct implementations that round differently may pick different pools when two scores are
    // within float noise of each other. Use the first token sequence whose selections are all decided by
    // a clear margin, and say which. Engine and reference scores differ by about 1e-7 relative; over 2048
    // tokens gaps below 1e-5 are common, so the long run accepts 2e-6.
    const double min_gap = sequence_length() > 1000 ? 2e-6 : 1e-5;
    std::vector<int32_t> tokens;
    std::vector<float> ref;
    test::ReferenceOptions opt;
    uint32_t seed = 0;
    for (; seed < 6; ++seed) {
        tokens = random_tokens(sequence_length(), 7 + c.ratio + 100 * seed, b.model.hparams().n_vocab);
        opt = test::ReferenceOptions{};
        ref = test::reference_forward(b.model, tokens, opt);
        if (opt.min_selection_gap >= min_gap) break;
    }
    ASSERT_LT(seed, 6u) << "every candidate sequence has a near-tie selection";
    const auto got = engine(b.model, tokens, 37);
    const double d = max_abs_diff(ref, got);
    // The selection must matter here, or this test would not test it.
    test::ReferenceOptions dense;
    dense.force_dense = true;
    const double sparse_vs_dense = max_abs_diff(ref, test::reference_forward(b.model, tokens, dense));
    std::printf("[sparse] r=%u n=%zu seed %u: engine vs reference max |diff| %.3g (sparse vs dense %.3g, smallest "
                "relative selection gap %.3g)\n", c.ratio, tokens.size(), seed, d, sparse_vs_dense, opt.min_selection_gap);
    EXPECT_LE(d, 1e-4);
    EXPECT_GT(sparse_vs_dense, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Ratios, SparseRatio, ::testing::Values(2u, 4u, 8u));

// Sparse prompt processing (chunks of 512 tokens: a block of queries scores the pooled keys together,
// each selects its own pools plus its causal tail) equals token-by-token decoding at 4096 tokens, and both
// follow the reference. 32 pools of budget: past 32 * r + r visible tokens every token is sparse.
class SparsePrompt : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SparsePrompt, ChunkedPromptEqualsTokenByToken) {
    test::TinyConfig c;
    c.ratio = GetParam();
    c.top_k = 32 * c.ratio;
    const Built b = build(c);
    const size_t n = 4096;
    const auto tokens = random_tokens(n, 900 + c.ratio, b.model.hparams().n_vocab);
    test::ReferenceOptions opt;
    const auto ref = test::reference_forward(b.model, tokens, opt);
    ops::ThreadPool pool(2);
    const auto chunked = engine(b.model, tokens, 512, &pool);
    const auto single = engine(b.model, tokens, 1);
    const double d = max_abs_diff(chunked, single), d_ref = max_abs_diff(chunked, ref);
    std::printf("[sparse prompt] r=%u n=%zu: chunks of 512 vs token by token max |diff| %.3g (vs reference %.3g, "
                "smallest relative selection gap %.3g)\n", c.ratio, n, d, d_ref, opt.min_selection_gap);
    EXPECT_LE(d, 1e-4);
    // The distance to the reference is printed, not asserted: over 4096 tokens two correct implementations drift
    // apart by about 1e-4 even with every selection decided (measured 0.95e-4 to 1.4e-4 at r = 8 across ISA
    // levels), and a near-tie (r = 4 here) flips a pool. EngineEqualsReference asserts the agreement at 2048.
}

INSTANTIATE_TEST_SUITE_P(Ratios, SparsePrompt, ::testing::Values(4u, 8u));

TEST(Forward, DenseModelEqualsReference) {
    test::TinyConfig c;
    c.ratio = 0;
    const Built b = build(c);
    const auto tokens = random_tokens(120, 3, b.model.hparams().n_vocab);
    EXPECT_LE(max_abs_diff(test::reference_forward(b.model, tokens), engine(b.model, tokens, 16)), 1e-4);
}

TEST(Forward, BatchLayoutAndThreadsGiveIdenticalLogits) {
    test::TinyConfig c;
    c.ratio = 4;
    const Built b = build(c);
    const auto tokens = random_tokens(90, 4, b.model.hparams().n_vocab);
    const auto one_batch = engine(b.model, tokens, 90);
    const auto one_by_one = engine(b.model, tokens, 1);
    ops::ThreadPool pool(2), pool4(4);
    const auto threaded = engine(b.model, tokens, 13, &pool);
    // Fewer tokens than threads: each token spreads its heads (and pool scores) over the pool instead.
    const auto threaded_decode = engine(b.model, tokens, 1, &pool4);
    // Every reduction has a fixed order that does not depend on the batch split or the thread count.
    EXPECT_EQ(one_batch, one_by_one);
    EXPECT_EQ(one_batch, threaded);
    EXPECT_EQ(one_batch, threaded_decode);
}

// A decode step spreads its pool scores over the pool and selects within each scored range first (the caller
// then selects among the ranges' best): with thousands of pools there are several ranges, and the logits must
// be those of the step on one thread.
TEST(Forward, DecodeSelectionSplitOverRangesGivesIdenticalLogits) {
    test::TinyConfig c;
    c.ratio = 2;
    c.top_k = 8 * c.ratio;
    const Built b = build(c);
    const auto tokens = random_tokens(6000, 15, b.model.hparams().n_vocab);  // 3000 pools: up to 6 ranges
    ops::ThreadPool pool2(2), pool4(4);
    const auto alone = engine(b.model, tokens, 1);
    EXPECT_EQ(alone, engine(b.model, tokens, 1, &pool2));
    EXPECT_EQ(alone, engine(b.model, tokens, 1, &pool4));
}

TEST(Forward, LargeRecurrentHeadsSpreadOverThreadsGiveIdenticalLogits) {
    test::TinyConfig c;
    c.d_state = 128;  // large enough for the delta rule to split value heads over the pool
    const Built b = build(c);
    const auto tokens = random_tokens(12, 14, b.model.hparams().n_vocab);
    ops::ThreadPool pool(2);
    const auto alone = engine(b.model, tokens, 5);
    EXPECT_EQ(alone, engine(b.model, tokens, 5, &pool));
    EXPECT_LE(max_abs_diff(test::reference_forward(b.model, tokens), alone), 1e-4);
}

TEST(Forward, WeightTypesMatchReference) {
    for (auto type : {tensor::ElemType::F16, tensor::ElemType::BF16, tensor::ElemType::Q8_0}) {
        test::TinyConfig c;
        c.matrix_type = type;
        const Built b = build(c);
        const auto tokens = random_tokens(80, 5, b.model.hparams().n_vocab);
        const auto ref = test::reference_forward(b.model, tokens);
        const double d = max_abs_diff(ref, engine(b.model, tokens, 23));
        const ops::cpu::TypeKernels * k = ops::cpu::kernels_for(type, ops::cpu::active_isa());
        if (k == nullptr || k->act_type == tensor::ElemType::F32) {
            EXPECT_LE(d, 1e-4) << "type " << static_cast<int>(type);
            continue;
        }
        // A kernel that quantises activations (the default int16 kernels, or 8-bit with OFFGRID_QUANT_ACT=int8). Quantisation is discontinuous: inputs that agree to float
        // rounding can still round a few quants the other way, so the engine is only close to the reference
        // that quantises the same way, and must be much closer to it than to the f32-activation maths.
        test::ReferenceOptions f32_act;
        f32_act.f32_activations = true;
        const double d_act = max_abs_diff(ref, test::reference_forward(b.model, tokens, f32_act));
        EXPECT_GT(d_act, 1e-3);  // the activation quantisation really changes the result
        std::printf("[weight types] %d: engine %.3g from the quantising reference, %.3g from the f32 one\n", int(type), d, d_act);
        EXPECT_LT(d, 0.1 * d_act) << "engine " << d << " from the quantising reference, which is " << d_act
                                  << " from the f32-activation one";
    }
}

// The PLE products folded into the table at load (model/qwen4exp/ple_projection.h): a token's key and value
// from its Hp precomputed rows equal the spec's two products of the concatenated rows.
TEST(PleProjection, TokenRowsEqualTheProductsOfTheConcatenatedRows) {
    for (auto type : {tensor::ElemType::F32, tensor::ElemType::Q8_0}) {
        test::TinyConfig c;
        c.matrix_type = type;
        const Built b = build(c);
        const Hparams & hp = b.model.hparams();
        const Weights & w = b.model.weights();
        const PleProjections & p = w.ple_proj;
        ASSERT_FALSE(p.empty());
        const size_t Hp = hp.ple_heads(), Dp = hp.ple_dim, E = hp.n_embd, dim = size_t{hp.hc} * E;
        EXPECT_EQ(p.bytes(), PleProjections::bytes_for(hp));
        const PleWeights & pw = w.layers[hp.ple_layer].ple;
        std::mt19937 rng(11);
        std::vector<uint32_t> rows(Hp);
        std::vector<float> u(E), key(dim), value(E);
        for (int trial = 0; trial < 50; ++trial) {
            for (size_t h = 0; h < Hp; ++h) {
                rows[h] = static_cast<uint32_t>(rng() % hp.ple_vocab_sizes[h]);
                ops::dequantize_matrix_row(w.ple_table, static_cast<int64_t>(hp.ple_offsets[h] + rows[h]), &u[h * Dp]);
            }
            p.token(rows.data(), key.data(), value.data());
            // The exact products of the stored weights (f32 activations, element order).
            for (size_t o = 0; o < dim; ++o) {
                const double ref = ops::dot_row_ref(pw.key, static_cast<int64_t>(o), u.data());
                EXPECT_NEAR(key[o], ref, 1e-5 * (1.0 + std::fabs(ref))) << "key output " << o;
            }
            for (size_t o = 0; o < E; ++o) {
                const double ref = ops::dot_row_ref(pw.value, static_cast<int64_t>(o), u.data());
                EXPECT_NEAR(value[o], ref, 1e-5 * (1.0 + std::fabs(ref))) << "value output " << o;
            }
        }
    }
}

TEST(PleProjection, BuiltWithinTheBudgetAndTheDirectProductsAgree) {
    std::vector<uint8_t> bytes = test::tiny_model(test::TinyConfig{}).build();
    auto load = [&](size_t budget) {
        LoadOptions o;
        o.ple_projection_bytes = budget;
        return Model::from_reader(gguf::Reader::from_memory(bytes.data(), bytes.size(), "tiny"), o);
    };
    const Model folded = load(LoadOptions{}.ple_projection_bytes);
    const size_t need = PleProjections::bytes_for(folded.hparams());
    EXPECT_FALSE(load(need).weights().ple_proj.empty());
    const Model direct = load(need - 1);
    EXPECT_TRUE(direct.weights().ple_proj.empty());
    EXPECT_TRUE(load(0).weights().ple_proj.empty());
    // Without the tables the forward multiplies per token; both paths are the reference's maths.
    const auto tokens = random_tokens(150, 12, folded.hparams().n_vocab);
    const auto ref = test::reference_forward(folded, tokens);
    const auto a = engine(folded, tokens, 16), d = engine(direct, tokens, 16);
    EXPECT_LE(max_abs_diff(ref, a), 1e-4);
    EXPECT_LE(max_abs_diff(ref, d), 1e-4);
    EXPECT_NE(a, d);  // the two paths really differ (the order of the sums)
    ops::ThreadPool pool(2);
    EXPECT_EQ(d, engine(direct, tokens, 1, &pool));
}

TEST(Forward, OptionalTensorVariantsMatchReference) {
    test::TinyConfig c;
    c.tied_output = true;
    c.fused_gate_up = false;
    c.with_scales = true;
    c.ple = false;
    const Built b = build(c);
    EXPECT_EQ(b.model.weights().output.data, b.model.weights().token_embd.data);
    EXPECT_FALSE(b.model.weights().layers[0].moe.fused_gate_up);
    const auto tokens = random_tokens(70, 6, b.model.hparams().n_vocab);
    EXPECT_LE(max_abs_diff(test::reference_forward(b.model, tokens), engine(b.model, tokens, 9)), 1e-4);
}

TEST(Forward, ScalesAreAppliedAndBiasesIgnored) {
    test::TinyConfig with, without;
    without.with_scales = false;
    const Built a = build(with), b = build(without);
    const auto tokens = random_tokens(20, 8, a.model.hparams().n_vocab);
    // Same seed, so the weights agree; only the sidecars differ, and they must change the logits.
    EXPECT_GT(max_abs_diff(engine(a.model, tokens, 20), engine(b.model, tokens, 20)), 1e-3);
}

TEST(Forward, F16CacheStaysCloseToF32) {
    const Built b = build(test::TinyConfig{});
    const auto tokens = random_tokens(60, 9, b.model.hparams().n_vocab);
    const double d = max_abs_diff(engine(b.model, tokens, 60), engine(b.model, tokens, 60, nullptr, tensor::ElemType::F16));
    EXPECT_GT(d, 0.0);   // the rounding is really applied
    EXPECT_LT(d, 5e-2);
}

TEST(Forward, SnapshotsHoldTheStateBeforeTheLastTokens) {
    const Built b = build(test::TinyConfig{});
    const Model & m = b.model;
    const auto tokens = random_tokens(12, 10, m.hparams().n_vocab);
    // Row 0 is live; rows 1 and 2 receive the states before the last 1 and 2 tokens of the second ubatch.
    test::TestMemory mem(m, 16, m.hparams().kpool, tensor::ElemType::F32, tensor::ElemType::F32, 3);
    mem.decode({tokens.begin(), tokens.begin() + 7}, std::vector<bool>(7, false));
    mem.snapshot_rows = {1, 2};
    mem.decode({tokens.begin() + 7, tokens.end()}, std::vector<bool>(5, false));
    for (uint32_t k = 1; k <= 2; ++k) {
        test::TestMemory ref(m, 16, m.hparams().kpool);
        ref.decode({tokens.begin(), tokens.end() - k}, std::vector<bool>(12 - k, false));
        const auto & s = mem.shape();
        for (uint32_t l = 0; l < s.n_recr_layers(); ++l) {
            EXPECT_EQ(0, std::memcmp(mem.storage().conv_state(l, k), ref.storage().conv_state(l, 0), s.recr(l).conv_floats * 4));
            EXPECT_EQ(0, std::memcmp(mem.storage().ssm_state(l, k), ref.storage().ssm_state(l, 0), s.recr(l).state_floats * 4));
        }
        EXPECT_EQ(0, std::memcmp(mem.storage().row_state(k), ref.storage().row_state(0), s.row_floats * 4));
    }
}

TEST(Forward, RejectsBadTokensAndPlans) {
    const Built b = build(test::TinyConfig{});
    test::TestMemory mem(b.model, 8, b.model.hparams().kpool);
    EXPECT_THROW(mem.decode({1, 64}, {true, true}), Error);
    test::TestMemory wrong_pool(b.model, 8, 2);
    EXPECT_THROW(wrong_pool.decode({1, 2}, {true, true}), Error);
    // A plan whose groups do not cover every token exactly once.
    test::TestPlan plan;
    plan.kpool = b.model.hparams().kpool;
    plan.cell_tokens = {1};
    memory::TokenPlan tp{};
    tp.token = 1;
    tp.n_visible = 1;
    plan.tokens = {tp};
    const auto shape = b.model.cache_shape(tensor::ElemType::F32, tensor::ElemType::F32);
    test::TestStorage storage(shape, 4, 1);
    EXPECT_THROW(forward(b.model, shape, plan, storage), Error);
    plan.groups = {memory::SeqGroup{0, {0, 0}, 0, {}}};
    EXPECT_THROW(forward(b.model, shape, plan, storage), Error);
    plan.groups = {memory::SeqGroup{0, {3}, 0, {}}};
    EXPECT_THROW(forward(b.model, shape, plan, storage), Error);
}

TEST(Forward, OnlyOutputRowsAreReturned) {
    const Built b = build(test::TinyConfig{});
    const auto tokens = random_tokens(10, 11, b.model.hparams().n_vocab);
    test::TestMemory mem(b.model, 16, b.model.hparams().kpool);
    std::vector<bool> out(10, false);
    out[3] = out[9] = true;
    const auto l = mem.decode(tokens, out);
    ASSERT_EQ(l.size(), 2u * b.model.hparams().n_vocab);
    const auto all = engine(b.model, tokens, 10);
    const size_t V = b.model.hparams().n_vocab;
    EXPECT_EQ(std::vector<float>(l.begin(), l.begin() + V), std::vector<float>(all.begin() + 3 * V, all.begin() + 4 * V));
    EXPECT_EQ(std::vector<float>(l.begin() + V, l.end()), std::vector<float>(all.begin() + 9 * V, all.end()));
}

}  // namespace
}  // namespace offgrid::model::qwen4exp

namespace offgrid::model::qwen4exp {
namespace {

TEST(Shift, RerotatedKeysEqualKeysRopedAtTheNewPosition) {
    const Built b = build(test::TinyConfig{});
    const Hparams & hp = b.model.hparams();
    const auto tokens = random_tokens(6, 12, hp.n_vocab);
    test::TestMemory mem(b.model, 8, hp.kpool);
    mem.decode(tokens, std::vector<bool>(6, false));
    const auto & s = mem.shape();
    const uint32_t cell = 4;
    const int old_pos = 4, new_pos = 41;
    std::vector<std::vector<float>> before(s.n_attn_layers());
    for (uint32_t l = 0; l < s.n_attn_layers(); ++l) {
        before[l].resize(s.attn(l).k_width);
        std::memcpy(before[l].data(), mem.storage().k_row(l, cell), s.attn(l).k_width * 4);
    }
    rerotate_keys(b.model, s, mem.storage(), cell, old_pos, new_pos);
    // Expected: NeoX pairs turned by (new - old) * theta_i in double; dimensions past n_rot untouched.
    const size_t D = hp.head_dim, half = hp.n_rot / 2;
    for (uint32_t l = 0; l < s.n_attn_layers(); ++l) {
        const float * after = static_cast<const float *>(mem.storage().k_row(l, cell));
        for (size_t h = 0; h < hp.n_head_kv; ++h) {
            for (size_t i = 0; i < half; ++i) {
                const double th = (new_pos - old_pos) * std::pow(double(hp.rope_freq_base), -2.0 * i / hp.n_rot);
                const double x0 = before[l][h * D + i], x1 = before[l][h * D + i + half];
                EXPECT_NEAR(after[h * D + i], x0 * std::cos(th) - x1 * std::sin(th), 1e-4);
                EXPECT_NEAR(after[h * D + i + half], x0 * std::sin(th) + x1 * std::cos(th), 1e-4);
            }
            for (size_t i = hp.n_rot; i < D; ++i) EXPECT_EQ(after[h * D + i], before[l][h * D + i]);
        }
    }
    // And back again.
    rerotate_keys(b.model, s, mem.storage(), cell, new_pos, old_pos);
    for (uint32_t l = 0; l < s.n_attn_layers(); ++l) {
        const float * back = static_cast<const float *>(mem.storage().k_row(l, cell));
        for (size_t i = 0; i < before[l].size(); ++i) EXPECT_NEAR(back[i], before[l][i], 1e-5);
    }
}

}  // namespace
}  // namespace offgrid::model::qwen4exp
