// NodePool / PoolAllocator (memory/node_pool.h): a std::set over the pool keeps its contents exact, hands freed
// nodes out again, and grows by whole chunks only when more nodes are alive at once than ever before.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>

#include "memory/cells.h"
#include "memory/node_pool.h"

namespace offgrid::memory {
namespace {

using Key = std::pair<Pos, uint32_t>;
using PooledSet = std::set<Key, std::less<Key>, PoolAllocator<Key>>;

TEST(NodePool, SetOverThePoolEqualsAPlainSet) {
    NodePool pool(16);
    PooledSet pooled{PoolAllocator<Key>(&pool)};
    std::set<Key> plain;
    std::mt19937 rng(3);
    for (int step = 0; step < 5000; ++step) {
        const Key k{(Pos)(rng() % 64), (uint32_t)(rng() % 4)};
        if (rng() % 3 == 0) {
            EXPECT_EQ(pooled.erase(k), plain.erase(k));
        } else {
            EXPECT_EQ(pooled.insert(k).second, plain.insert(k).second);
        }
        ASSERT_TRUE(std::equal(pooled.begin(), pooled.end(), plain.begin(), plain.end()));
    }
    // At most 256 distinct keys alive at once: 16 chunks of 16 nodes at the most.
    EXPECT_LE(pool.n_chunks(), 16u);
}

TEST(NodePool, FreedNodesAreReusedWithoutGrowing) {
    NodePool pool(8);
    PooledSet s{PoolAllocator<Key>(&pool)};
    for (uint32_t i = 0; i < 8; ++i) s.insert({(Pos)i, i});
    EXPECT_EQ(pool.n_chunks(), 1u);
    for (int round = 0; round < 100; ++round) {
        s.erase(s.begin());
        s.insert({(Pos)(8 + round), 0});
    }
    EXPECT_EQ(pool.n_chunks(), 1u);  // never more than 8 nodes alive
    s.insert({1000, 0});
    EXPECT_EQ(pool.n_chunks(), 2u);  // the ninth grows by one chunk
}

TEST(NodePool, StreamsMoveWithTheirIndexes) {
    std::vector<CellStream> streams;
    streams.emplace_back(4);
    streams[0].place(1, 7, SeqSet().set(2), CellExt{});
    streams.emplace_back(4);  // may move the first stream: its index must still work
    streams[0].place(2, 8, SeqSet().set(2), CellExt{});
    EXPECT_EQ(streams[0].seq_pos_min(2), 7);
    EXPECT_EQ(streams[0].seq_pos_max(2), 8);
    EXPECT_TRUE(streams[0].seq_remove(1, 2));
    EXPECT_EQ(streams[0].seq_cells(2).size(), 1u);
}

}  // namespace
}  // namespace offgrid::memory
