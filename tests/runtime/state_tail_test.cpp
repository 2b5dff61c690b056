// Sequence tails (Context::state_get_tail / state_append): a chain of tails, each taken where the one below it
// ended, rebuilds a sequence that continues exactly as the original (the same logits bit for bit), stores each
// cell once, and a tail that does not continue the sequence is refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "model/qwen4exp/gen_model.h"
#include "offgrid/context.h"

namespace {

std::shared_ptr<const offgrid::Model> small_model() {
    static std::shared_ptr<const offgrid::Model> model = [] {
        offgrid::model::qwen4exp::GenConfig cfg = offgrid::model::qwen4exp::gen_preset("tiny");
        cfg.n_ctx = 2048;
        const auto path =
            (std::filesystem::temp_directory_path() / ("offgrid_tail_test_" + std::to_string(getpid()) + ".gguf")).string();
        offgrid::model::qwen4exp::generate_model(cfg).write_file(path);
        auto model = offgrid::Model::load(path);
        std::filesystem::remove(path);
        return model;
    }();
    return model;
}

int32_t token_at(int32_t pos) { return 1 + (pos * 13 + 5) % 60; }

// Tokens [pos0, pos0 + n) of seq, logits for the last.
std::vector<offgrid::BatchToken> span(int32_t seq, int32_t pos0, int n) {
    std::vector<offgrid::BatchToken> b;
    for (int i = 0; i < n; ++i) b.push_back({token_at(pos0 + i), pos0 + i, {seq}, i == n - 1});
    return b;
}

offgrid::ContextParams params() {
    offgrid::ContextParams p;
    p.n_ctx = 1024;
    p.n_seq_max = 2;
    p.unified = false;
    return p;
}

std::vector<float> logits_after(offgrid::Context & ctx, int32_t seq, int32_t pos0, int n) {
    const auto r = ctx.decode(span(seq, pos0, n));
    EXPECT_TRUE(r.ok()) << r.message;
    const float * l = ctx.logits(0);
    return std::vector<float>(l, l + ctx.model().n_vocab());
}

TEST(StateTail, AChainOfTailsContinuesAsTheOriginalBitForBit) {
    offgrid::Context ctx(small_model(), params());
    // 0..36, 37..73, 74..99 in three calls, a snapshot after each: whole, then tails.
    ASSERT_TRUE(ctx.decode(span(0, 0, 37)).ok());
    const auto whole = ctx.state_get(0);
    ASSERT_TRUE(ctx.decode(span(0, 37, 37)).ok());
    const auto tail1 = ctx.state_get_tail(0, 37);
    ASSERT_TRUE(ctx.decode(span(0, 74, 26)).ok());
    const auto tail2 = ctx.state_get_tail(0, 74);
    const auto whole100 = ctx.state_get(0);
    const std::vector<float> want = logits_after(ctx, 0, 100, 9);

    // Each state is the same fixed part (books, recurrent state) plus the same bytes per cell: the tails hold
    // only their own cells (37 and 26), so the chain stores each cell once.
    ASSERT_GT(tail1.size(), tail2.size());
    const size_t per_cell = (tail1.size() - tail2.size()) / 11;
    EXPECT_GT(per_cell, 0u);
    EXPECT_EQ(tail1.size() - tail2.size(), 11 * per_cell);
    EXPECT_EQ(whole.size(), tail1.size());
    EXPECT_EQ(whole100.size() - tail2.size(), 74 * per_cell);

    ctx.state_set(whole, 1);
    ctx.state_append(tail1, 1);
    ctx.state_append(tail2, 1);
    EXPECT_EQ(ctx.seq_pos_max(1), 99);
    const std::vector<float> got = logits_after(ctx, 1, 100, 9);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "restored logits differ";

    // The same chain into a fresh context.
    offgrid::Context other(small_model(), params());
    other.state_set(whole, 0);
    other.state_append(tail1, 0);
    other.state_append(tail2, 0);
    const std::vector<float> got2 = logits_after(other, 0, 100, 9);
    EXPECT_EQ(std::memcmp(got2.data(), want.data(), got2.size() * sizeof(float)), 0);
}

TEST(StateTail, ATailThatDoesNotContinueTheSequenceIsRefused) {
    offgrid::Context ctx(small_model(), params());
    ASSERT_TRUE(ctx.decode(span(0, 0, 30)).ok());
    const auto whole = ctx.state_get(0);
    ASSERT_TRUE(ctx.decode(span(0, 30, 30)).ok());
    ASSERT_TRUE(ctx.decode(span(0, 60, 30)).ok());
    const auto tail = ctx.state_get_tail(0, 60);  // positions 60..89
    // Onto 0..29: a gap of 30 positions.
    ctx.state_set(whole, 1);
    try {
        ctx.state_append(tail, 1);
        FAIL() << "a tail with a gap before it was accepted";
    } catch (const offgrid::FileError & e) {
        EXPECT_NE(std::string(e.what()).find("does not continue"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ctx.seq_pos_max(1), -1);  // dropped, as any failed restore
    // A tail read as a whole sequence state, and a whole state read as a tail: refused by their flags.
    EXPECT_THROW(ctx.state_set(tail, 1), offgrid::Error);
    EXPECT_THROW(ctx.state_append(whole, 1), offgrid::Error);
    // After a refused append the sequence is usable: the whole state and the tail at 30 onto it.
    ctx.state_set(whole, 1);
    ASSERT_TRUE(ctx.decode(span(1, 30, 30)).ok());
    const auto tail30 = ctx.state_get_tail(1, 30);
    ctx.seq_rm(1, -1, -1);
    ctx.state_set(whole, 1);
    ctx.state_append(tail30, 1);
    EXPECT_EQ(ctx.seq_pos_max(1), 59);
}

}  // namespace
