// The k-pool layout of the indexer cache (the seed's design): per sequence its cells in (position,
// cell) order and its complete pools. Pools are runs of kpool entries: consecutive entries in sequence order
// (by order), or kpool consecutive positions starting where (pos - pos_min) % kpool == 0 (by position). A pool's
// pooled key lives in the row of its last member, the rep cell.
//
// The layout grows incrementally on append (only new entries are scanned) and is rebuilt for a sequence only when
// an edit changed its cells. Staleness says from which position a sequence's stored pooled keys may be wrong.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "memory/cells.h"
#include "memory/plan.h"
#include "memory/seq_set.h"

namespace offgrid::memory {

struct SeqLayout {
    std::vector<PosCell> cells;   // global cells
    std::vector<uint32_t> pools;  // start index of each complete pool in `cells`
    std::vector<uint32_t> reps;   // rep (last member's global cell) of each pool, in step with `pools`
    size_t scan_next = 0;         // where the pool scan resumes
    Pos pos_min = 0;              // the first position when the layout was built (by-position alignment)
    bool operator==(const SeqLayout & o) const { return cells == o.cells && pools == o.pools && reps == o.reps; }
};

class KPoolLayout {
public:
    KPoolLayout(uint32_t kpool, bool by_order);

    uint32_t kpool() const { return kpool_; }
    bool by_order() const { return by_order_; }
    const SeqLayout & seq(SeqId s) const { return seqs_[s]; }

    // From scratch, from a stream's ordered index of s (local cells, offset by `base` to global cells).
    void rebuild(SeqId s, const SeqCells & cells, uint32_t base);
    // Appends entries that all sort after the sequence's last one (sorted among themselves). Returns false,
    // changing nothing, when they do not: the caller then rebuilds.
    bool append(SeqId s, const std::vector<PosCell> & fresh);
    void clear_seq(SeqId s) { seqs_[s] = SeqLayout{}; }

    // Staleness: pools of s whose last member's position is >= stale(s) must be pooled again.
    Pos stale(SeqId s) const { return stale_[s]; }
    void mark_stale(SeqId s, Pos p) { stale_[s] = std::min(stale_[s], std::max<Pos>(p, 0)); }
    void set_stale(SeqId s, Pos p) { stale_[s] = std::max<Pos>(p, 0); }  // a restore's saved mark
    void mark_all_stale(Pos p) {
        for (SeqId s = 0; s < kMaxSeq; ++s) mark_stale(s, p);
    }
    const std::array<Pos, kMaxSeq> & stale_all() const { return stale_; }
    void set_stale_all(const std::array<Pos, kMaxSeq> & st) { stale_ = st; }
    void clear_stale() { stale_.fill(kPosInf); }

    // Per token of s at (pos, cell): its rank in the sequence, pools visible to it and its tail cells (the token
    // itself first, then older ones).
    size_t rank(SeqId s, Pos pos, uint32_t cell) const;
    uint32_t visible_pools(SeqId s, Pos pos, size_t rank) const;
    void tail(SeqId s, Pos pos, size_t rank, std::vector<uint32_t> & out) const;
    // Index of the pool containing entry `rank`, or -1.
    int64_t pool_of(SeqId s, size_t rank) const;

private:
    void scan(SeqLayout & sq) const;

    uint32_t kpool_;
    bool by_order_;
    std::array<SeqLayout, kMaxSeq> seqs_;
    std::array<Pos, kMaxSeq> stale_;
};

}  // namespace offgrid::memory
