// The portable set iteration of memory/seq_set.h against a bit-by-bit scan.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "memory/seq_set.h"

namespace offgrid::memory {
namespace {

std::vector<size_t> members_by_test(const SeqSet & set) {
    std::vector<size_t> out;
    for (size_t s = 0; s < set.size(); ++s) {
        if (set.test(s)) out.push_back(s);
    }
    return out;
}

std::vector<size_t> members_by_iteration(const SeqSet & set) {
    std::vector<size_t> out;
    for (size_t s = seq_begin(set); s < set.size(); s = seq_next(set, s)) out.push_back(s);
    return out;
}

TEST(SeqSet, IterationVisitsExactlyTheMembersInOrder) {
    SeqSet edges;
    for (const size_t s : {0, 1, 62, 63, 64, 65, 127, 128, 191, 192, 254, 255}) edges.set(s);
    EXPECT_EQ(members_by_iteration(edges), members_by_test(edges));
    EXPECT_EQ(members_by_iteration(SeqSet()), std::vector<size_t>{});
    EXPECT_EQ(seq_begin(SeqSet()), static_cast<size_t>(kMaxSeq));
    SeqSet all;
    all.set();
    EXPECT_EQ(members_by_iteration(all), members_by_test(all));
    SeqSet last;
    last.set(kMaxSeq - 1);
    EXPECT_EQ(seq_begin(last), static_cast<size_t>(kMaxSeq - 1));
    EXPECT_EQ(seq_next(last, kMaxSeq - 1), static_cast<size_t>(kMaxSeq));

    std::mt19937 rng(5);
    for (int round = 0; round < 500; ++round) {
        SeqSet set;
        const int n = static_cast<int>(rng() % 12);
        for (int i = 0; i < n; ++i) set.set(rng() % kMaxSeq);
        ASSERT_EQ(members_by_iteration(set), members_by_test(set)) << set.to_string();
        for (size_t from = 0; from <= static_cast<size_t>(kMaxSeq); from += 1 + rng() % 40) {
            size_t expected = from;
            while (expected < static_cast<size_t>(kMaxSeq) && !set.test(expected)) ++expected;
            ASSERT_EQ(next_seq_from(set, from), expected) << from;
        }
    }
}

}  // namespace
}  // namespace offgrid::memory
