// The memory builds from a per-layer declaration (CacheShape::layers): every layer gets rows of its own widths,
// layers without a cache get none, and the state carries each layer's rows (and refuses another layout).
#include <gtest/gtest.h>

#include <cstring>

#include "common/error.h"
#include "memory/state_io.h"
#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;
using Bytes = std::vector<uint8_t>;

// Six model layers, no two alike: the fixture's attention layer first (fake_forward writes attention layer 0
// and recurrent layer 0), then a K-only attention layer, a layer with no cache, a state-only recurrent layer and
// an attention layer with a three-part indexer.
MemoryParams mixed_params() {
    MemoryParams p = small_params(64, 4, true, 1, 16, 2);
    p.shape.layers = {
        LayerCache::attention_rows(2, 2, 2, 2),  // attention 0 (fixture)
        LayerCache::recurrent_rows(2, 1),        // recurrent 0 (fixture)
        LayerCache::attention_rows(8, 0),        // attention 1: K rows only
        LayerCache{},                            // keeps nothing
        LayerCache::recurrent_rows(0, 7),        // recurrent 1: state only
        LayerCache::attention_rows(4, 6, 3, 3),  // attention 2
    };
    p.shape.row_floats = 3;
    return p;
}

// Fills every row of layers past the fixture's with a value of (layer, position, byte), so rows that move keep
// telling where they came from.
uint8_t mark(uint32_t layer, Pos pos, size_t i) { return static_cast<uint8_t>(layer * 61 + pos * 7 + i); }

void fill_rows(HybridMemory & mem, SeqId s) {
    const KvCache & kv = mem.kv();
    const uint32_t st = kv.stream_of(s);
    for (auto & [pos, local] : kv.stream(st).seq_cells(s)) {
        const uint32_t cell = kv.global(st, local);
        for (uint32_t l = 1; l < 3; ++l) {
            auto * k = static_cast<uint8_t *>(mem.k_row(l, cell));
            for (size_t i = 0; i < kv.k_row_bytes(l); ++i) k[i] = mark(l, pos, i);
            if (auto * v = static_cast<uint8_t *>(mem.v_row(l, cell)))
                for (size_t i = 0; i < kv.v_row_bytes(l); ++i) v[i] = mark(l + 10, pos, i);
            if (auto * x = static_cast<uint8_t *>(mem.idx_row(l, cell)))
                for (size_t i = 0; i < kv.idx_row_bytes(l); ++i) x[i] = mark(l + 20, pos, i);
        }
    }
    const uint32_t row = mem.recurrent().row(0, mem.recurrent().slot_of(s));
    float * state = mem.ssm_state(1, row);
    for (int i = 0; i < 7; ++i) state[i] = static_cast<float>(100 + i);
    float * r = mem.row_state(row);
    for (int i = 0; i < 3; ++i) r[i] = static_cast<float>(200 + i);
}

// "" when the rows of s's cells below position `end` and s's recurrent rows hold what fill_rows wrote.
std::string check_rows(HybridMemory & mem, SeqId s, Pos end = kPosInf) {
    const KvCache & kv = mem.kv();
    const uint32_t st = kv.stream_of(s);
    for (auto & [pos, local] : kv.stream(st).seq_cells(s)) {
        if (pos >= end) continue;
        const uint32_t cell = kv.global(st, local);
        for (uint32_t l = 1; l < 3; ++l) {
            const auto * k = static_cast<const uint8_t *>(mem.k_row(l, cell));
            for (size_t i = 0; i < kv.k_row_bytes(l); ++i)
                if (k[i] != mark(l, pos, i)) return "K row of layer " + std::to_string(l) + " pos " + std::to_string(pos);
            if (const auto * v = static_cast<const uint8_t *>(mem.v_row(l, cell)))
                for (size_t i = 0; i < kv.v_row_bytes(l); ++i)
                    if (v[i] != mark(l + 10, pos, i)) return "V row of layer " + std::to_string(l);
            if (const auto * x = static_cast<const uint8_t *>(mem.idx_row(l, cell)))
                for (size_t i = 0; i < kv.idx_row_bytes(l); ++i)
                    if (x[i] != mark(l + 20, pos, i)) return "indexer row of layer " + std::to_string(l);
        }
    }
    const uint32_t row = mem.recurrent().row(0, mem.recurrent().slot_of(s));
    for (int i = 0; i < 7; ++i)
        if (mem.ssm_state(1, row)[i] != static_cast<float>(100 + i)) return "state of recurrent layer 1";
    for (int i = 0; i < 3; ++i)
        if (mem.row_state(row)[i] != static_cast<float>(200 + i)) return "row state";
    return "";
}

TEST(LayerCaches, EachLayerGetsRowsOfItsOwnWidths) {
    HybridMemory mem(mixed_params());
    EXPECT_EQ(mem.params().shape.n_attn_layers(), 3u);
    EXPECT_EQ(mem.params().shape.n_recr_layers(), 2u);
    const KvCache & kv = mem.kv();
    ASSERT_EQ(kv.n_layers(), 3u);
    EXPECT_EQ(kv.k_row_bytes(0), 2u * 4);
    EXPECT_EQ(kv.k_row_bytes(1), 8u * 4);
    EXPECT_EQ(kv.k_row_bytes(2), 4u * 4);
    EXPECT_EQ(kv.v_row_bytes(1), 0u);
    EXPECT_EQ(kv.v_row_bytes(2), 6u * 4);
    EXPECT_EQ(kv.idx_row_bytes(0), 2u * 2 * 4);
    EXPECT_EQ(kv.idx_row_bytes(1), 0u);
    EXPECT_EQ(kv.idx_row_bytes(2), 3u * 3 * 4);
    EXPECT_EQ(mem.v_row(1, 0), nullptr);
    EXPECT_EQ(mem.idx_row(1, 0), nullptr);
    EXPECT_EQ(mem.v_rows(1).base, nullptr);
    EXPECT_EQ(mem.idx_rows(1).base, nullptr);
    EXPECT_EQ(mem.idx_rows(2).stride, 3u * 3 * 4);
    EXPECT_EQ(mem.pool_keys(1, 0).base, nullptr);  // no indexer on that layer: no pooled keys
    const uint64_t cells = kv.n_cells();
    EXPECT_EQ(kv.k_bytes(), cells * (2 + 8 + 4) * 4);
    EXPECT_EQ(kv.v_bytes(), cells * (2 + 0 + 6) * 4);
    EXPECT_EQ(kv.idx_bytes(), cells * (4 + 0 + 9) * 4);
    // Per recurrent row: the layers' conv and state floats and the row state, for the live plane and one snapshot.
    EXPECT_EQ(mem.recurrent().slot_floats(), 2u * (2 + 1 + 0 + 7 + 3));
}

TEST(LayerCaches, StateCarriesEveryLayersRows) {
    HybridMemory mem(mixed_params());
    ASSERT_EQ(dec(mem, 0, 0, 9), DecodeStatus::Ok);
    fill_rows(mem, 0);
    ASSERT_EQ(check_rows(mem, 0), "");
    const Bytes b = state_save(mem, 0);
    ASSERT_EQ(dec(mem, 1, 0, 5), DecodeStatus::Ok);  // other cells taken first, so the restore moves the rows
    mem.seq_rm(0, -1, -1);
    state_load(mem, b, 2);
    EXPECT_EQ(check_rows(mem, 2), "");
    EXPECT_EQ(check_contents(mem), "");
    EXPECT_EQ(dec(mem, 2, 9, 3), DecodeStatus::Ok);
    EXPECT_EQ(check_rows(mem, 2, 9), "");  // the new cells changed no older row of any layer
}

TEST(LayerCaches, StateOfAnotherLayoutRefused) {
    HybridMemory a(mixed_params());
    dec(a, 0, 0, 3);
    const Bytes b = state_save(a, 0);
    // The same counts and the same first layer, another width in the last attention layer only.
    MemoryParams p = mixed_params();
    p.shape.layers[5].k_width = 2;
    HybridMemory other(p);
    try {
        state_load(other, b, 0);
        FAIL() << "a state of another layout was accepted";
    } catch (const FileError & e) {
        EXPECT_NE(std::string(e.what()).find("k_width"), std::string::npos) << e.what();
    }
    EXPECT_EQ(other.seq_pos_max(0), -1);
}

// A declaration whose attention layers all agree writes the widths themselves (the format of uniform models is
// the one they always had): attention layers, K, V, indexer width and parts, then the recurrent ones.
TEST(LayerCaches, UniformLayersWriteTheirCommonWidths) {
    MemoryParams p = small_params(64, 4, true, 0, 16, 2);
    p.shape.layers = {LayerCache::attention_rows(2, 2, 2, 2), LayerCache::recurrent_rows(2, 1),
                      LayerCache::attention_rows(2, 2, 2, 2), LayerCache::recurrent_rows(2, 1)};
    HybridMemory mem(p);
    dec(mem, 0, 0, 3);
    const Bytes b = state_save(mem, 0);
    auto field = [&](size_t k) {
        uint32_t v;
        std::memcpy(&v, b.data() + 20 + 4 * k, 4);
        return v;
    };
    EXPECT_EQ(field(3), 2u);   // n_attn_layers
    EXPECT_EQ(field(4), 2u);   // k_width
    EXPECT_EQ(field(5), 2u);   // v_width
    EXPECT_EQ(field(6), 2u);   // idx_width
    EXPECT_EQ(field(7), 2u);   // idx_parts
    EXPECT_EQ(field(10), 2u);  // n_recr_layers
    EXPECT_EQ(field(11), 2u);  // conv_floats
    EXPECT_EQ(field(12), 1u);  // ssm_floats
}

// A layer the memory does not hold (MemoryParams::held, a pipeline rank's other layers) takes no storage and its
// rows are never touched, but it keeps its number and its place in states: a state of the full memory restores
// into the partial one (its rows skipped) and the partial one saves the same layout, zeros in their place.
TEST(LayerCaches, ALayerNotHeldHasNoRowsButKeepsItsPlaceInStates) {
    HybridMemory full(mixed_params());
    ASSERT_EQ(dec(full, 0, 0, 9), DecodeStatus::Ok);
    fill_rows(full, 0);
    const Bytes b = state_save(full, 0);

    MemoryParams pp = mixed_params();
    pp.held = {true, true, false, true, false, true};  // attention layer 1 and recurrent layer 1 not held
    pp.row_state_held = false;
    HybridMemory part(pp);
    const KvCache & kv = part.kv();
    EXPECT_FALSE(kv.held(1));
    EXPECT_TRUE(kv.held(2));
    EXPECT_EQ(kv.k_row_bytes(1), 0u);
    EXPECT_EQ(part.k_rows(1).stride, 0u);
    EXPECT_EQ(kv.k_bytes(), uint64_t{kv.n_cells()} * (2 + 4) * 4);
    EXPECT_FALSE(part.recurrent().held(1));
    EXPECT_EQ(part.recurrent().row_state_bytes(), 0u);
    EXPECT_EQ(part.recurrent().slot_floats(), full.recurrent().slot_floats()) << "the state layout is the declared one";

    state_load(part, b, 0);
    EXPECT_EQ(check_contents(part), "");
    ASSERT_EQ(dec(part, 0, 9, 3), DecodeStatus::Ok);  // the fixture's forward writes layers it holds
    ASSERT_EQ(dec(full, 0, 9, 3), DecodeStatus::Ok);
    const Bytes from_part = state_save(part, 0);
    ASSERT_EQ(from_part.size(), state_save(full, 0).size()) << "a partial memory saves the declared layout";

    // Back into a full memory: the held layers' rows are the marks, the others zeros.
    HybridMemory back(mixed_params());
    state_load(back, from_part, 0);
    const uint32_t st = back.kv().stream_of(0);
    for (auto & [pos, local] : back.kv().stream(st).seq_cells(0)) {
        const uint32_t cell = back.kv().global(st, local);
        const auto * k1 = static_cast<const uint8_t *>(back.k_row(1, cell));
        for (size_t i = 0; i < back.kv().k_row_bytes(1); ++i) EXPECT_EQ(k1[i], 0) << "pos " << pos;
        if (pos >= 9) continue;
        const auto * k2 = static_cast<const uint8_t *>(back.k_row(2, cell));
        for (size_t i = 0; i < back.kv().k_row_bytes(2); ++i) ASSERT_EQ(k2[i], mark(2, pos, i)) << "pos " << pos;
    }

    // Taking every layer in and letting them go again.
    part.hold_layers({}, true);
    EXPECT_TRUE(part.kv().held(1));
    EXPECT_EQ(part.kv().k_bytes(), full.kv().k_bytes());
    EXPECT_EQ(static_cast<const uint8_t *>(part.k_row(1, 0))[0], 0);
    part.hold_layers(pp.held, false);
    EXPECT_FALSE(part.kv().held(1));
    EXPECT_EQ(part.recurrent().row_state_bytes(), 0u);
    EXPECT_EQ(check_contents(part), "");
}

TEST(LayerCaches, BadDeclarationsRefused) {
    MemoryParams p = small_params();
    p.shape.layers = {LayerCache{0, 4, 0, 0, 0, 0}};  // V rows without K rows
    EXPECT_THROW(HybridMemory{p}, Error);
    p.shape.layers = {LayerCache::attention_rows(2, 2, 2, 1)};  // an indexer row without a pooled part
    EXPECT_THROW(HybridMemory{p}, Error);
    p.shape.layers = {LayerCache::recurrent_rows(2, kMaxCacheWidth)};  // refused before anything is allocated
    EXPECT_THROW(HybridMemory{p}, Error);
    p = small_params(64, 4, true, 0, 16, 2);
    p.shape.layers = {LayerCache::attention_rows(2, 2)};  // pools with no indexer anywhere
    EXPECT_THROW(HybridMemory{p}, Error);
}

}  // namespace
}  // namespace offgrid::memory
