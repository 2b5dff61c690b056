// Section-10 scenarios of memory.md that the other test files do not cover yet, each checked against OUR
// behaviour. Where we deliberately differ from the reference (appendix A fixes, refused partial copies, our own
// state format), the comment says so and why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "memory/state_io.h"
#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;
using PP = std::pair<Pos, Pos>;
using Bytes = std::vector<uint8_t>;

uint32_t u32_at(const Bytes & b, size_t off) {
    uint32_t v;
    std::memcpy(&v, b.data() + off, 4);
    return v;
}
int32_t i32_at(const Bytes & b, size_t off) {
    int32_t v;
    std::memcpy(&v, b.data() + off, 4);
    return v;
}

// Our state header, as docs/memory.md "State format" lists it: magic, version, kind, flags, source seq id, then
// 17 shape fields (streams, cells per stream, n_seq_max, attention layers, k width, v width, idx width, idx
// parts, type_k, type_v, recurrent layers, conv floats, ssm floats, ple floats, n_rs_seq, kpool, by_order).
// Then the header's CRC-32C and three sections (attention, recurrent, indexer), each framed by a u64 size and a
// u32 CRC-32C of its body.
constexpr size_t kHeaderBytes = 5 * 4 + 17 * 4;
constexpr size_t kShapeAt = 20;
constexpr size_t kFrame = 8 + 4;
constexpr size_t kAttentionAt = kHeaderBytes + 4 + kFrame;  // the attention section's body

// A pure recurrent memory (model class R): no attention or indexer rows, one state per sequence.
MemoryParams recurrent_only(uint32_t n_rs_seq = 0) {
    MemoryParams p = small_params(64, 4, true, n_rs_seq, 16, 0);
    std::erase_if(p.shape.layers, [](const LayerCache & l) { return l.attention(); });
    return p;
}

// T11: the reference shares cells [2, 5) of seq 0 with seq 2. Here copies are whole-sequence only (the seed's
// rule: a partial copy would make seq 2's pools group other cells behind rep rows seq 0 also uses), so a partial
// copy throws and nothing changes.
TEST(Scenario, T11_PartialCopyRefusedNothingChanges) {
    for (bool recurrent : {false, true}) {
        HybridMemory mem(small_params(64, 4, true, 0, 16, 2, true, recurrent));
        dec(mem, 0, 0, 10);
        EXPECT_THROW(mem.seq_cp(0, 2, 2, 5), Error);
        EXPECT_EQ(span(mem, 2), PP(-1, -1));
        EXPECT_EQ(span(mem, 0), PP(0, 9));
        EXPECT_EQ(mem.kv().stream(0).used(), 10u);
        // The whole copy the reference would give for [0, inf) works.
        mem.seq_cp(0, 2);
        EXPECT_EQ(span(mem, 2), PP(0, 9));
        EXPECT_EQ(mem.kv().stream(0).used(), 10u);  // shared, not duplicated
        EXPECT_EQ(check_contents(mem), "");
    }
}

// T33: separate streams. As the reference, a sequence state writes a cell count for every stream (0 for the
// others) and the records and rows of the sequence's own stream only.
TEST(Scenario, T33_SequenceStateOfASeparateStream) {
    HybridMemory mem(small_params(96, 3, false, 0, 16, 0, true, false));
    dec(mem, 0, 0, 3);
    dec(mem, 1, 0, 8);
    const Bytes b = state_save(mem, 1);
    EXPECT_EQ(u32_at(b, kShapeAt), 3u);       // n_stream
    EXPECT_EQ(u32_at(b, kShapeAt + 4), 32u);  // cells per stream
    EXPECT_EQ(i32_at(b, 16), 1);              // source sequence
    EXPECT_EQ(u32_at(b, kAttentionAt), 0u);   // stream 0: none of seq 0's cells
    ASSERT_EQ(u32_at(b, kAttentionAt + 4), 8u);
    // The first record is position 0 of seq 1 (pos, shift, x, y, token, n_seq, seq).
    const size_t rec = kAttentionAt + 8;
    EXPECT_EQ(i32_at(b, rec), 0);
    EXPECT_EQ(i32_at(b, rec + 16), 100);
    EXPECT_EQ(u32_at(b, rec + 20), 1u);
    EXPECT_EQ(i32_at(b, rec + 24), 1);
    // Then 8 K rows and 8 V rows of 2 floats, stream 2's count 0, one recurrent record without planes (an
    // attention-only memory still books each sequence's last position there), 8 indexer rows of 4 floats.
    const size_t stream2 = rec + 8 * 28 + 8 * 8 + 8 * 8;
    EXPECT_EQ(u32_at(b, stream2), 0u);
    const size_t rec_section = stream2 + 4 + kFrame;
    EXPECT_EQ(u32_at(b, rec_section), 1u);
    EXPECT_EQ(i32_at(b, rec_section + 4), 1);   // seq 1
    EXPECT_EQ(i32_at(b, rec_section + 8), 7);  // its last position
    EXPECT_EQ(b.size(), rec_section + 4 + 12 + kFrame + 8 * 16);
    // An empty sequence: header, three zero cell counts, zero recurrent states.
    EXPECT_EQ(state_save(mem, 2).size(), kHeaderBytes + 4 + 3 * kFrame + 4 * 4);
}

// T34: the reference's blob starts with its own magic and records; ours with "OGMS", version 4, kind 1 and the
// shape, then per cell (pos, shift, x, y, token, n_seq, seq ids).
TEST(Scenario, T34_SequenceStateHeaderAndRecords) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 3);
    const Bytes b = state_save(mem, 0);
    EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "OGMS");
    EXPECT_EQ(u32_at(b, 4), 4u);   // version
    EXPECT_EQ(u32_at(b, 8), 1u);   // kind: one sequence
    EXPECT_EQ(u32_at(b, 12), 0u);  // flags
    EXPECT_EQ(i32_at(b, 16), 0);   // source sequence
    const uint32_t shape[17] = {1, 64, 4, 1, 2, 2, 2, 2, (uint32_t)tensor::ElemType::F32, (uint32_t)tensor::ElemType::F32,
                                1, 2, 1, 0, 0, 0, 1};
    for (size_t k = 0; k < 17; ++k) EXPECT_EQ(u32_at(b, kShapeAt + 4 * k), shape[k]) << "shape field " << k;
    ASSERT_EQ(u32_at(b, kAttentionAt), 3u);  // cell count
    for (int c = 0; c < 3; ++c) {
        const size_t at = kAttentionAt + 4 + 28 * c;
        EXPECT_EQ(i32_at(b, at), c);              // pos
        EXPECT_EQ(i32_at(b, at + 4), 0);          // pending shift
        EXPECT_EQ(i32_at(b, at + 8), c);          // x (a text token's 2-D position is its position)
        EXPECT_EQ(i32_at(b, at + 12), c);         // y
        EXPECT_EQ(i32_at(b, at + 16), 100 + c);   // token
        EXPECT_EQ(u32_at(b, at + 20), 1u);        // one sequence
        EXPECT_EQ(i32_at(b, at + 24), 0);         // seq 0
    }
}

// T35: the size of a sequence state follows from the documented format, independently of the code:
// header + checksum + 3 section frames + [count + c records + L (K and V rows)] + [count + per state (seq, pos,
// snaps, planes)] + [the sequence's staleness mark + indexer rows].
TEST(Scenario, T35_SequenceStateSize) {
    for (uint32_t n_rs : {0u, 3u}) {
        HybridMemory mem(small_params(64, 4, true, n_rs, 16, 2));
        dec(mem, 0, 0, 3);
        const size_t c = 3, layers = 1, k_row = 2 * 4, v_row = 2 * 4, idx_row = 2 * 2 * 4;
        const size_t record = 7 * 4;                      // one sequence per cell
        const size_t plane_floats = 2 + 1;                // conv 2 + ssm 1, one recurrent layer, no PLE
        const size_t expected = kHeaderBytes + 4 + 3 * kFrame + 4 + c * record + layers * c * (k_row + v_row) + 4 +
                                (12 + (1 + n_rs) * plane_floats * 4) + 4 + layers * c * idx_row;
        EXPECT_EQ(state_save(mem, 0).size(), expected) << "n_rs_seq " << n_rs;
    }
}

// T36: a whole state of the same memory differs from the sequence state only in kind and source sequence.
TEST(Scenario, T36_WholeStateHeader) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 3);
    const Bytes whole = state_save(mem, -1);
    Bytes one = state_save(mem, 0);
    EXPECT_EQ(u32_at(whole, 8), 0u);   // kind: whole
    EXPECT_EQ(i32_at(whole, 16), -1);  // no source sequence
    ASSERT_EQ(whole.size(), one.size());
    std::memcpy(one.data() + 8, whole.data() + 8, 4);
    std::memcpy(one.data() + 16, whole.data() + 16, 4);
    std::memcpy(one.data() + kHeaderBytes, whole.data() + kHeaderBytes, 4);  // and so the header's checksum
    EXPECT_EQ(one, whole);
}

// T42: the reference refuses a whole state of another architecture. Ours refuses a whole state made with another
// shape, naming the field, and changes nothing.
TEST(Scenario, T42_WholeStateOfAnotherShapeRefusedUnchanged) {
    HybridMemory mem(small_params());
    dec(mem, 0, 0, 3);
    dec(mem, 1, 0, 5);
    Bytes b = state_save(mem, -1);
    const uint32_t other_layers = 2;
    std::memcpy(b.data() + kShapeAt + 12, &other_layers, 4);  // n_attn_layers
    const Bytes before = state_save(mem, -1);
    try {
        state_load(mem, b, -1);
        FAIL() << "a damaged header was accepted";
    } catch (const FileError & e) {
        EXPECT_NE(std::string(e.what()).find("header: checksum mismatch"), std::string::npos) << e.what();
    }
    state_reseal(b);  // as if another memory had written it
    try {
        state_load(mem, b, -1);
        FAIL() << "a state of another shape was accepted";
    } catch (const FileError & e) {
        EXPECT_NE(std::string(e.what()).find("n_attn_layers"), std::string::npos) << e.what();
    }
    EXPECT_EQ(state_save(mem, -1), before);
    EXPECT_EQ(span(mem, 1), PP(0, 4));
}

// T58: the reference clamps n_rs_seq to 0 for a model that cannot roll back. A memory without recurrent layers
// has nothing to roll back: n_rs_seq adds no rows and partial removals work as in a plain KV cache.
TEST(Scenario, T58_SnapshotsWithoutRecurrentLayersAreInert) {
    HybridMemory mem(small_params(64, 4, true, 8, 16, 0, true, false));
    EXPECT_FALSE(mem.has_recurrent());
    for (auto & e : mem.breakdown()) {
        if (e.cache == "recurrent") {
            EXPECT_EQ(e.bytes, 0u) << e.part;
        }
    }
    dec(mem, 0, 0, 12);
    EXPECT_TRUE(mem.seq_rm(0, 2, -1));  // 10 tokens: more than n_rs_seq, fine without recurrent state
    EXPECT_EQ(mm(mem, 0), PP(0, 1));
}

// T59-T62: a pure recurrent memory (model R).
TEST(Scenario, T59_PureRecurrentPositions) {
    HybridMemory mem(recurrent_only());
    EXPECT_EQ(dec(mem, 0, 0, 12), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 0), PP(11, 11));
    EXPECT_EQ(check_contents(mem), "");
}

TEST(Scenario, T60_PureRecurrentTailRemovalRefused) {
    HybridMemory mem(recurrent_only());
    dec(mem, 0, 0, 12);
    EXPECT_FALSE(mem.seq_rm(0, 9, -1));
    EXPECT_EQ(mm(mem, 0), PP(11, 11));
    EXPECT_EQ(check_contents(mem), "");
}

// The reference says true and does nothing (Q3); a "successful" removal that removes nothing is a lie, so ours
// refuses it.
TEST(Scenario, T61_FixQ3_PureRecurrentMiddleRemovalRefused) {
    HybridMemory mem(recurrent_only());
    dec(mem, 0, 0, 12);
    EXPECT_FALSE(mem.seq_rm(0, 2, 5));
    EXPECT_EQ(mm(mem, 0), PP(11, 11));
    EXPECT_EQ(span(mem, 0), PP(0, 11));
}

// The reference refuses removing everything from a recurrent memory (Q2); ours removes it.
TEST(Scenario, T62_FixQ2_PureRecurrentRemoveEverything) {
    HybridMemory mem(recurrent_only());
    dec(mem, 0, 0, 12);
    dec(mem, 1, 0, 3);
    EXPECT_TRUE(mem.seq_rm(-1, -1, -1));
    EXPECT_EQ(mm(mem, 0), PP(-1, -1));
    EXPECT_EQ(mm(mem, 1), PP(-1, -1));
    EXPECT_FALSE(mem.recurrent().present(0));
    EXPECT_EQ(dec(mem, 0, 0, 2), DecodeStatus::Ok);
    EXPECT_EQ(check_contents(mem), "");
}

// T63: the reference's recurrent section has one cell at pos 11. Ours: the attention books still list the 12
// positions (no rows: zero layers), then one recurrent state (seq 0, pos 11, no snapshots, its planes).
TEST(Scenario, T63_PureRecurrentState) {
    HybridMemory mem(recurrent_only());
    dec(mem, 0, 0, 12);
    const Bytes b = state_save(mem, 0);
    EXPECT_EQ(u32_at(b, kShapeAt + 12), 0u);  // no attention layers
    ASSERT_EQ(u32_at(b, kAttentionAt), 12u);
    const size_t rec_at = kAttentionAt + 4 + 12 * 28 + kFrame;  // no K / V rows with zero layers
    EXPECT_EQ(u32_at(b, rec_at), 1u);        // one recurrent state
    EXPECT_EQ(i32_at(b, rec_at + 4), 0);     // seq 0
    EXPECT_EQ(i32_at(b, rec_at + 8), 11);    // its last position
    EXPECT_EQ(u32_at(b, rec_at + 12), 0u);   // no valid snapshots
    EXPECT_EQ(b.size(), rec_at + 16 + 3 * 4 + kFrame);  // and an empty indexer section
}

// T64: the reference's pure recurrent memory splits sequentially and so refuses tokens shared by two fresh
// sequences (decode 1). Ours shares the state copy-on-write in a unified memory, so the batch is accepted; with
// one stream per sequence it is refused as NoSpace, as the reference's "1".
TEST(Scenario, T64_SharedTokensForFreshSequencesOfAPureRecurrentMemory) {
    Batch b;
    b.tokens = {1, 2};
    b.pos = {0, 1};
    b.seqs = {{2, 3}, {2, 3}};
    HybridMemory mem(recurrent_only());
    EXPECT_EQ(dec_batch(mem, b), DecodeStatus::Ok);
    EXPECT_EQ(mm(mem, 2), PP(1, 1));
    EXPECT_EQ(mm(mem, 3), PP(1, 1));
    EXPECT_EQ(rec_state(mem, 2), rec_state(mem, 3));
    EXPECT_EQ(check_contents(mem), "");
    MemoryParams p = recurrent_only();
    p.unified = false;
    HybridMemory split(p);
    EXPECT_EQ(dec_batch(split, b), DecodeStatus::NoSpace);
    EXPECT_EQ(mm(split, 2), PP(-1, -1));
}

// T66: the reference's pure recurrent partial-only blob equals the full one. Ours keeps the attention books in
// the full state (they say which positions the state absorbed), so the partial-only state is smaller by exactly
// the attention section, and both restore the same recurrent state.
TEST(Scenario, T66_PureRecurrentPartialOnlyState) {
    HybridMemory mem(recurrent_only());
    dec(mem, 0, 0, 12);
    const Bytes full = state_save(mem, 0);
    const Bytes part = state_save(mem, 0, kPartialOnly);
    EXPECT_EQ(full.size() - part.size(), 4 + 12 * 28u);
    const auto before = rec_state(mem, 0);
    state_load(mem, part, 0, kPartialOnly);
    EXPECT_EQ(rec_state(mem, 0), before);
    state_load(mem, full, 0);
    EXPECT_EQ(rec_state(mem, 0), before);
    EXPECT_EQ(mm(mem, 0), PP(11, 11));
}

// T71: after a rollback the memory is the one of a context that never saw the dropped tokens: same recurrent
// state, same attention cells (positions and tokens, so the model computes the same logits).
TEST(Scenario, T71_RollbackEqualsNeverDecoded) {
    HybridMemory a(small_params(64, 4, true, 8, 16, 2));
    HybridMemory ref(small_params(64, 4, true, 8, 16, 2));
    dec(a, 0, 0, 12);
    ASSERT_TRUE(a.seq_rm(0, 9, -1));
    dec(ref, 0, 0, 9);
    EXPECT_EQ(rec_state(a, 0), rec_state(ref, 0));
    EXPECT_EQ(dec(a, 0, 9, 1, {77}), DecodeStatus::Ok);
    EXPECT_EQ(dec(ref, 0, 9, 1, {77}), DecodeStatus::Ok);
    EXPECT_EQ(rec_state(a, 0), rec_state(ref, 0));
    // Cells, K / V rows and indexer rows alike. (The snapshot planes the last ubatch did not write differ, and
    // are never read: only written snapshots can be rolled back to.)
    const Bytes sa = state_save(a, 0), sr = state_save(ref, 0);
    ASSERT_EQ(sa.size(), sr.size());
    const size_t c = 10, attention_end = kAttentionAt + 4 + c * 28 + c * 16, idx_bytes = c * 16;
    EXPECT_TRUE(std::equal(sa.begin(), sa.begin() + attention_end, sr.begin()));
    EXPECT_TRUE(std::equal(sa.end() - idx_bytes, sa.end(), sr.end() - idx_bytes));
    EXPECT_EQ(check_contents(a), "");
}

// T78: the reference keeps the advanced positions of an aborted decode (Q10: mm = (13,13) with n_rs_seq 0,
// (9,9) with 8 only because of the rollback). Ours undoes the whole call with either setting.
TEST(Scenario, T78_FixQ10_AbortedDecodeUndone) {
    for (uint32_t n_rs : {0u, 8u}) {
        HybridMemory mem(small_params(64, 4, true, n_rs, 16, 2));
        dec(mem, 0, 0, 10);
        const Bytes before = state_save(mem, -1);
        Batch b;
        for (int i = 0; i < 4; ++i) {
            b.tokens.push_back(300 + i);
            b.pos.push_back(10 + i);
        }
        ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
        fake_forward(mem.apply(), mem);  // the model ran, then the caller aborted
        mem.undo();
        EXPECT_EQ(mm(mem, 0), PP(9, 9)) << "n_rs_seq " << n_rs;
        EXPECT_EQ(state_save(mem, -1), before) << "n_rs_seq " << n_rs;
    }
}

}  // namespace
}  // namespace offgrid::memory
