// Small shared vocabulary of the memory: sequence sets, the "clean" staleness sentinel and the half-open range
// normalisation every sequence operation uses (memory.md 0.3).
#pragma once

#include <bitset>
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

// The first (lowest) sequence id of a non-empty set.
inline SeqId first_seq(const SeqSet & set) {
    for (int s = 0; s < kMaxSeq; ++s)
        if (set.test(s)) return s;
    return -1;
}

}  // namespace offgrid::memory
