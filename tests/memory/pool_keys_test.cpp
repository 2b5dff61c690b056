// Storage::pool_keys with f16 keys of model widths: the element-major blocks (PoolKeyTable) hold every pooled key
// of the rep rows, element for element, as pools are added a few at a time (partial blocks), after a restore-like
// whole copy (full blocks: the SSE2 transposes of pool_keys.cpp), and after a partial removal.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "memory_fixture.h"

namespace offgrid::memory {
namespace {

using namespace test;

// Writes random f16 halves into the pooled part of every new pool's rep row, as the model's pooling does.
void write_new_pools(const Plan & plan, HybridMemory & mem, std::mt19937 & rng) {
    const size_t part = mem.kv().idx_row_bytes(0) / 2;
    for (const NewPool & np : plan.new_pools) {
        auto * h = reinterpret_cast<uint16_t *>(static_cast<uint8_t *>(mem.idx_row(0, np.rep)) + part);
        for (size_t e = 0; e < part / 2; ++e) h[e] = static_cast<uint16_t>(rng() & 0x7bff);  // finite halves
    }
}

void append(HybridMemory & mem, size_t n, Pos & pos, std::mt19937 & rng) {
    Batch b;
    for (size_t i = 0; i < n; ++i) {
        b.tokens.push_back(static_cast<Token>(i % 50));
        b.pos.push_back(pos++);
    }
    ASSERT_EQ(mem.begin(b).status, DecodeStatus::Ok);
    while (mem.has_next()) write_new_pools(mem.apply(), mem, rng);
    mem.finish();
}

TEST(PoolKeys, F16BlocksHoldEveryKey) {
    for (uint32_t width : {128u, 24u, 20u}) {  // 20: not a multiple of 8 (element by element)
        MemoryParams p = small_params(2048, 1, true, 0, 512, 4, true, false);
        p.shape.layers[0].idx_width = width;
        p.shape.type_k = p.shape.type_v = p.shape.type_idx = tensor::ElemType::F16;
        HybridMemory mem(p);
        std::mt19937 rng(width);
        Pos pos = 0;
        // A long prompt first (whole blocks at once when pool_keys is first called), then a few at a time.
        append(mem, 300, pos, rng);
        ASSERT_EQ(check_pool_keys(mem), "") << "width " << width << " after the prompt";
        for (size_t n : {1u, 3u, 4u, 7u, 13u, 64u, 2u}) {
            append(mem, n, pos, rng);
            (void)mem.pool_keys(0, 0);
            ASSERT_EQ(check_pool_keys(mem), "") << "width " << width << " after " << n << " more";
        }
        // A partial removal relayouts the sequence: the copy is rebuilt from the rows.
        ASSERT_TRUE(mem.seq_rm(0, 100, -1));
        pos = 100;
        append(mem, 90, pos, rng);
        ASSERT_EQ(check_pool_keys(mem), "") << "width " << width << " after a removal";
        const PoolKeyTable t = mem.pool_keys(0, 0);
        EXPECT_EQ(t.dim, width);
        EXPECT_EQ(t.elem, 2u);
    }
}

}  // namespace
}  // namespace offgrid::memory
