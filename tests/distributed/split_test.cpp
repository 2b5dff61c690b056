// The layer split: parsing --split, balancing by weight bytes and capacity, and the fit check.
#include <gtest/gtest.h>

#include "common/error.h"
#include "distributed/split.h"

namespace offgrid::distributed {
namespace {

WeightBytes bytes(std::vector<uint64_t> layers, uint64_t before = 0, uint64_t after = 0) {
    WeightBytes w;
    w.layer = std::move(layers);
    w.before = before;
    w.after = after;
    return w;
}

TEST(LayerSplit, ParsesContiguousRangesInRankOrder) {
    const Split s = parse_split("0-11,12-23", 24, 2);
    ASSERT_EQ(s.ranges.size(), 2u);
    EXPECT_EQ(s.ranges[0], (LayerRange{0, 12}));
    EXPECT_EQ(s.ranges[1], (LayerRange{12, 24}));
    EXPECT_EQ(s.describe(), "0-11,12-23");
    EXPECT_EQ(parse_split("0-3", 4, 1).describe(), "0-3");
}

TEST(LayerSplit, RefusesGapsOverlapsAndWrongCounts) {
    for (const char * bad : {"0-10,12-23", "0-12,12-23", "1-23", "0-11", "0-11,12-24", "0-11;12-23", "a-3,4-23",
                             "0-11,12-", "5-4,5-23", "0-11,12-23,"}) {
        EXPECT_THROW(parse_split(bad, 24, 2), Error) << bad;
    }
    EXPECT_THROW(parse_split("0-11,12-23", 24, 3), Error);
    try {
        parse_split("0-10,12-23", 24, 2);
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("should begin at layer 11"), std::string::npos) << e.what();
    }
}

TEST(LayerSplit, AutoBalancesEqualLayersEvenly) {
    const Split s = auto_split(bytes(std::vector<uint64_t>(24, 100)), {1000, 1000});
    EXPECT_EQ(s.describe(), "0-11,12-23");
    const Split t = auto_split(bytes(std::vector<uint64_t>(24, 100)), {1000, 1000, 1000});
    EXPECT_EQ(t.describe(), "0-7,8-15,16-23");
}

TEST(LayerSplit, AutoCountsTheEmbeddingsAndTheHead) {
    // The head (after) weighs four layers: the last rank takes four layers fewer.
    const Split s = auto_split(bytes(std::vector<uint64_t>(12, 100), 0, 400), {1, 1});
    EXPECT_EQ(s.describe(), "0-7,8-11");
    const Split t = auto_split(bytes(std::vector<uint64_t>(12, 100), 400, 0), {1, 1});
    EXPECT_EQ(t.describe(), "0-3,4-11");
}

TEST(LayerSplit, AutoFollowsCapacity) {
    // Rank 1 has three times rank 0's memory: it takes three quarters of the layers.
    const Split s = auto_split(bytes(std::vector<uint64_t>(16, 10)), {100, 300});
    EXPECT_EQ(s.describe(), "0-3,4-15");
}

TEST(LayerSplit, AutoNeedsALayerPerRank) {
    EXPECT_THROW(auto_split(bytes({1, 1}), {1, 1, 1}), Error);
    EXPECT_THROW(auto_split(bytes({1, 1}), {1, 0}), Error);
}

TEST(LayerSplit, FitCheckNamesTheRankThatCannotHoldItsShare) {
    const WeightBytes w = bytes({100, 100, 100, 100}, 50, 70);
    const Split s = parse_split("0-1,2-3", 4, 2);
    EXPECT_EQ(rank_bytes(w, s, 0), 250u);
    EXPECT_EQ(rank_bytes(w, s, 1), 270u);
    EXPECT_EQ(check_fits(w, s, {250, 270}), "");
    EXPECT_EQ(check_fits(w, s, {0, 0}), "");  // unknown capacity
    const std::string why = check_fits(w, s, {1000, 269});
    EXPECT_NE(why.find("rank 1 cannot hold its share: layers 2-3 take 270 bytes"), std::string::npos) << why;
}

}  // namespace
}  // namespace offgrid::distributed
