// The k-pool layout on its own: pool grouping in both modes, incremental append equal to a rebuild, per-token
// visibility and tails.
#include <gtest/gtest.h>

#include "memory/kpool_layout.h"

namespace offgrid::memory {
namespace {

SeqCells cells_at(std::vector<Pos> positions) {
    SeqCells sc;
    for (uint32_t i = 0; i < positions.size(); ++i) sc.insert({positions[i], i});
    return sc;
}

TEST(KPoolLayout, ByPositionNeedsAlignedConsecutiveRuns) {
    KPoolLayout lay(4, false);
    // Positions 3..6 (aligned to pos_min 3), a gap at 7, 8..12: runs start where (p - 3) % 4 == 0.
    lay.rebuild(0, cells_at({3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14}), 100);
    const SeqLayout & sq = lay.seq(0);
    ASSERT_EQ(sq.pools.size(), 2u);
    EXPECT_EQ(sq.cells[sq.pools[0]].pos, 3);
    EXPECT_EQ(sq.cells[sq.pools[1]].pos, 11);  // 7..10 lacks 7: the next aligned run starts at 11
    EXPECT_EQ(sq.cells[0].cell, 100u);        // global cells: base + local
    // Position 12 sees the first pool only (the second ends at 14).
    EXPECT_EQ(lay.visible_pools(0, 12, lay.rank(0, 12, 108)), 1u);
    std::vector<uint32_t> tail;
    lay.tail(0, 12, lay.rank(0, 12, 108), tail);
    EXPECT_EQ(tail, (std::vector<uint32_t>{108, 107}));  // (12 - 3 + 1) % 4 = 2 positions: 12, 11
}

TEST(KPoolLayout, ByOrderIgnoresPositionsAndGaps) {
    KPoolLayout lay(3, true);
    lay.rebuild(0, cells_at({0, 5, 6, 9, 20, 21, 22}), 0);
    EXPECT_EQ(lay.seq(0).pools, (std::vector<uint32_t>{0, 3}));
    EXPECT_EQ(lay.pool_of(0, 4), 1);
    EXPECT_EQ(lay.pool_of(0, 6), -1);  // the tail
    std::vector<uint32_t> tail;
    lay.tail(0, 22, 6, tail);
    EXPECT_EQ(tail, (std::vector<uint32_t>{6}));
    EXPECT_EQ(lay.visible_pools(0, 22, 6), 2u);
    EXPECT_EQ(lay.visible_pools(0, 9, 3), 1u);
}

TEST(KPoolLayout, IncrementalAppendEqualsRebuild) {
    for (bool by_order : {true, false}) {
        for (uint32_t kpool : {1u, 2u, 3u, 4u, 8u, 16u}) {
            std::vector<Pos> pos;
            for (Pos p = 2, i = 0; i < 70; ++i) {
                pos.push_back(p);
                p += (i % 11 == 5) ? 2 : 1;  // a few gaps
                if (i % 17 == 3) pos.push_back(p - 1);  // and duplicates
            }
            KPoolLayout inc(kpool, by_order), full(kpool, by_order);
            size_t done = 0;
            for (size_t step = 1; done < pos.size(); ++step) {
                std::vector<PosCell> fresh;
                for (size_t k = 0; k < step && done < pos.size(); ++k, ++done) fresh.push_back({pos[done], (uint32_t)done});
                ASSERT_TRUE(inc.append(0, fresh));
            }
            SeqCells all;
            for (uint32_t i = 0; i < pos.size(); ++i) all.insert({pos[i], i});
            full.rebuild(0, all, 0);
            EXPECT_TRUE(inc.seq(0) == full.seq(0)) << "kpool " << kpool << " by_order " << by_order;
        }
    }
}

TEST(KPoolLayout, AppendOutOfOrderRefused) {
    KPoolLayout lay(2, true);
    ASSERT_TRUE(lay.append(0, std::vector<PosCell>{{5, 1}, {6, 2}}));
    EXPECT_FALSE(lay.append(0, std::vector<PosCell>{{4, 3}}));
    EXPECT_EQ(lay.seq(0).cells.size(), 2u);
}

TEST(KPoolLayout, StalenessKeepsTheMinimum) {
    KPoolLayout lay(2, true);
    EXPECT_EQ(lay.stale(3), kPosInf);
    lay.mark_stale(3, 10);
    lay.mark_stale(3, 20);
    EXPECT_EQ(lay.stale(3), 10);
    lay.mark_stale(3, -5);
    EXPECT_EQ(lay.stale(3), 0);
    lay.clear_stale();
    EXPECT_EQ(lay.stale(3), kPosInf);
}

}  // namespace
}  // namespace offgrid::memory
