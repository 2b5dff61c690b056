// The Plan the hybrid memory hands the model (cells, visibility, pools, tails, recurrent groups), and the memory's
// parameters and breakdown.
#include <gtest/gtest.h>

#include "common/error.h"
#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;
using PP = std::pair<Pos, Pos>;

TEST(Plan, FreshSequenceByOrder) {
    HybridMemory mem(small_params(64, 1, true, 2, 16, 4));
    Batch b;
    for (int i = 0; i < 10; ++i) {
        b.tokens.push_back(10 + i);
        b.pos.push_back(i);
    }
    ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
    const Plan & plan = mem.apply();
    ASSERT_EQ(plan.tokens.size(), 10u);
    EXPECT_EQ(plan.kpool, 4u);
    for (uint32_t i = 0; i < 10; ++i) {
        const TokenPlan & t = plan.tokens[i];
        EXPECT_EQ(t.cell, i);
        EXPECT_EQ(t.pos, (Pos)i);
        EXPECT_EQ(t.token, (Token)(10 + i));
        EXPECT_EQ(t.index, i);
        EXPECT_EQ(t.output, i == 9);
        EXPECT_EQ(t.n_visible, i + 1);
        EXPECT_EQ(t.n_pools, (i + 1) / 4);
        ASSERT_EQ(t.tail.size(), (i + 1) % 4);
        for (size_t k = 0; k < t.tail.size(); ++k) EXPECT_EQ(t.tail[k], i - k);
    }
    ASSERT_EQ(plan.new_pools.size(), 2u);
    EXPECT_EQ(std::vector<uint32_t>(plan.new_pools[0].members.begin(), plan.new_pools[0].members.end()),
              (std::vector<uint32_t>{0, 1, 2, 3}));
    EXPECT_EQ(plan.new_pools[1].rep, 7u);
    // A text token's 2-D coordinates are its position, so the pool ropes at (4, 4, 4, 4), as the reference's
    // block position (pb*r four times) does; the golden QSA logits depend on it.
    EXPECT_EQ(plan.new_pools[1].pos, 4);
    ASSERT_EQ(plan.groups.size(), 1u);
    EXPECT_EQ(plan.groups[0].tokens.size(), 10u);
    EXPECT_EQ(plan.groups[0].row, 0u);
    EXPECT_EQ(plan.groups[0].snapshots, (std::vector<uint32_t>{1, 2}));  // planes 1, 2 of slot 0
    SeqView v = plan.seq_view(0);
    EXPECT_EQ(v.cells.size(), 10u);
    EXPECT_EQ(v.pools.size(), 2u);
    EXPECT_EQ(plan.cell_token(3), 13);
    fake_forward(plan, mem);
    mem.finish();

    // One token at a time: a pool is pooled when it completes, and only then.
    for (int p = 10; p < 16; ++p) {
        Batch one;
        one.tokens = {20 + p};
        ASSERT_EQ(mem.begin(one).status, DecodeStatus::Ok);
        const Plan & q = mem.apply();
        EXPECT_EQ(q.new_pools.size(), (p + 1) % 4 == 0 ? 1u : 0u) << p;
        fake_forward(q, mem);
        mem.finish();
    }
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Plan, KPoolOneHasNoTail) {
    HybridMemory mem(small_params(64, 1, true, 0, 16, 1));
    dec(mem, 0, 0, 5);
    Batch one;
    one.tokens = {3};
    ASSERT_EQ(mem.begin(one).status, DecodeStatus::Ok);
    const Plan & q = mem.apply();
    EXPECT_EQ(q.tokens[0].n_pools, 6u);
    EXPECT_TRUE(q.tokens[0].tail.empty());
    ASSERT_EQ(q.new_pools.size(), 1u);
    EXPECT_EQ(q.new_pools[0].rep, 5u);
    mem.undo();
}

TEST(Plan, ByPositionPoolsAlignToFirstPosition) {
    HybridMemory mem(small_params(64, 1, true, 0, 16, 4, false, false));
    dec(mem, 0, 0, 10);
    EXPECT_TRUE(mem.seq_rm(0, 0, 2));  // the sequence now starts at 2: pools regroup from there
    EXPECT_EQ(dec(mem, 0, 10, 1), DecodeStatus::Ok);
    const SeqLayout & sq = mem.layout().seq(0);
    ASSERT_EQ(sq.pools.size(), 2u);
    EXPECT_EQ(sq.cells[sq.pools[0]].pos, 2);
    EXPECT_EQ(sq.cells[sq.pools[1]].pos, 6);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Plan, StalePoolsRepooledAfterRollback) {
    HybridMemory mem(small_params(64, 1, true, 4, 16, 2));
    dec(mem, 0, 0, 12);
    EXPECT_TRUE(mem.seq_rm(0, 9, -1));  // pool [8, 9] is gone; [8, new 9] must be pooled anew
    Batch one;
    one.tokens = {77};
    ASSERT_EQ(mem.begin(one).status, DecodeStatus::Ok);
    const Plan & q = mem.apply();
    ASSERT_EQ(q.new_pools.size(), 1u);
    EXPECT_EQ(q.new_pools[0].pos, 8);
    fake_forward(q, mem);
    mem.finish();
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Memory, T28_CellsPerStream) {
    EXPECT_EQ(cells_per_stream(768, 3, false), 256u);
    EXPECT_EQ(cells_per_stream(100, 1, true), 256u);
    HybridMemory mem(small_params(96, 3, false));
    EXPECT_EQ(mem.kv().n_stream(), 3u);
    EXPECT_EQ(mem.kv().kv_size(), 32u);
}

TEST(Memory, BreakdownCountsEveryCache) {
    MemoryParams p = small_params(64, 2, true, 3, 16, 2);
    p.shape.type_k = p.shape.type_idx = tensor::ElemType::F16;
    HybridMemory mem(p);
    uint64_t k = 0, v = 0, idx = 0, conv = 0, one_bank = 0, undo = 0;
    for (auto & e : mem.breakdown()) {
        if (e.cache == "recurrent") (e.part == "undo bank" ? undo : one_bank) += e.bytes;
        if (e.cache == "attention" && e.part == "k") k = e.bytes;
        if (e.cache == "attention" && e.part == "v") v = e.bytes;
        if (e.cache == "indexer") idx = e.bytes;
        if (e.part == "conv") conv = e.bytes;
    }
    EXPECT_EQ(k, 64u * 2 * 2);    // 64 cells, width 2, f16
    EXPECT_EQ(v, 64u * 2 * 4);    // f32
    EXPECT_EQ(idx, 64u * 4 * 2);  // [raw | pooled], f16
    EXPECT_EQ(conv, 2u * 4 * 2 * 4);  // 2 slots x 4 planes x 2 floats
    EXPECT_EQ(undo, one_bank);        // the recurrent state is held twice (the state before a call, for undo)
}

TEST(Memory, BadParametersRefused) {
    MemoryParams p = small_params();
    p.shape.type_k = tensor::ElemType::Q8_0;
    EXPECT_THROW(HybridMemory{p}, Error);
    p = small_params(64, 4, true, 8, 4);
    EXPECT_THROW(HybridMemory{p}, Error);
    p = small_params(2, 4, false);
    EXPECT_THROW(HybridMemory{p}, Error);
    EXPECT_EQ(cells_per_stream(100, 1, true), 256u);
    EXPECT_EQ(cells_per_stream(512, 3, false), 256u);
}

}  // namespace
}  // namespace offgrid::memory
