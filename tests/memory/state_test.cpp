// State save and restore (memory.md section 7 scenarios, own format): round trips, refusals and failures that
// leave the three caches consistent.
#include <gtest/gtest.h>

#include <climits>
#include <cstring>

#include "common/error.h"
#include "memory/state_io.h"
#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;
using PP = std::pair<Pos, Pos>;
using Bytes = std::vector<uint8_t>;

std::string load_error(HybridMemory & mem, const Bytes & b, SeqId s, uint32_t flags = 0) {
    try {
        state_load(mem, b, s, flags);
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

TEST(State, T49_SaveRemoveRestoreSaveGivesSameBytes) {
    HybridMemory mem(small_params(64, 4, true, 2, 16, 2));
    dec(mem, 0, 0, 9);
    const Bytes b = state_save(mem, 0);
    EXPECT_TRUE(mem.seq_rm(0, -1, -1));
    state_load(mem, b, 0);
    EXPECT_EQ(state_save(mem, 0), b);
    EXPECT_EQ(span(mem, 0), PP(0, 8));
    EXPECT_EQ(dec(mem, 0, 9, 3), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(State, T37_RestoreIntoAnotherSequence) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2));
    dec(mem, 0, 0, 3);
    const Bytes b = state_save(mem, 0);
    mem.seq_rm(0, -1, -1);
    state_load(mem, b, 2);
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
    EXPECT_EQ(span(mem, 2), PP(0, 2));
    EXPECT_EQ(rec_state(mem, 2), expected_state(mem, 2));
    EXPECT_EQ(dec(mem, 2, 3, 4), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(State, T38_BadMagicRefusedAndNothingChanges) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 3);
    dec(mem, 2, 0, 5);
    Bytes b = state_save(mem, 0);
    b[0] ^= 1;
    const std::string e = load_error(mem, b, 2);
    EXPECT_NE(e.find("magic"), std::string::npos) << e;
    EXPECT_NE(e.find("at byte 4"), std::string::npos) << e;
    EXPECT_EQ(span(mem, 2), PP(0, 4));
}

// Where section k (0 attention, 1 recurrent, 2 indexer) starts: its frame (u64 size, u32 checksum), then its body.
size_t section_frame(const Bytes & b, int k) {
    size_t at = 22 * 4 + 4;  // header (5 fields and 17 shape fields) and its checksum
    for (int i = 0; i < k; ++i) {
        uint64_t n = 0;
        std::memcpy(&n, b.data() + at, 8);
        at += 12 + n;
    }
    return at;
}

// A state cut anywhere fails its framing or checksums: refused, and nothing changes (the reference, and this
// memory before checksums, dropped the destination).
TEST(State, T39_TruncatedRestoreRefusedUnchanged) {
    HybridMemory mem(small_params(64, 4, true, 0, 16, 2));
    dec(mem, 0, 0, 6);
    dec(mem, 2, 0, 5);
    const Bytes b = state_save(mem, 0);
    const Bytes before = state_save(mem, -1);
    for (size_t cut : {b.size() - 10, (size_t)90, (size_t)20, (size_t)0}) {
        const Bytes part(b.begin(), b.begin() + cut);
        const std::string e = load_error(mem, part, 2);
        EXPECT_TRUE(e.find("truncated") != std::string::npos || e.find("cut") != std::string::npos) << cut << ": " << e;
        EXPECT_EQ(state_save(mem, -1), before) << cut;
        EXPECT_EQ(span(mem, 2), PP(0, 4));
    }
}

// A state whose checksums hold but whose sections disagree (only a crafted one can) drops the destination from all
// three caches: never half restored.
TEST(State, FixQ9_T77_NoHalfRestore) {
    for (uint32_t n_rs : {0u, 8u}) {
        HybridMemory mem(small_params(64, 4, true, n_rs, 16, 2));
        dec(mem, 0, 0, 10);
        Bytes b = state_save(mem, 0);
        dec(mem, 1, 0, 4);
        const Bytes cut(b.begin(), b.end() - 8);
        EXPECT_THROW(state_load(mem, cut, 1), FileError);
        EXPECT_EQ(span(mem, 1), PP(0, 3));  // refused whole
        const size_t rec_pos = section_frame(b, 1) + 12 + 8;  // count, seq id, then the last position
        const int32_t wrong = 4;
        std::memcpy(b.data() + rec_pos, &wrong, 4);
        state_reseal(b);
        const std::string e = load_error(mem, b, 1);
        EXPECT_NE(e.find("recurrent pos"), std::string::npos) << e;
        EXPECT_EQ(span(mem, 1), PP(-1, -1));  // not (0, -1): attention and recurrent agree
        EXPECT_FALSE(mem.recurrent().present(1));
        EXPECT_EQ(check_contents(mem), "");
    }
}

TEST(State, FixQ7_T40_EmptyStateEmptiesTheDestination) {
    HybridMemory mem(small_params());
    const Bytes empty1 = state_save(mem, 1);
    dec(mem, 3, 0, 4);
    state_load(mem, empty1, 3);
    EXPECT_EQ(span(mem, 3), PP(-1, -1));
    EXPECT_FALSE(mem.recurrent().present(3));
}

TEST(State, T43_WholeSaveClearRestoreSave) {
    HybridMemory mem(small_params(64, 4, true, 2, 16, 4));
    dec(mem, 0, 0, 4);
    dec(mem, 1, 0, 4);
    dec(mem, 0, 4, 4);
    mem.seq_rm(1, -1, -1);
    mem.seq_cp(0, 2);
    const Bytes b = state_save(mem, -1);
    mem.clear();
    state_load(mem, b, -1);
    EXPECT_EQ(state_save(mem, -1), b);
    EXPECT_EQ(span(mem, 0), PP(0, 7));
    EXPECT_EQ(span(mem, 2), PP(0, 7));
    EXPECT_EQ(span(mem, 1), PP(-1, -1));
    EXPECT_EQ(dec(mem, 2, 8, 5), DecodeStatus::Ok);
    EXPECT_EQ(dec(mem, 0, 8, 1), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

// Version 4: the saved pooled keys come back with their staleness marks, so a restored sequence is not pooled again
// (the first decode after restoring a 64k context used to re-pool 16k pools per layer); a mark saved while a
// sequence was stale still makes the next decode pool those pools. check_contents reads the pooled keys themselves.
TEST(State, RestoreKeepsPooledKeysAndStalenessMarks) {
    for (SeqId dst : {-1, 0, 3}) {
        HybridMemory mem(small_params(64, 4, true, 0, 16, 4, true, false));
        dec(mem, 1, 0, 5);   // another sequence first, so seq 0's cells do not start at 0
        dec(mem, 0, 0, 10);  // two pools
        const SeqId src = dst < 0 ? -1 : 0;
        const Bytes clean = state_save(mem, src);
        ASSERT_TRUE(mem.seq_rm(0, 2, 3));  // both pools regroup: (0 1 3 4), (5 6 7 8), stale from 2
        ASSERT_EQ(mem.layout().stale(0), 2);
        const Bytes stale = state_save(mem, src);
        dec(mem, 0, 10, 1);  // seq 0 pooled again, so below only the restored sequence can have stale pools
        const SeqId seq = dst < 0 ? 0 : dst;
        for (const Bytes * b : {&clean, &stale}) {
            if (dst >= 0) mem.seq_rm(dst, -1, -1);
            state_load(mem, *b, dst);
            EXPECT_EQ(mem.layout().stale(seq), b == &clean ? kPosInf : 2) << dst;
            EXPECT_EQ(check_contents(mem), "") << dst;
            const Pos next = mem.kv().seq_pos_max(seq) + 1;
            Batch one;
            one.tokens = {500};
            one.pos = {next};
            one.seqs = {{seq}};
            ASSERT_EQ(mem.begin(one).status, DecodeStatus::Ok);
            const Plan & plan = mem.apply();
            // The token completes no pool (11 or 10 entries): clean pools nothing, stale pools its two pools.
            EXPECT_EQ(plan.new_pools.size(), b == &clean ? 0u : 2u) << dst;
            fake_forward(plan, mem);
            mem.finish();
            EXPECT_EQ(check_contents(mem), "") << dst;
        }
    }
}

TEST(State, T44_OtherStreamLayoutRefusedUnchanged) {
    HybridMemory unified(small_params(64, 2, true));
    dec(unified, 0, 0, 3);
    const Bytes b = state_save(unified, -1);
    HybridMemory split(small_params(64, 2, false));
    dec(split, 0, 0, 3);
    const std::string e = load_error(split, b, -1);
    EXPECT_NE(e.find("n_stream"), std::string::npos) << e;
    EXPECT_EQ(span(split, 0), PP(0, 2));
}

TEST(State, OtherShapeRefusedWithFieldName) {
    HybridMemory a(small_params());
    dec(a, 0, 0, 3);
    const Bytes b = state_save(a, 0);
    MemoryParams p = small_params();
    p.shape.layers[0].k_width = 4;
    HybridMemory other(p);
    dec(other, 0, 0, 2);
    EXPECT_NE(load_error(other, b, 0).find("k_width"), std::string::npos);
    EXPECT_EQ(span(other, 0), PP(0, 1));
    p = small_params();
    p.shape.type_v = tensor::ElemType::F16;
    HybridMemory other_type(p);
    EXPECT_NE(load_error(other_type, b, 0).find("type_v"), std::string::npos);
    EXPECT_NE(load_error(a, b, -1).find("kind"), std::string::npos);
}

TEST(State, FixQ8_T46_WholeRestoreCutInMetaLeavesNoPartialCells) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 10);
    Bytes b = state_save(mem, -1);
    const Bytes cut(b.begin(), b.begin() + 100);
    EXPECT_THROW(state_load(mem, cut, -1), FileError);
    EXPECT_EQ(span(mem, 0), PP(0, 9));  // refused whole, nothing changed
    // Checksums that hold over a bad cell (a crafted state): the whole restore fails and leaves no partial cells.
    const size_t first_seq = section_frame(b, 0) + 12 + 4 + 24;  // count, then pos shift x y token n_seq, seq id
    const int32_t bad = 99;
    std::memcpy(b.data() + first_seq, &bad, 4);
    state_reseal(b);
    EXPECT_THROW(state_load(mem, b, -1), FileError);
    EXPECT_EQ(span(mem, 0), PP(-1, -1));
    EXPECT_EQ(mem.kv().stream(0).used(), 0u);
    EXPECT_FALSE(mem.recurrent().present(0));
}

// Every byte of a small state, flipped in turn, is refused before anything changes, and the message
// gives the damaged part's offset.
TEST(State, EveryFlippedByteRefusedBeforeAnythingChanges) {
    HybridMemory mem(small_params(64, 4, true, 2, 16, 2));
    dec(mem, 0, 0, 5);
    dec(mem, 1, 0, 3);
    const Bytes whole = state_save(mem, -1);
    const Bytes one = state_save(mem, 1);
    const Bytes before = whole;
    for (const auto & [b, dst] : {std::pair{whole, -1}, std::pair{one, 1}}) {
        const size_t sections[3] = {section_frame(b, 0), section_frame(b, 1), section_frame(b, 2)};
        for (size_t i = 0; i < b.size(); ++i) {
            Bytes bad = b;
            bad[i] ^= 0xFF;
            std::string e;
            uint64_t offset = 0;
            try {
                state_load(mem, bad, dst);
            } catch (const FileError & err) {
                e = err.what();
                offset = err.offset();
            }
            ASSERT_NE(e, "") << "flipped byte " << i << " of " << b.size() << " was accepted";
            ASSERT_EQ(state_save(mem, -1), before) << "flipped byte " << i << " changed the memory: " << e;
            if (i >= 92) {  // past the header: the section frame holding the byte
                const size_t k = i >= sections[2] ? 2 : i >= sections[1] ? 1 : 0;
                EXPECT_EQ(offset, sections[k]) << i << ": " << e;
                EXPECT_NE(e.find(k == 0 ? "attention section" : k == 1 ? "recurrent section" : "indexer section"),
                          std::string::npos) << i << ": " << e;
            }
        }
    }
}

TEST(State, OlderVersionsRefused) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 3);
    Bytes b = state_save(mem, 0);
    for (const uint32_t v : {1u, 2u, 3u}) {
        std::memcpy(b.data() + 4, &v, 4);
        const std::string e = load_error(mem, b, 0);
        EXPECT_NE(e.find("version " + std::to_string(v) + ", this build reads version 4 only (older states lack "
                         "checksums or staleness marks"), std::string::npos) << e;
        EXPECT_EQ(span(mem, 0), PP(0, 2));
    }
}

// A cell at 2^31 - 1 would make seq_pos_max + 1 overflow in the callers: such positions are refused.
TEST(State, PositionsTheMemoryCannotContinueRefused) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 1);
    Bytes b = state_save(mem, 0);
    const size_t pos_at = section_frame(b, 0) + 12 + 4;
    const size_t rec_pos_at = section_frame(b, 1) + 12 + 8;
    for (const int32_t p : {INT32_MAX, INT32_MAX - 1}) {
        std::memcpy(b.data() + pos_at, &p, 4);
        std::memcpy(b.data() + rec_pos_at, &p, 4);
        state_reseal(b);
        const std::string e = load_error(mem, b, 1);
        EXPECT_NE(e.find("cell pos: position " + std::to_string(p) + " is outside [0, 2147483645]"), std::string::npos) << e;
        EXPECT_EQ(span(mem, 1), PP(-1, -1));
    }
}

TEST(State, T47_RestoreReplacesDestination) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 5);
    dec(mem, 1, 0, 8);
    state_load(mem, state_save(mem, 0), 1);
    EXPECT_EQ(span(mem, 1), PP(0, 4));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(State, T48_OtherSequencesDoNotChangeABlob) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 5);
    dec(mem, 1, 0, 6);
    const Bytes b = state_save(mem, 1);
    mem.seq_rm(0, -1, -1);
    EXPECT_EQ(state_save(mem, 1), b);
}

TEST(State, T50_FragmentedRestore) {
    HybridMemory mem(small_params(64, 3, true, 0, 16, 2));
    for (int p = 0; p < 6; ++p)
        for (SeqId s = 0; s < 3; ++s) dec(mem, s, p, 1);
    const Bytes b = state_save(mem, 1);
    mem.seq_rm(1, -1, -1);
    state_load(mem, b, 1);
    EXPECT_EQ(span(mem, 1), PP(0, 5));
    EXPECT_EQ(dec(mem, 1, 6, 2), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(State, T72_SaveAfterRollbackRestoresRolledBackState) {
    HybridMemory a(small_params(64, 4, true, 8, 16, 2));
    dec(a, 0, 0, 12);
    ASSERT_TRUE(a.seq_rm(0, 9, -1));
    const Bytes b = state_save(a, 0);
    HybridMemory f(small_params(64, 4, true, 8, 16, 2));
    state_load(f, b, 0);
    EXPECT_EQ(mm(f, 0), PP(8, 8));
    EXPECT_EQ(rec_state(f, 0), rec_state(a, 0));
    EXPECT_EQ(dec(f, 0, 9, 1), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(f), "");
}

TEST(State, T76_PartialOnlyHoldsTheRecurrentState) {
    HybridMemory mem(small_params(64, 4, true, 8, 16, 2));
    dec(mem, 0, 0, 10);
    const Bytes full = state_save(mem, 0);
    const Bytes part = state_save(mem, 0, kPartialOnly);
    EXPECT_LT(part.size(), full.size());
    const auto before = rec_state(mem, 0);
    dec(mem, 1, 0, 3);
    // A partial state must match the attention cells it is read against.
    EXPECT_THROW(state_load(mem, part, 1, kPartialOnly), FileError);
    EXPECT_EQ(span(mem, 1), PP(-1, -1));
    state_load(mem, part, 0, kPartialOnly);
    EXPECT_EQ(rec_state(mem, 0), before);
    EXPECT_NE(load_error(mem, part, 0, 0).find("flags"), std::string::npos);
}

TEST(State, SeparateStreamsRoundTrip) {
    HybridMemory mem(small_params(96, 3, false, 0, 16, 2));
    dec(mem, 0, 0, 5);
    dec(mem, 2, 0, 7);
    const Bytes whole = state_save(mem, -1);
    const Bytes two = state_save(mem, 2);
    mem.clear();
    state_load(mem, whole, -1);
    EXPECT_EQ(state_save(mem, -1), whole);
    state_load(mem, two, 1);
    EXPECT_EQ(span(mem, 1), PP(0, 6));
    for (auto & pc : mem.layout().seq(1).cells) EXPECT_EQ(pc.cell / mem.kv().kv_size(), 1u);
    EXPECT_EQ(dec(mem, 1, 7, 2), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

TEST(State, NoRoomDropsTheSequence) {
    HybridMemory big(small_params(64, 2));
    dec(big, 0, 0, 40);
    const Bytes b = state_save(big, 0);
    HybridMemory small(small_params(64, 2));
    dec(small, 1, 0, 30);
    dec(small, 0, 0, 3);
    const std::string e = load_error(small, b, 0);
    EXPECT_NE(e.find("no room"), std::string::npos) << e;
    EXPECT_EQ(span(small, 0), PP(-1, -1));
    EXPECT_EQ(span(small, 1), PP(0, 29));
}

}  // namespace
}  // namespace offgrid::memory
