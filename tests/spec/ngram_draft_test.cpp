#include <gtest/gtest.h>

#include "runtime/ngram_draft.h"

namespace offgrid::runtime {
namespace {

TEST(NgramDraft, LongestKeyFirstMostRecentOccurrence) {
    // ... 1 2 3 [4 5 6] ... 9 2 3 [7 8] ... 2 3 | last = 3
    const std::vector<int32_t> h{1, 2, 3, 4, 5, 6, 9, 2, 3, 7, 8, 1, 2};
    // Key (1, 2, 3): the occurrence at the start, then 4 5 6 9.
    EXPECT_EQ(ngram_draft(h, 3, 2, 4, 4), (std::vector<int32_t>{4, 5, 6, 9}));
    // Keys of at most 2 tokens: (2, 3) most recently followed by 7 8.
    EXPECT_EQ(ngram_draft(h, 3, 2, 2, 4), (std::vector<int32_t>{7, 8, 1, 2}));
    EXPECT_EQ(ngram_draft(h, 3, 2, 2, 1), (std::vector<int32_t>{7}));
}

TEST(NgramDraft, NothingWithoutAMatchOrRoom) {
    EXPECT_TRUE(ngram_draft({1, 2, 3}, 4, 1, 3, 4).empty());
    EXPECT_TRUE(ngram_draft({}, 4, 1, 3, 4).empty());
    EXPECT_TRUE(ngram_draft({4, 5, 4}, 4, 1, 3, 0).empty());
    // The draft may run into the key itself (a repeat of period 1).
    EXPECT_EQ(ngram_draft({7, 7, 7}, 7, 1, 3, 3), (std::vector<int32_t>{7}));
}

}  // namespace
}  // namespace offgrid::runtime
