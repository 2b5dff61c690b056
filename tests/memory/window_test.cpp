// Sliding-window attention in the KV cache (memory.md 3.5, 3.6, scenarios T53-T57 of model W): the masking
// rule of each window type, the plan's visibility, the reuse of out-of-window cells by the slot search, and exact
// rollback of a failed prepare or decode (the reference's Q18 fixed).
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "memory/state_io.h"
#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;
using PP = std::pair<Pos, Pos>;
using Bytes = std::vector<uint8_t>;

Window win(WindowType t, uint32_t n) { return Window{t, n}; }

// An attention-only memory (model class W without its base cache) with a window.
MemoryParams windowed(uint32_t n_ctx, Window w, uint32_t n_ubatch = 16, uint32_t n_seq_max = 4,
                      bool recurrent = false, uint32_t n_rs_seq = 0) {
    MemoryParams p = small_params(n_ctx, n_seq_max, true, n_rs_seq, n_ubatch, 0, true, recurrent);
    p.window = w;
    return p;
}

// Positions of a sequence's cells, in order.
std::vector<Pos> positions(const HybridMemory & mem, SeqId s) {
    std::vector<Pos> out;
    const CellStream & cs = mem.kv().stream(mem.kv().stream_of(s));
    for (auto & [p, c] : cs.seq_cells(s)) out.push_back(p);
    return out;
}

// The memory's books and rows, as a whole state holds them.
Bytes snapshot(const HybridMemory & mem) { return state_save(mem, -1); }

TEST(Window, MaskingRuleOfEachType) {
    // memory.md 3.5, key p0 and query p1.
    const Window none{}, st = win(WindowType::Standard, 32), ch = win(WindowType::Chunked, 4),
                 sy = win(WindowType::Symmetric, 5);
    EXPECT_FALSE(none.masked(0, 1000000));
    EXPECT_TRUE(st.masked(0, 32));    // p1 - p0 >= n_swa
    EXPECT_FALSE(st.masked(1, 32));
    EXPECT_FALSE(st.masked(32, 32));
    EXPECT_TRUE(ch.masked(3, 4));     // p0 < floor(p1 / 4) * 4
    EXPECT_FALSE(ch.masked(4, 7));
    EXPECT_FALSE(ch.masked(3, 3));
    EXPECT_TRUE(ch.masked(7, 8));
    EXPECT_FALSE(sy.masked(3, 5));    // |p1 - p0| > floor(5 / 2)
    EXPECT_TRUE(sy.masked(2, 5));
    EXPECT_TRUE(sy.masked(8, 5));
    EXPECT_FALSE(sy.masked(7, 5));
    EXPECT_TRUE(win(WindowType::Standard, 1).masked(4, 5));  // n_swa 1: a query sees itself only
}

TEST(Window, LowestVisibleAgreesWithTheMaskingRule) {
    for (WindowType t : {WindowType::None, WindowType::Standard, WindowType::Chunked, WindowType::Symmetric}) {
        for (uint32_t n = 1; n <= 9; ++n) {
            const Window w = win(t, n);
            for (Pos q = 0; q < 40; ++q)
                for (Pos k = 0; k <= q; ++k)
                    EXPECT_EQ(k >= w.lowest_visible(q), !w.masked(k, q))
                        << w.describe() << " key " << k << " query " << q;
        }
    }
}

TEST(Window, BadParametersRefused) {
    auto error_of = [](const MemoryParams & p) -> std::string {
        try {
            HybridMemory mem(p);
        } catch (const Error & e) {
            return e.what();
        }
        return "";
    };
    EXPECT_NE(error_of(windowed(64, win(WindowType::Standard, 0))).find("n_swa"), std::string::npos);
    EXPECT_NE(error_of(windowed(64, win((WindowType)7, 4))).find("window.type"), std::string::npos);
    // A window with k-pools: the pools would regroup at every step (docs/memory.md), so it is refused.
    MemoryParams p = small_params(64, 4, true, 0, 16, 2);
    p.window = win(WindowType::Standard, 8);
    const std::string e = error_of(p);
    EXPECT_NE(e.find("k-pools"), std::string::npos) << e;
    p.kpool = 0;
    EXPECT_EQ(error_of(p), "");
}

// T53 (sizing): the reference gives the SWA cache pad256(min(1024, 32 + 64)) = 256 cells.
TEST(Window, T53_WindowedCacheSize) {
    EXPECT_EQ(window_cells_per_stream(1024, win(WindowType::Standard, 32), 1, true, 64), 256u);
    EXPECT_EQ(window_cells_per_stream(1024, Window{}, 1, true, 64), 1024u);
    EXPECT_EQ(window_cells_per_stream(1024, win(WindowType::Standard, 300), 4, true, 64), 1024u);
    EXPECT_EQ(window_cells_per_stream(512, win(WindowType::Standard, 300), 4, false, 64), 512u);
}

// T54: 300 tokens in a 256-cell window cache, ubatches of 64: the last ubatch reuses cells 0..43.
TEST(Window, T54_OutOfWindowCellsReused) {
    HybridMemory mem(windowed(256, win(WindowType::Standard, 32), 64, 1));
    EXPECT_EQ(dec(mem, 0, 0, 300), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(44, 299));
    EXPECT_EQ(mem.kv().stream(0).used(), 256u);
    for (uint32_t c = 0; c < 44; ++c) EXPECT_EQ(mem.kv().stream(0).pos(c), (Pos)(256 + c));
    // The rows of a reused cell hold the new token.
    EXPECT_EQ(((const float *)mem.k_row(0, 5))[1], 261.0f);
    EXPECT_EQ(mem.layout().seq(0).cells.size(), 256u);
    EXPECT_EQ(mem.layout().seq(0).cells.front().pos, 44);
}

// T56: a removal at the end, then the sequence continues.
TEST(Window, T56_RemoveTailThenContinue) {
    HybridMemory mem(windowed(256, win(WindowType::Standard, 32), 64, 1));
    dec(mem, 0, 0, 300);
    EXPECT_TRUE(mem.seq_rm(0, 290, -1));
    EXPECT_EQ(mm(mem, 0), PP(44, 289));
    EXPECT_EQ(dec(mem, 0, 290, 5), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(44, 294));
}

// T57: with a full-size cache (swa_full) empty cells come first in the scan, so nothing is reused.
TEST(Window, T57_FullSizeCacheKeepsEverything) {
    HybridMemory mem(windowed(1024, win(WindowType::Standard, 32), 64, 1));
    EXPECT_EQ(dec(mem, 0, 0, 300), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(0, 299));
}

// T53: the reference refuses shifts when its SWA cache is smaller than the base cache (two caches would move
// apart). Ours is one cache, so a shift works: every cell moves, negative ones are freed, decoding continues.
TEST(Window, T53_ShiftWorksOnAWindowedCache) {
    HybridMemory mem(windowed(256, win(WindowType::Standard, 32), 64, 1));
    dec(mem, 0, 0, 300);
    mem.seq_add(0, 0, -1, -100);
    EXPECT_EQ(mm(mem, 0), PP(0, 199));
    mem.apply_pending_shifts([](uint32_t, Pos old_pos, Pos new_pos) { EXPECT_EQ(new_pos, old_pos - 100); });
    EXPECT_EQ(dec(mem, 0, 200, 70), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(14, 269));
}

// T55: the reference's sequence state omits cells outside the window of the last token (32 of 256). Ours keeps
// every cell the cache holds, so a restore gives back exactly the same memory (same bytes again on save).
TEST(Window, T55_SequenceStateKeepsEveryCell) {
    HybridMemory mem(windowed(256, win(WindowType::Standard, 32), 64, 2));
    dec(mem, 0, 0, 300);
    const Bytes b = state_save(mem, 0);
    uint32_t count;
    std::memcpy(&count, b.data() + 104, 4);  // after the header (88), its checksum (4), the attention frame (12)
    EXPECT_EQ(count, 256u);
    EXPECT_TRUE(mem.seq_rm(0, -1, -1));
    state_load(mem, b, 1);
    EXPECT_EQ(mm(mem, 1), PP(44, 299));
    EXPECT_EQ(state_save(mem, 1).size(), b.size());
    // Reuse goes on after a restore: cells 0..12 (positions 256..268, outside the window of 300) and 44..70
    // (44..70) are taken, and as in the reference every older position of the sequence goes with them (its
    // cells stay one run), leaving 269..339.
    EXPECT_EQ(dec(mem, 1, 300, 40), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 1), PP(269, 339));
    EXPECT_EQ(mem.kv().stream(0).used(), 71u);
}

// A full windowed cache (the steady state) still takes a restored sequence: like a decode, the restore takes
// cells outside their owners' windows, and their older cells go with them.
TEST(Window, SequenceRestoreTakesOutOfWindowCells) {
    HybridMemory other(windowed(8, win(WindowType::Standard, 2), 16, 2));
    dec(other, 0, 0, 3, {7, 8, 9});
    const Bytes b = state_save(other, 0);
    HybridMemory mem(windowed(8, win(WindowType::Standard, 2), 16, 2));
    dec(mem, 0, 0, 8);  // every cell used; positions 0..6 are outside the window of 8, 7 is the newest
    state_load(mem, b, 1);
    EXPECT_EQ(positions(mem, 1), (std::vector<Pos>{0, 1, 2}));
    EXPECT_EQ(positions(mem, 0), (std::vector<Pos>{3, 4, 5, 6, 7}));
    EXPECT_EQ(state_save(mem, 1).size(), b.size());
    EXPECT_EQ(dec(mem, 1, 3, 1), DecodeStatus::Ok);
    // Not enough cells outside the windows: refused, and the destination is dropped as for any failed restore.
    HybridMemory tight(windowed(4, win(WindowType::Standard, 3), 16, 2));
    dec(tight, 0, 0, 4);  // only position 0 is outside the window of 4
    EXPECT_THROW(state_load(tight, b, 1), FileError);
    EXPECT_EQ(positions(tight, 0), (std::vector<Pos>{0, 1, 2, 3}));
}

// The window is not part of a state: a windowed memory's state restores into a plain one of the same shape, and
// back, with the same cells and rows.
TEST(Window, StatesMoveBetweenWindowedAndPlainMemories) {
    HybridMemory windowed_mem(windowed(64, win(WindowType::Chunked, 8), 16, 2));
    dec(windowed_mem, 0, 0, 20);
    const Bytes whole = state_save(windowed_mem, -1);
    HybridMemory plain(windowed(64, Window{}, 16, 2));
    state_load(plain, whole, -1);
    EXPECT_EQ(state_save(plain, -1), whole);
    EXPECT_EQ(dec(plain, 0, 20, 50), DecodeStatus::NoSpace);  // 70 positions, 64 cells, no window
    HybridMemory back(windowed(64, win(WindowType::Chunked, 8), 16, 2));
    state_load(back, state_save(plain, -1), -1);
    EXPECT_EQ(state_save(back, -1), whole);
    EXPECT_EQ(dec(back, 0, 20, 50), DecodeStatus::Ok);  // the window lets the oldest positions go
    EXPECT_EQ(back.seq_pos_max(0), 69);
}

// The plan: a token sees the entries [first_visible, n_visible) of its sequence, exactly the unmasked ones.
TEST(Window, PlanVisibilityFollowsTheWindow) {
    for (Window w : {win(WindowType::Standard, 3), win(WindowType::Chunked, 4), win(WindowType::Symmetric, 4),
                     Window{}}) {
        HybridMemory mem(windowed(64, w, 16, 1));
        dec(mem, 0, 0, 5);
        Batch b;
        for (int i = 0; i < 9; ++i) {
            b.tokens.push_back(7);
            b.pos.push_back(5 + i);
        }
        ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
        const Plan & plan = mem.apply();
        for (const TokenPlan & t : plan.tokens) {
            const SeqView v = plan.seq_view(t.seq);
            ASSERT_LE(t.first_visible, t.n_visible);
            ASSERT_LE(t.n_visible, v.cells.size());
            std::vector<Pos> seen, want;
            for (uint32_t j = t.first_visible; j < t.n_visible; ++j) seen.push_back(v.cells[j].pos);
            for (Pos p = 0; p <= t.pos; ++p)
                if (!w.masked(p, t.pos)) want.push_back(p);
            EXPECT_EQ(seen, want) << w.describe() << " query " << t.pos;
        }
        fake_forward(plan, mem);
        mem.finish();
    }
}

// Reuse takes a cell held by one sequence alone whose key is outside the window of that sequence's next token,
// whichever sequence decodes.
TEST(Window, ReuseTakesOutOfWindowCellsOfAnySequence) {
    HybridMemory mem(windowed(4, win(WindowType::Standard, 1), 16, 2));
    dec(mem, 1, 0, 2);  // cells 0, 1
    dec(mem, 0, 0, 2);  // cells 2, 3
    EXPECT_EQ(dec(mem, 0, 2, 1), DecodeStatus::Ok);
    EXPECT_EQ(mem.kv().stream(0).pos(0), 2);  // seq 1's position 0 (masked for its next token, 2) went
    EXPECT_EQ(span(mem, 1), PP(1, 1));
    EXPECT_EQ(positions(mem, 0), (std::vector<Pos>{0, 1, 2}));
}

// A sequence's newest cell is never taken, even when a window (here n_swa 1) masks it: its pos_max, which its
// next batch must continue, stays. (The reference can empty a sequence this way.)
TEST(Window, ReuseNeverTakesASequencesLastCell) {
    HybridMemory mem(windowed(4, win(WindowType::Standard, 1), 16, 2));
    dec(mem, 1, 0, 1);  // cell 0: seq 1's only (last) cell
    dec(mem, 0, 0, 3);  // cells 1..3
    EXPECT_EQ(dec(mem, 0, 3, 1), DecodeStatus::Ok);
    EXPECT_EQ(span(mem, 1), PP(0, 0));
    EXPECT_EQ(mem.kv().stream(0).pos(1), 3);
    // Chunked: at a chunk boundary every earlier key of the sequence is masked, its last one included.
    HybridMemory ch(windowed(4, win(WindowType::Chunked, 2), 16, 2));
    dec(ch, 0, 0, 2);
    dec(ch, 1, 0, 2);
    EXPECT_EQ(dec(ch, 0, 2, 1), DecodeStatus::Ok);   // takes seq 0's or seq 1's position 0, never a last one
    EXPECT_EQ(ch.seq_pos_max(1), 1);
    EXPECT_EQ(dec(ch, 0, 3, 1), DecodeStatus::Ok);
    EXPECT_EQ(ch.seq_pos_max(1), 1);
    EXPECT_EQ(ch.seq_pos_max(0), 3);
    EXPECT_EQ(dec(ch, 0, 4, 2), DecodeStatus::Ok);       // seq 0's position 2 and seq 1's position 0
    EXPECT_EQ(span(ch, 1), PP(1, 1));
    EXPECT_EQ(dec(ch, 0, 6, 2), DecodeStatus::Ok);       // seq 0's positions 3 and 4
    // Three tokens at 8: only seq 0's positions 5 and 6 may go; its 7 and seq 1's 1 are last.
    EXPECT_EQ(dec(ch, 0, 8, 3), DecodeStatus::NoSpace);
    EXPECT_EQ(dec(ch, 0, 8, 2), DecodeStatus::Ok);
    EXPECT_EQ(span(ch, 1), PP(1, 1));
    EXPECT_EQ(span(ch, 0), PP(7, 9));
}

// Cells shared by several sequences are never reused.
TEST(Window, SharedCellsAreNeverReused) {
    HybridMemory mem(windowed(8, win(WindowType::Standard, 2), 16, 2));
    dec(mem, 0, 0, 8);
    mem.seq_cp(0, 1);
    std::string why;
    EXPECT_EQ(dec(mem, 0, 8, 1, {}, &why), DecodeStatus::NoSpace);
    EXPECT_NE(why.find("no room"), std::string::npos) << why;
    EXPECT_TRUE(mem.seq_rm(1, -1, -1));
    EXPECT_EQ(dec(mem, 0, 8, 1), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(1, 8));
}

// Q18 fixed: the reference's prepare does not restore cells its dry run purged. Here the first ubatch of the dry
// run takes two of seq 3's cells, the second finds no room: begin says NoSpace and the cache is exactly as it was.
TEST(Window, FixQ18_FailedPrepareLeavesTheCacheAsItWas) {
    HybridMemory mem(windowed(8, win(WindowType::Standard, 4), 2, 4));
    dec(mem, 3, 0, 5);  // cells 0..4; positions 0 and 1 are outside the window of its next token
    dec(mem, 0, 0, 3);  // cells 5..7
    mem.seq_cp(0, 2);   // seq 0's cells are shared: not reusable
    const Bytes before = snapshot(mem);
    const auto heads = mem.kv().heads();
    Batch b;
    for (int i = 0; i < 4; ++i) {
        b.tokens.push_back(9);
        b.pos.push_back(3 + i);
    }
    const BeginResult r = mem.begin(b);
    EXPECT_EQ(r.status, DecodeStatus::NoSpace);
    EXPECT_FALSE(mem.in_call());
    EXPECT_EQ(snapshot(mem), before);
    EXPECT_EQ(mem.kv().heads(), heads);
    EXPECT_EQ(positions(mem, 3), (std::vector<Pos>{0, 1, 2, 3, 4}));
    // The same batch in one-token calls works: each token frees the next.
    EXPECT_EQ(dec(mem, 0, 3, 2), DecodeStatus::Ok);
    EXPECT_EQ(positions(mem, 3), (std::vector<Pos>{2, 3, 4}));
}

// Q18 with a purge: taking seq 3's position 3 also drops seq 3 from its older cells 0..2 (which seq 2 shares, so
// they were not taken themselves). The second ubatch finds no room; the purge is rolled back too.
TEST(Window, FixQ18_PurgedOlderCellsComeBack) {
    HybridMemory mem(windowed(8, win(WindowType::Standard, 3), 3, 4));
    dec(mem, 3, 0, 3);  // cells 0..2
    mem.seq_cp(3, 2);   // shared by 2 and 3
    dec(mem, 3, 3, 3);  // cells 3..5, seq 3 alone; position 3 is outside the window of 6
    const Bytes before = snapshot(mem);
    std::string why;
    EXPECT_EQ(dec(mem, 0, 0, 6, {}, &why), DecodeStatus::NoSpace);
    EXPECT_NE(why.find("no room"), std::string::npos) << why;
    EXPECT_EQ(snapshot(mem), before);
    EXPECT_EQ(positions(mem, 3), (std::vector<Pos>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(positions(mem, 2), (std::vector<Pos>{0, 1, 2}));
    // Applied for real (three tokens fit), the purge happens and stays.
    EXPECT_EQ(dec(mem, 0, 0, 3), DecodeStatus::Ok);
    EXPECT_EQ(positions(mem, 3), (std::vector<Pos>{4, 5}));
    EXPECT_EQ(positions(mem, 2), (std::vector<Pos>{0, 1, 2}));
}

// A decode that reused cells and then failed is undone exactly: books, K / V / indexer rows of the taken cells.
TEST(Window, UndoRestoresReusedCellsAndRows) {
    for (bool recurrent : {false, true}) {
        HybridMemory mem(windowed(8, win(WindowType::Standard, 2), 2, 2, recurrent));
        dec(mem, 0, 0, 8);
        const Bytes before = snapshot(mem);
        Batch b;
        for (int i = 0; i < 6; ++i) {
            b.tokens.push_back(40 + i);
            b.pos.push_back(8 + i);
        }
        ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
        fake_forward(mem.apply(), mem);  // overwrites the rows of two reused cells
        fake_forward(mem.apply(), mem);
        mem.undo();
        EXPECT_EQ(snapshot(mem), before) << "recurrent " << recurrent;
        EXPECT_EQ(positions(mem, 0), (std::vector<Pos>{0, 1, 2, 3, 4, 5, 6, 7}));
        EXPECT_EQ(dec(mem, 0, 8, 6), DecodeStatus::Ok);
        EXPECT_EQ(positions(mem, 0), (std::vector<Pos>{6, 7, 8, 9, 10, 11, 12, 13}));
    }
}

// With recurrent state (a hybrid with a windowed attention cache) the state absorbs every token while the
// attention cache keeps the window; rollback still works on the last tokens.
TEST(Window, HybridWithWindowKeepsStateAndRollsBack) {
    HybridMemory mem(windowed(64, win(WindowType::Standard, 8), 16, 2, true, 4));
    std::vector<Token> toks;
    for (int i = 0; i < 100; ++i) toks.push_back(100 + i % 37);
    EXPECT_EQ(dec(mem, 0, 0, 100, toks), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(99, 99));
    EXPECT_GT(mem.seq_first_pos(0), 0);
    float n = 0, h = 0;
    for (int i = 0; i < 98; ++i) absorb(n, h, toks[i]);
    EXPECT_TRUE(mem.seq_rm(0, 98, -1));
    EXPECT_EQ(mm(mem, 0), PP(97, 97));
    EXPECT_EQ(rec_state(mem, 0), std::make_pair(n, h));
    EXPECT_EQ(dec(mem, 0, 98, 3), DecodeStatus::Ok);
}

// With a window, removing every cell the attention cache still holds is not removing the sequence: the
// recurrent state also holds the positions the window let go. Only a range from 0 removes it all.
TEST(Window, HybridRemovalOfEveryCellLeftIsNotWhole) {
    HybridMemory mem(windowed(12, win(WindowType::Standard, 2), 16, 2, true, 4));
    dec(mem, 0, 0, 10);
    dec(mem, 0, 10, 4);  // cells 10 and 11 are empty, then positions 0 and 1 (out of the window) are taken
    EXPECT_EQ(positions(mem, 0), (std::vector<Pos>{2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
    EXPECT_FALSE(mem.seq_rm(0, 2, -1));  // every cell left, but not the whole sequence
    EXPECT_EQ(mem.seq_pos_max(0), 13);
    EXPECT_TRUE(mem.recurrent().present(0));
    EXPECT_TRUE(mem.seq_rm(0, 10, -1));  // a rollback of the last 4
    EXPECT_EQ(mm(mem, 0), PP(9, 9));
    EXPECT_TRUE(mem.seq_rm(0, 0, -1));   // from 0: the whole sequence
    EXPECT_FALSE(mem.recurrent().present(0));
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
}

}  // namespace
}  // namespace offgrid::memory
