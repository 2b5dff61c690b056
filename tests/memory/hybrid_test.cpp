// The hybrid memory through its public operations: the scenarios of memory.md section 10 that apply at the
// memory level (T-numbers kept), and the Plan it hands the model.
#include <gtest/gtest.h>

#include "common/error.h"
#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;
using PP = std::pair<Pos, Pos>;

TEST(Hybrid, T01_FreshMemoryIsEmpty) {
    HybridMemory mem(small_params());
    EXPECT_EQ(mm(mem, 0), PP(-1, -1));
    EXPECT_EQ(mm(mem, 1), PP(-1, -1));
}

TEST(Hybrid, T02_T67_DecodeAndPositionRanges) {
    HybridMemory mem(small_params());
    EXPECT_EQ(dec(mem, 0, 0, 10), DecodeStatus::Ok);
    EXPECT_EQ(span(mem, 0), PP(0, 9));
    EXPECT_EQ(mm(mem, 0), PP(9, 9));  // hybrid: the recurrent part has only the last position
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T02_AttentionOnlyReportsFirstPosition) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 0, true, false));
    EXPECT_EQ(dec(mem, 0, 0, 10), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(0, 9));
}

TEST(Hybrid, T03_CopyThenRemoveSource) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 10);
    mem.seq_cp(0, 1);
    EXPECT_TRUE(mem.seq_rm(0, -1, -1));
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
    EXPECT_EQ(span(mem, 1), PP(0, 9));
    EXPECT_EQ(check_contents(mem), "");
    EXPECT_EQ(dec(mem, 1, 10, 3), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T04_MiddleRemovalOnAttentionOnlyModel) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2, true, false));
    dec(mem, 0, 0, 10);
    mem.seq_cp(0, 1);
    mem.seq_rm(0, -1, -1);
    EXPECT_TRUE(mem.seq_rm(1, 3, 5));
    EXPECT_EQ(span(mem, 1), PP(0, 9));
    EXPECT_EQ(dec(mem, 1, 10, 1), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, FixQ3_MiddleRemovalRefusedWithRecurrentState) {
    HybridMemory mem(small_params(64, 4, true, 4, 16, 2));
    dec(mem, 0, 0, 10);
    EXPECT_FALSE(mem.seq_rm(0, 3, 5));
    EXPECT_FALSE(mem.seq_rm(0, 0, 5));  // a prefix cannot be removed from a recurrent state either
    EXPECT_EQ(span(mem, 0), PP(0, 9));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T05_NonConsecutivePositionsRefusedAndNothingChanges) {
    HybridMemory mem(small_params());
    dec(mem, 1, 0, 11);
    std::string why;
    EXPECT_EQ(dec(mem, 1, 12, 1, {}, &why), DecodeStatus::InvalidBatch);
    EXPECT_NE(why.find("V5"), std::string::npos) << why;
    EXPECT_EQ(dec(mem, 1, 5, 1), DecodeStatus::InvalidBatch);
    EXPECT_EQ(span(mem, 1), PP(0, 10));
    EXPECT_FALSE(mem.in_call());
}

TEST(Hybrid, T06_T07_ShiftMovesSharedCellsAndFreesNegative) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2, true, false));
    dec(mem, 0, 0, 10);
    mem.seq_cp(0, 1);
    mem.seq_add(0, 0, -1, 5);
    EXPECT_EQ(mm(mem, 0), PP(5, 14));
    EXPECT_EQ(mm(mem, 1), PP(5, 14));
    mem.seq_add(0, 0, -1, -8);
    EXPECT_EQ(mm(mem, 0), PP(0, 6));
    EXPECT_EQ(mm(mem, 1), PP(0, 6));
    ASSERT_TRUE(mem.has_pending_shift());
    EXPECT_THROW(dec(mem, 0, 7, 1), Error);  // K must be re-rotated first
    int calls = 0;
    mem.apply_pending_shifts([&](uint32_t cell, Pos old_pos, Pos new_pos) {
        ++calls;
        EXPECT_EQ(new_pos - old_pos, -3);  // +5 then -8
        EXPECT_EQ(old_pos, (Pos)cell);     // cells were filled in position order
    });
    EXPECT_EQ(calls, 7);
    EXPECT_FALSE(mem.has_pending_shift());
    EXPECT_EQ(dec(mem, 0, 7, 1), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");  // the shifted pools were pooled again
}

TEST(Hybrid, T08_FixQ1_DivideShiftsTheRightWay) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 0, true, false));
    dec(mem, 0, 0, 10);
    mem.seq_div(0, 0, -1, 2);
    EXPECT_EQ(mm(mem, 0), PP(0, 4));
    mem.apply_pending_shifts([&](uint32_t cell, Pos old_pos, Pos new_pos) {
        EXPECT_EQ(old_pos, (Pos)cell);
        EXPECT_EQ(new_pos, (Pos)cell / 2);  // the K rotation moves from old to new: never the opposite sign
    });
}

TEST(Hybrid, ShiftOverflowRefused) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 0, true, false));
    dec(mem, 0, 0, 10);
    EXPECT_THROW(mem.seq_add(0, 0, -1, kPosInf - 5), Error);
    EXPECT_EQ(mm(mem, 0), PP(0, 9));
    mem.seq_add(0, 0, -1, std::numeric_limits<Pos>::min());  // everything goes negative: freed
    EXPECT_EQ(mm(mem, 0), PP(-1, -1));
}

TEST(Hybrid, FixQ23_DivByZeroRefused) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 10);
    EXPECT_THROW(mem.seq_div(0, 0, -1, 0), Error);
    EXPECT_THROW(mem.seq_div(0, 0, -1, -2), Error);
    EXPECT_EQ(span(mem, 0), PP(0, 9));
}

TEST(Hybrid, T09_KeepOneSequence) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 5);
    dec(mem, 1, 0, 5);
    dec(mem, 2, 0, 5);
    mem.seq_keep(1);
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
    EXPECT_EQ(span(mem, 1), PP(0, 4));
    EXPECT_EQ(span(mem, 2), PP(-1, -1));
    EXPECT_FALSE(mem.recurrent().present(0));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T10_RemoveRangeFromAllSequencesAttentionOnly) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 0, true, false));
    dec(mem, 0, 0, 10);
    dec(mem, 1, 0, 10);
    EXPECT_TRUE(mem.seq_rm(-1, 5, -1));
    EXPECT_EQ(mm(mem, 0), PP(0, 4));
    EXPECT_EQ(mm(mem, 1), PP(0, 4));
}

TEST(Hybrid, FixQ2_RemoveEverythingWorksWithRecurrentState) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 10);
    dec(mem, 1, 0, 4);
    EXPECT_TRUE(mem.seq_rm(-1, -1, -1));
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
    EXPECT_EQ(span(mem, 1), PP(-1, -1));
    EXPECT_FALSE(mem.recurrent().present(0));
    EXPECT_EQ(mem.kv().stream(0).used(), 0u);
    // A partial range over all sequences is all-or-nothing.
    dec(mem, 0, 0, 10);
    EXPECT_FALSE(mem.seq_rm(-1, 5, -1));
    EXPECT_EQ(span(mem, 0), PP(0, 9));
}

TEST(Hybrid, T12_NoOps) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 0, true, false));
    dec(mem, 0, 0, 10);
    mem.seq_add(0, 0, -1, 0);
    mem.seq_add(0, 3, 3, 7);
    mem.seq_div(0, 0, -1, 1);
    EXPECT_EQ(mm(mem, 0), PP(0, 9));
    EXPECT_FALSE(mem.has_pending_shift());
}

TEST(Hybrid, T13_ClearThenDecode) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 10);
    dec(mem, 2, 0, 3);
    mem.clear();
    for (SeqId s = 0; s < 4; ++s) EXPECT_EQ(mm(mem, s), PP(-1, -1));
    EXPECT_EQ(dec(mem, 0, 0, 1), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T14_AutomaticPositions) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 5);
    Batch b;
    b.tokens = {7, 8, 9};
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    EXPECT_EQ(span(mem, 0), PP(0, 7));
}

TEST(Hybrid, T15_DuplicatePositions) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2));
    Batch b;
    b.tokens = {1, 2, 3};
    b.pos = {0, 0, 1};
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    EXPECT_EQ(span(mem, 0), PP(0, 1));
    EXPECT_EQ(mem.layout().seq(0).cells.size(), 3u);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T16_FullCacheRefusesAndChangesNothing) {
    HybridMemory mem(small_params(32, 1, true, 0, 32, 4));
    EXPECT_EQ(dec(mem, 0, 0, 32), DecodeStatus::Ok);
    std::string why;
    EXPECT_EQ(dec(mem, 0, 32, 1, {}, &why), DecodeStatus::NoSpace);
    EXPECT_NE(why.find("no room"), std::string::npos) << why;
    EXPECT_EQ(span(mem, 0), PP(0, 31));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T17_FreedCellsAreReused) {
    HybridMemory mem(small_params(32, 1, true, 0, 32, 0, true, false));
    dec(mem, 0, 0, 32);
    EXPECT_TRUE(mem.seq_rm(0, 26, -1));
    EXPECT_EQ(dec(mem, 0, 26, 6), DecodeStatus::Ok);
    EXPECT_EQ(dec(mem, 0, 32, 1), DecodeStatus::NoSpace);
}

TEST(Hybrid, FixQ6_T19_SequenceIdBeyondNSeqMaxRefused) {
    HybridMemory mem(small_params(64, 4));
    std::string why;
    EXPECT_EQ(dec(mem, 7, 0, 3, {}, &why), DecodeStatus::InvalidBatch);
    EXPECT_NE(why.find("V3"), std::string::npos) << why;
}

TEST(Hybrid, T22_TokensSharedBySequences) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2));
    Batch b;
    b.tokens = {1, 2, 3, 4};
    b.pos = {0, 1, 2, 3};
    b.seqs = {{0, 1}, {0, 1}, {0, 1}, {0, 1}};
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    EXPECT_EQ(span(mem, 0), PP(0, 3));
    EXPECT_EQ(span(mem, 1), PP(0, 3));
    EXPECT_EQ(mem.kv().stream(0).used(), 4u);
    EXPECT_EQ(check_contents(mem), "");
    // Both continue on their own from the shared state.
    EXPECT_EQ(dec(mem, 1, 4, 2), DecodeStatus::Ok);
    EXPECT_EQ(dec(mem, 0, 4, 3), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, FixQ4_T23_PartialSubsetsRefused) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 0, true, false));
    Batch b;
    b.tokens = {1, 2, 3};
    b.pos = {0, 1, 1};
    b.seqs = {{0, 1, 2}, {0, 1}, {1, 2}};
    std::string why;
    EXPECT_EQ(dec_batch(mem, b, &why), DecodeStatus::InvalidBatch);
    EXPECT_NE(why.find("V8"), std::string::npos) << why;
    EXPECT_NE(why.find("token 1"), std::string::npos) << why;
    for (SeqId s = 0; s < 3; ++s) EXPECT_EQ(mm(mem, s), PP(-1, -1));
}

TEST(Hybrid, CoupledSequencesWithOtherCellsRefusedOnlyOnPoolClash) {
    // kpool 2 by order. With 4 cells of their own each, a shared token sits at rank 4 (a tail) and the next one
    // completes [shared, shared]: no clash.
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2));
    dec(mem, 0, 0, 4, {1, 2, 3, 4});
    dec(mem, 1, 0, 4, {1, 2, 3, 4});
    Batch b;
    b.tokens = {9};
    b.seqs = {{0, 1}};
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
    // With 3 cells of their own, a shared token would complete [own cell, shared cell] in each: one row, two keys.
    dec(mem, 2, 0, 3, {1, 2, 3});
    dec(mem, 3, 0, 3, {1, 2, 3});
    Batch c;
    c.tokens = {9};
    c.seqs = {{2, 3}};
    std::string why;
    EXPECT_EQ(dec_batch(mem, c, &why), DecodeStatus::InvalidBatch);
    EXPECT_NE(why.find("V7"), std::string::npos) << why;
    EXPECT_EQ(span(mem, 2), PP(0, 2));
    // Once they share every cell, they may go on together.
    mem.seq_cp(2, 3);
    EXPECT_EQ(dec_batch(mem, c), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, Golden12_SharedTokensAfterSeparateTokensWithPoolsOfOne) {
    HybridMemory mem(small_params(256, 3, true, 0, 64, 1));
    Batch b;
    for (int i = 0; i < 10; ++i) {
        b.tokens.push_back(i);
        b.seqs.push_back({0, 1, 2});
    }
    ASSERT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    Batch m;
    m.tokens = {7, 8, 7, 8, 30, 31};
    m.seqs = {{0}, {0}, {1}, {1}, {2}, {2}};
    ASSERT_EQ(dec_batch(mem, m), DecodeStatus::Ok);
    Batch c;
    c.tokens = {13, 14};
    c.pos = {12, 12};
    c.seqs = {{0, 1}, {2}};
    std::string why;
    EXPECT_EQ(dec_batch(mem, c, &why), DecodeStatus::Ok) << why;
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, ShiftOfCellsSharedUnevenlyRefused) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2, true, false));
    dec(mem, 0, 0, 6);
    mem.seq_cp(0, 1);
    dec(mem, 1, 6, 2);
    EXPECT_THROW(mem.seq_add(0, 2, -1, 3), Error);
    EXPECT_FALSE(mem.seq_rm(0, 2, 4));
    EXPECT_EQ(span(mem, 0), PP(0, 5));
    EXPECT_TRUE(mem.seq_rm(1, 6, -1));  // cells only 1 holds
}

TEST(Hybrid, T25_SeparateStreamsRefuseSharedTokens) {
    HybridMemory mem(small_params(96, 3, false));
    Batch b;
    b.tokens = {1};
    b.pos = {0};
    b.seqs = {{0, 1}};
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::NoSpace);
    EXPECT_EQ(mm(mem, 0), PP(-1, -1));
    EXPECT_EQ(mm(mem, 1), PP(-1, -1));
}

TEST(Hybrid, FixQ10_T27_FailedDecodeUndoesEverything) {
    for (uint32_t n_rs : {0u, 3u}) {
        HybridMemory mem(small_params(64, 4, true, n_rs, 4, 2));
        dec(mem, 0, 0, 8);
        const auto before = rec_state(mem, 0);
        Batch b;
        for (int i = 0; i < 8; ++i) {
            b.tokens.push_back(50 + i);
            b.pos.push_back(8 + i);
        }
        ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
        fake_forward(mem.apply(), mem);  // the first ubatch runs, the second fails
        ASSERT_TRUE(mem.has_next());
        mem.undo();
        EXPECT_EQ(span(mem, 0), PP(0, 7));
        EXPECT_EQ(rec_state(mem, 0), before);
        EXPECT_EQ(check_contents(mem), "");
        EXPECT_EQ(dec(mem, 0, 8, 5), DecodeStatus::Ok);
        EXPECT_EQ(check_contents(mem), "");
    }
}

TEST(Hybrid, T26_FailureInTheFirstUbatchChangesNothing) {
    HybridMemory mem(small_params(64, 4, true, 0, 4, 2));
    dec(mem, 0, 0, 8);
    Batch b;
    for (int i = 0; i < 4; ++i) b.tokens.push_back(60 + i);
    ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
    mem.apply();  // the model fails before writing anything
    mem.undo();
    EXPECT_EQ(span(mem, 0), PP(0, 7));
    EXPECT_EQ(check_contents(mem), "");
    EXPECT_EQ(dec(mem, 0, 8, 4), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, CallMisuseThrows) {
    HybridMemory mem(small_params(64, 4, true, 0, 4));
    EXPECT_THROW(mem.apply(), Error);
    Batch b;
    for (int i = 0; i < 8; ++i) b.tokens.push_back(i);
    ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
    EXPECT_THROW(mem.begin(b), Error);
    EXPECT_THROW(mem.seq_rm(0, -1, -1), Error);
    fake_forward(mem.apply(), mem);
    EXPECT_THROW(mem.finish(), Error);  // one ubatch left
    mem.undo();
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
    EXPECT_FALSE(mem.in_call());
}

TEST(Hybrid, T65_CopyDecodeRemoveSource) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2));
    dec(mem, 0, 0, 12);
    mem.seq_cp(0, 1);
    EXPECT_EQ(mm(mem, 1), PP(11, 11));
    EXPECT_EQ(dec(mem, 1, 12, 2), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 1), PP(13, 13));
    EXPECT_EQ(mm(mem, 0), PP(11, 11));
    EXPECT_TRUE(mem.seq_rm(0, -1, -1));
    EXPECT_EQ(mm(mem, 0), PP(-1, -1));
    EXPECT_EQ(mm(mem, 1), PP(13, 13));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T29_KeepRemovesOtherSequencesFromEveryStream) {
    HybridMemory mem(small_params(96, 3, false));
    dec(mem, 0, 0, 5);
    dec(mem, 1, 0, 6);
    dec(mem, 2, 0, 7);
    mem.seq_keep(1);
    // The reference keeps the other streams' attention cells but drops their recurrent state; here the
    // sequences go everywhere, so the caches stay consistent.
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
    EXPECT_EQ(span(mem, 1), PP(0, 5));
    EXPECT_EQ(span(mem, 2), PP(-1, -1));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T30_CrossStreamCopy) {
    HybridMemory mem(small_params(96, 3, false, 0, 16, 2));
    dec(mem, 1, 0, 3);
    dec(mem, 2, 0, 7);
    mem.seq_cp(2, 1);
    EXPECT_EQ(span(mem, 1), PP(0, 6));
    EXPECT_EQ(dec(mem, 1, 7, 1), DecodeStatus::Ok);
    EXPECT_EQ(span(mem, 1), PP(0, 7));
    EXPECT_EQ(span(mem, 2), PP(0, 6));
    EXPECT_EQ(check_contents(mem), "");
    // Cells live in each sequence's own stream.
    for (auto & pc : mem.layout().seq(1).cells) EXPECT_EQ(pc.cell / mem.kv().kv_size(), 1u);
}

TEST(Hybrid, T31_PartialCopyRefused) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 5);
    EXPECT_THROW(mem.seq_cp(0, 1, 0, 5), Error);
    EXPECT_EQ(span(mem, 1), PP(-1, -1));
}

TEST(Hybrid, T32_BadSequenceIdsThrow) {
    HybridMemory mem(small_params(64, 2));
    EXPECT_THROW(mem.seq_rm(5, -1, -1), Error);
    EXPECT_THROW(mem.seq_rm(-2, -1, -1), Error);
    EXPECT_THROW(mem.seq_keep(2), Error);
    EXPECT_THROW(mem.seq_add(9, 0, 1, 1), Error);
    EXPECT_EQ(mem.seq_pos_max(300), -1);
}

TEST(Hybrid, T68_T69_RollbackAndPendingRefusal) {
    HybridMemory mem(small_params(64, 4, true, 8, 16, 2));
    dec(mem, 0, 0, 12);
    EXPECT_TRUE(mem.seq_rm(0, 9, -1));
    EXPECT_EQ(mm(mem, 0), PP(8, 8));
    EXPECT_EQ(check_contents(mem), "");  // the state is exactly the one after 9 tokens
    EXPECT_FALSE(mem.seq_rm(0, 8, -1));  // a second rollback before a decode
    EXPECT_EQ(mm(mem, 0), PP(8, 8));
    EXPECT_EQ(dec(mem, 0, 9, 3), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T70_RollbackBeyondSnapshotsRefused) {
    HybridMemory mem(small_params(64, 4, true, 8, 16));
    dec(mem, 0, 0, 12);
    EXPECT_FALSE(mem.seq_rm(0, 2, -1));
    EXPECT_EQ(span(mem, 0), PP(0, 11));
}

TEST(Hybrid, T74_T62_NoSnapshotsMeansNoPartialRemoval) {
    HybridMemory mem(small_params(64, 4, true, 0, 16));
    dec(mem, 0, 0, 12);
    EXPECT_FALSE(mem.seq_rm(0, 9, -1));
    EXPECT_EQ(span(mem, 0), PP(0, 11));
    EXPECT_TRUE(mem.seq_rm(0, 12, -1));  // nothing in range
    EXPECT_TRUE(mem.seq_rm(0, 0, 100));  // whole, written with a finite bound
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
}

TEST(Hybrid, FixQ11_T79_RollbackLimitedToWrittenSnapshots) {
    HybridMemory mem(small_params(64, 4, true, 8, 16));
    dec(mem, 0, 0, 10);
    EXPECT_EQ(dec(mem, 0, 10, 1), DecodeStatus::Ok);  // a one-token ubatch writes one snapshot only
    EXPECT_FALSE(mem.seq_rm(0, 8, -1));
    EXPECT_TRUE(mem.seq_rm(0, 10, -1));
    EXPECT_EQ(span(mem, 0), PP(0, 9));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, T75_SharedTokensForFreshSequences) {
    HybridMemory mem(small_params(64, 4, true, 8, 16));
    Batch b;
    b.tokens = {1, 2};
    b.pos = {0, 1};
    b.seqs = {{2, 3}, {2, 3}};
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 2), PP(1, 1));
    EXPECT_EQ(mm(mem, 3), PP(1, 1));
    EXPECT_EQ(check_contents(mem), "");
    // A rollback of one of them uses the shared snapshots and leaves the other alone.
    EXPECT_TRUE(mem.seq_rm(3, 1, -1));
    EXPECT_EQ(span(mem, 3), PP(0, 0));
    EXPECT_EQ(span(mem, 2), PP(0, 1));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Hybrid, CopyOnWriteKeepsBothStates) {
    HybridMemory mem(small_params(64, 4, true, 2, 16, 2));
    dec(mem, 0, 0, 6);
    mem.seq_cp(0, 1);
    EXPECT_EQ(mem.recurrent().slot_of(1), 0u);  // shared until written
    dec(mem, 0, 6, 2);
    dec(mem, 1, 6, 3);
    EXPECT_EQ(mem.recurrent().slot_of(1), 1u);
    EXPECT_EQ(check_contents(mem), "");
    // The copy's snapshots came with it.
    mem.seq_cp(1, 2);
    EXPECT_TRUE(mem.seq_rm(2, 8, -1));
    EXPECT_EQ(check_contents(mem), "");
    EXPECT_EQ(span(mem, 1), PP(0, 8));
}

TEST(Hybrid, T45_UnknownSequenceIdsCannotLeakCells) {
    // The reference accepts seq 7 with n_seq_max 4 in a unified cache and leaks its cells after a whole restore
    // (Q6); here the batch is refused, so a whole save / clear / restore keeps every cell accounted for.
    HybridMemory mem(small_params(64, 4));
    EXPECT_EQ(dec(mem, 7, 0, 3), DecodeStatus::InvalidBatch);
    dec(mem, 0, 0, 4);
    EXPECT_EQ(mem.kv().stream(0).used(), 4u);
    EXPECT_EQ(dec(mem, 1, 0, 60), DecodeStatus::Ok);  // 64 - 4 cells free
}

TEST(Hybrid, T73_MiddleRemovalAfterRollbackRefused) {
    HybridMemory mem(small_params(64, 4, true, 8, 16, 2));
    dec(mem, 0, 0, 12);
    EXPECT_TRUE(mem.seq_rm(0, 9, -1));
    EXPECT_FALSE(mem.seq_rm(0, 2, 5));  // the reference says true and removes attention cells only (Q3)
    EXPECT_EQ(span(mem, 0), PP(0, 8));
    EXPECT_EQ(mem.kv().stream(0).used(), 9u);
}

}  // namespace
}  // namespace offgrid::memory
