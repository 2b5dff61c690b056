// Small shared vocabulary of the memory: sequence sets, the "clean" staleness sentinel and the half-open range
// normalisation every sequence operation uses (memory.md 0.3).
#pragma once

#include <bit>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "memory/plan.h"

namespace offgrid::memory {

using SeqSet = std::bitset<kMaxSeq>;

inline constexpr Pos kPosInf = std::numeric_limits<Pos>::max();

// (p0, p1) -> [p0, p1): a negative p0 means 0, a negative p1 means "to infinity".
inline std::pair<Pos, Pos> normalize_range(Pos p0, Pos p1) {
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = kPosInf;
    return {p0, p1};
}

// The lowest sequence id of `set` at or after `from`, or kMaxSeq when there is none. Portable C++ (no library
// extensions): the set is read 64 bits at a time, so a sparse set costs kMaxSeq / 64 word tests.
inline size_t next_seq_from(const SeqSet & set, size_t from) {
    static_assert(kMaxSeq % 64 == 0, "whole 64-bit words");
    constexpr size_t top = kMaxSeq - 64;
    for (size_t base = from & ~size_t{63}; base < static_cast<size_t>(kMaxSeq); base += 64) {
        // Bits [base, base + 64) moved to [0, 64): the left shift drops those above, the right shift those below.
        uint64_t word = ((set << (top - base)) >> top).to_ullong();
        if (base < from) word &= ~uint64_t{0} << (from - base);
        if (word) return base + static_cast<size_t>(std::countr_zero(word));
    }
    return kMaxSeq;
}
// Iterating a set: for (size_t s = seq_begin(set); s < kMaxSeq; s = seq_next(set, s)).
inline size_t seq_begin(const SeqSet & set) { return next_seq_from(set, 0); }
inline size_t seq_next(const SeqSet & set, size_t s) { return next_seq_from(set, s + 1); }

// The first (lowest) sequence id of a non-empty set.
inline SeqId first_seq(const SeqSet & set) {
    for (int s = 0; s < kMaxSeq; ++s)
        if (set.test(s)) return s;
    return -1;
}

}  // namespace offgrid::memory
