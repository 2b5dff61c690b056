// Engine-against-engine equivalences through the public API, on a generated model whose QSA layers are sparse
// (r = 4, budget 16 tokens, sequences of a few hundred tokens): the batch layout, the cell layout, state
// round trips and sequence edits must not change what a sequence computes. The tests of batch layout, streams,
// state round trips, rollback and copy run with an f32 K/V cache and again with a q8_0 one (on the same model
// with 32-wide heads, as q8_0 needs): quantised rows must not break any of these equivalences either.
#include <gtest/gtest.h>

#include <cmath>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "model/qwen4exp/gen_model.h"
#include "offgrid/context.h"

namespace {

using offgrid::BatchToken;
using offgrid::Context;
using offgrid::ContextParams;
using Rows = std::vector<std::vector<float>>;

std::shared_ptr<const offgrid::Model> make_sparse_model(uint32_t head_dim) {
    {
        offgrid::model::qwen4exp::GenConfig cfg = offgrid::model::qwen4exp::gen_preset("tiny");
        cfg.head_dim = head_dim;
        cfg.n_ctx = 2048;
        cfg.n_vocab = 512;
        cfg.qsa_ratio = 4;
        cfg.top_k = 16;
        cfg.seed = 7;
        // One file per process: ctest runs every test in its own process, in parallel.
        const auto path =
            (std::filesystem::temp_directory_path() /
             ("offgrid_equivalence_" + std::to_string(getpid()) + "_" + std::to_string(head_dim) + ".gguf")).string();
        offgrid::model::qwen4exp::generate_model(cfg).write_file(path);
        auto model = offgrid::Model::load(path);
        std::filesystem::remove(path);  // the mapping stays valid
        return model;
    }
}

std::shared_ptr<const offgrid::Model> sparse_model() {
    static std::shared_ptr<const offgrid::Model> model = make_sparse_model(16);
    return model;
}

ContextParams params(uint32_t n_seq_max = 1, bool unified = false) {
    ContextParams p;
    p.n_ctx = 1024 * n_seq_max;
    p.n_seq_max = n_seq_max;
    p.unified = unified;
    p.type_k = p.type_v = "f32";
    return p;
}

// The K/V cache type of the parameterised tests: "f32" on the 16-wide-head model, "q8_0" on a 32-wide one.
// Member functions named like the helpers above, so the test bodies read the same for both.
class ByCacheType : public ::testing::TestWithParam<const char *> {
protected:
    static bool q8() { return std::string(GetParam()) == "q8_0"; }
    static std::shared_ptr<const offgrid::Model> sparse_model() {
        if (!q8()) return ::sparse_model();
        static std::shared_ptr<const offgrid::Model> model = make_sparse_model(32);
        return model;
    }
    static ContextParams params(uint32_t n_seq_max = 1, bool unified = false) {
        ContextParams p = ::params(n_seq_max, unified);
        p.type_k = p.type_v = GetParam();
        return p;
    }
};

std::vector<int32_t> tokens(int n, uint32_t seed) {
    std::vector<int32_t> out;
    uint32_t x = seed * 2654435761u + 1;
    for (int i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        out.push_back(1 + static_cast<int32_t>((x >> 8) % 400));
    }
    return out;
}

// Decodes toks into seq (continuing its positions) in calls of `chunk` tokens; returns one row per token.
Rows decode(Context & ctx, int32_t seq, const std::vector<int32_t> & toks, size_t chunk = SIZE_MAX) {
    Rows rows;
    const int32_t n_vocab = ctx.model().n_vocab();
    for (size_t i = 0; i < toks.size(); i += chunk) {
        std::vector<BatchToken> b;
        const int32_t p0 = ctx.seq_pos_max(seq) + 1;
        for (size_t j = i; j < std::min(toks.size(), i + chunk); ++j) {
            b.push_back({toks[j], p0 + static_cast<int32_t>(j - i), {seq}, true});
        }
        const auto r = ctx.decode(b);
        EXPECT_TRUE(r.ok()) << r.message;
        for (int32_t k = 0; k < ctx.n_outputs(); ++k) rows.emplace_back(ctx.logits(k), ctx.logits(k) + n_vocab);
    }
    return rows;
}

double max_diff(const Rows & a, const Rows & b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
        for (size_t i = 0; i < a[r].size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[r][i] - b[r][i])));
    }
    return worst;
}

// Checks and prints the figure, so a run shows how close the two sides are.
void expect_close(const char * what, const Rows & a, const Rows & b, double tol) {
    const double d = max_diff(a, b);
    std::printf("[equivalence] %s: %zu rows, max |diff| %.3g (tolerance %.0e)\n", what, a.size(), d, tol);
    EXPECT_LE(d, tol) << what;
}

Rows tail(const Rows & rows, size_t n) { return Rows(rows.end() - static_cast<long>(n), rows.end()); }

TEST_P(ByCacheType, OneBatchEqualsTokenByTokenEqualsChunksOf7EqualsUbatch5) {
    const auto toks = tokens(200, 1);
    Context one(sparse_model(), params());
    const Rows ref = decode(one, 0, toks);

    Context each(sparse_model(), params());
    expect_close("token by token vs one batch", ref, decode(each, 0, toks, 1), 1e-5);

    Context chunks(sparse_model(), params());
    expect_close("chunks of 7 vs one batch", ref, decode(chunks, 0, toks, 7), 1e-5);

    ContextParams p5 = params();
    p5.n_ubatch = 5;
    Context ub5(sparse_model(), p5);
    expect_close("ubatch 5 vs one batch", ref, decode(ub5, 0, toks), 1e-5);
}

// The sparse regime is really exercised: forcing dense attention changes the late rows.
TEST_P(ByCacheType, TheModelIsSparseHere) {
    const auto toks = tokens(200, 1);
    Context sparse(sparse_model(), params());
    ContextParams pd = params();
    pd.qsa_dense = true;
    Context dense(sparse_model(), pd);
    EXPECT_GT(max_diff(decode(sparse, 0, toks), decode(dense, 0, toks)), 1e-2);
}

// Four sequences decoded in interleaved multi-sequence calls: one shared stream (cells interleave) and one
// stream per sequence compute the same rows.
TEST_P(ByCacheType, SharedStreamEqualsPerSequenceStreams) {
    auto run = [&](bool unified) {
        Context ctx(sparse_model(), params(4, unified));
        Rows rows;
        const int32_t n_vocab = ctx.model().n_vocab();
        for (int call = 0; call < 12; ++call) {
            std::vector<BatchToken> b;
            for (int32_t s = 0; s < 4; ++s) {
                const auto t = tokens(5 + s, 100 * call + s);  // uneven lengths per sequence
                const int32_t p0 = ctx.seq_pos_max(s) + 1;
                for (size_t j = 0; j < t.size(); ++j) b.push_back({t[j], p0 + static_cast<int32_t>(j), {s}, true});
            }
            EXPECT_TRUE(ctx.decode(b).ok());
            for (int32_t k = 0; k < ctx.n_outputs(); ++k) rows.emplace_back(ctx.logits(k), ctx.logits(k) + n_vocab);
        }
        return rows;
    };
    const Rows shared = run(true);
    const Rows separate = run(false);
    ASSERT_EQ(shared.size(), 12u * (5 + 6 + 7 + 8));
    expect_close("unified vs per-sequence streams", shared, separate, 1e-5);
}

TEST_P(ByCacheType, SaveRestoreContinueEqualsUninterrupted) {
    const auto a = tokens(150, 2), b = tokens(60, 3);
    Context ref(sparse_model(), params(2));
    decode(ref, 1, a);
    const Rows want = decode(ref, 1, b);

    Context first(sparse_model(), params(2));
    decode(first, 1, a);
    const auto whole = first.state_get();
    const auto one = first.state_get(1);

    Context second(sparse_model(), params(2));
    second.state_set(whole);
    expect_close("whole-state restore + continue vs uninterrupted", want, decode(second, 1, b), 1e-6);

    Context third(sparse_model(), params(2));
    third.state_set(one, 0);  // into another sequence id
    expect_close("sequence restore into another id + continue vs uninterrupted", want, decode(third, 0, b), 1e-6);
}

TEST_P(ByCacheType, RemoveASuffixAndRedecodeEqualsFresh) {
    ContextParams p = params();
    p.n_rs_seq = 4;
    const auto prefix = tokens(120, 4), last = tokens(8, 5), redo = tokens(3, 6), more = tokens(30, 7);
    Context edited(sparse_model(), p);
    decode(edited, 0, prefix);
    decode(edited, 0, last);
    ASSERT_TRUE(edited.seq_rm(0, 120 + 5, -1));  // roll the last 3 tokens back
    EXPECT_EQ(edited.seq_pos_max(0), 124);
    Rows got = decode(edited, 0, redo);
    const Rows got_more = decode(edited, 0, more);
    got.insert(got.end(), got_more.begin(), got_more.end());

    Context fresh(sparse_model(), p);
    std::vector<int32_t> all = prefix;
    all.insert(all.end(), last.begin(), last.begin() + 5);
    all.insert(all.end(), redo.begin(), redo.end());
    all.insert(all.end(), more.begin(), more.end());
    const Rows want = tail(decode(fresh, 0, all), redo.size() + more.size());
    expect_close("rollback + re-decode vs fresh", want, got, 1e-5);
}

TEST_P(ByCacheType, CopyThenDivergentContinuationsEqualFreshDecodes) {
    for (bool unified : {true, false}) {
        SCOPED_TRACE(unified ? "unified" : "per-sequence streams");
        const auto prefix = tokens(90, 8), a = tokens(70, 9), b = tokens(50, 10);
        Context ctx(sparse_model(), params(2, unified));
        decode(ctx, 0, prefix);
        ctx.seq_cp(0, 1);
        const Rows got_a = decode(ctx, 0, a, 13);
        const Rows got_b = decode(ctx, 1, b, 11);

        auto fresh = [&](const std::vector<int32_t> & cont) {
            Context f(sparse_model(), params());
            std::vector<int32_t> all = prefix;
            all.insert(all.end(), cont.begin(), cont.end());
            return tail(decode(f, 0, all), cont.size());
        };
        expect_close("copy, continuation A vs fresh", fresh(a), got_a, 1e-5);
        expect_close("copy, continuation B vs fresh", fresh(b), got_b, 1e-5);
    }
}

// Attention depends on relative positions only, so shifting a whole sequence (keys re-rotated, pools re-pooled
// at their new positions) changes no logit of its continuation.
TEST(Equivalence, ShiftingAWholeSequenceChangesNoLogitOfItsContinuation) {
    const auto prefix = tokens(130, 11), cont = tokens(40, 12);
    Context plain(sparse_model(), params());
    decode(plain, 0, prefix);
    const Rows want = decode(plain, 0, cont);

    for (int32_t delta : {37, 500}) {
        Context shifted(sparse_model(), params());
        decode(shifted, 0, prefix);
        shifted.seq_add(0, 0, -1, delta);
        EXPECT_EQ(shifted.seq_pos_max(0), 129 + delta);
        expect_close("shifted continuation vs unshifted", want, decode(shifted, 0, cont), 1e-3);
    }
}

INSTANTIATE_TEST_SUITE_P(Equivalence, ByCacheType, ::testing::Values("f32", "q8_0"),
                         [](const ::testing::TestParamInfo<const char *> & i) { return std::string(i.param); });

}  // namespace

namespace {

// PLE with shared tokens: a prompt decoded once for two sequences (every token in both), then divergent
// continuations in one batch, give each sequence the logits it gets decoded alone.
TEST(Equivalence, SharedTokensOnAPleModelEqualDecodingEachSequenceAlone) {
    auto model = sparse_model();  // has PLE on layer 0
    const auto prompt = tokens(23, 40), a = tokens(9, 41), b = tokens(6, 42);
    ContextParams p = params(2, true);  // shared tokens need one stream
    Context both(model, p);
    std::vector<BatchToken> batch;
    for (size_t i = 0; i < prompt.size(); ++i) batch.push_back({prompt[i], static_cast<int32_t>(i), {0, 1}, true});
    const auto r = both.decode(batch);
    ASSERT_TRUE(r.ok()) << r.message;
    const int32_t n_vocab = both.model().n_vocab();
    Rows shared;
    for (int32_t k = 0; k < both.n_outputs(); ++k) shared.emplace_back(both.logits(k), both.logits(k) + n_vocab);
    batch.clear();
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        const int32_t pos = static_cast<int32_t>(prompt.size() + i);
        if (i < a.size()) batch.push_back({a[i], pos, {0}, true});
        if (i < b.size()) batch.push_back({b[i], pos, {1}, true});
    }
    ASSERT_TRUE(both.decode(batch).ok());
    Rows got_a, got_b;
    for (size_t k = 0; k < batch.size(); ++k) {
        Rows & dst = batch[k].seqs[0] == 0 ? got_a : got_b;
        dst.emplace_back(both.logits(static_cast<int32_t>(k)), both.logits(static_cast<int32_t>(k)) + n_vocab);
    }
    auto alone = [&](const std::vector<int32_t> & cont) {
        Context c(model, params());
        std::vector<int32_t> all = prompt;
        all.insert(all.end(), cont.begin(), cont.end());
        return decode(c, 0, all);
    };
    const Rows want_a = alone(a), want_b = alone(b);
    expect_close("shared prompt (seqs 0 and 1) vs alone", Rows(want_a.begin(), want_a.begin() + 23), shared, 1e-5);
    expect_close("continuation of seq 0 after the shared prompt vs alone", tail(want_a, a.size()), got_a, 1e-5);
    expect_close("continuation of seq 1 after the shared prompt vs alone", tail(want_b, b.size()), got_b, 1e-5);
}

}  // namespace
