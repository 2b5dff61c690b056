#include "memory/kpool_layout.h"

#include <algorithm>

namespace offgrid::memory {

KPoolLayout::KPoolLayout(uint32_t kpool, bool by_order) : kpool_(kpool), by_order_(by_order) { stale_.fill(kPosInf); }

void KPoolLayout::scan(SeqLayout & sq) const {
    if (kpool_ == 0) return;
    size_t j = sq.scan_next;
    const size_t n = sq.cells.size();
    if (by_order_) {
        for (; j + kpool_ <= n; j += kpool_) {
            sq.pools.push_back((uint32_t)j);
            sq.reps.push_back(sq.cells[j + kpool_ - 1].cell);
        }
    } else {
        while (j + kpool_ <= n) {
            const Pos p0 = sq.cells[j].pos;
            bool ok = (int64_t)(p0 - sq.pos_min) % kpool_ == 0;
            for (uint32_t k = 1; ok && k < kpool_; ++k) ok = sq.cells[j + k].pos == p0 + (Pos)k;
            if (ok) {
                sq.pools.push_back((uint32_t)j);
                sq.reps.push_back(sq.cells[j + kpool_ - 1].cell);
                j += kpool_;
            } else {
                ++j;
            }
        }
    }
    sq.scan_next = j;
}

void KPoolLayout::make_room(SeqLayout & sq) const {
    if (sq.cells.capacity() < capacity_) sq.cells.reserve(capacity_);
    if (kpool_ > 0 && sq.pools.capacity() < capacity_ / kpool_ + 1) {
        sq.pools.reserve(capacity_ / kpool_ + 1);
        sq.reps.reserve(capacity_ / kpool_ + 1);
    }
}

void KPoolLayout::clear_seq(SeqId s) {
    SeqLayout & sq = seqs_[s];
    sq.cells.clear();
    sq.pools.clear();
    sq.reps.clear();
    sq.scan_next = 0;
    sq.pos_min = 0;
}

void KPoolLayout::rebuild(SeqId s, const SeqCells & cells, uint32_t base) {
    clear_seq(s);
    SeqLayout & sq = seqs_[s];
    if (!cells.empty()) make_room(sq);
    sq.cells.reserve(cells.size());
    for (auto & [p, c] : cells) sq.cells.push_back(PosCell{p, base + c});
    sq.pos_min = sq.cells.empty() ? 0 : sq.cells.front().pos;
    scan(sq);
}

bool KPoolLayout::append(SeqId s, std::span<const PosCell> fresh) {
    SeqLayout & sq = seqs_[s];
    if (fresh.empty()) return true;
    auto less = [](const PosCell & a, const PosCell & b) { return a.pos != b.pos ? a.pos < b.pos : a.cell < b.cell; };
    if (!sq.cells.empty() && !less(sq.cells.back(), fresh.front())) return false;
    if (sq.cells.empty()) sq.pos_min = fresh.front().pos;
    make_room(sq);
    sq.cells.insert(sq.cells.end(), fresh.begin(), fresh.end());
    scan(sq);
    return true;
}

size_t KPoolLayout::rank(SeqId s, Pos pos, uint32_t cell) const {
    const auto & c = seqs_[s].cells;
    auto it = std::lower_bound(c.begin(), c.end(), PosCell{pos, cell}, [](const PosCell & a, const PosCell & b) {
        return a.pos != b.pos ? a.pos < b.pos : a.cell < b.cell;
    });
    return (size_t)(it - c.begin());
}

uint32_t KPoolLayout::visible_pools(SeqId s, Pos pos, size_t rank) const {
    const SeqLayout & sq = seqs_[s];
    if (kpool_ == 0) return 0;
    if (by_order_) return (uint32_t)std::min<size_t>(sq.pools.size(), (rank + 1) / kpool_);
    // pools whose last member's position is <= pos
    auto it = std::upper_bound(sq.pools.begin(), sq.pools.end(), pos,
                               [&](Pos p, uint32_t j) { return p < sq.cells[j + kpool_ - 1].pos; });
    return (uint32_t)(it - sq.pools.begin());
}

void KPoolLayout::tail(SeqId s, Pos pos, size_t rank, std::vector<uint32_t> & out) const {
    const SeqLayout & sq = seqs_[s];
    if (kpool_ == 0) return;
    if (by_order_) {
        const size_t n_tail = (rank + 1) % kpool_;
        for (size_t k = 0; k < n_tail; ++k) out.push_back(sq.cells[rank - k].cell);
        return;
    }
    const int64_t n_tail = ((int64_t)pos - sq.pos_min + 1) % kpool_;
    for (int64_t k = 0; k < n_tail; ++k) {
        const Pos pt = pos - (Pos)k;
        auto it = std::lower_bound(sq.cells.begin(), sq.cells.end(), pt,
                                   [](const PosCell & a, Pos p) { return a.pos < p; });
        if (it != sq.cells.end() && it->pos == pt) out.push_back(it->cell);
    }
}

int64_t KPoolLayout::pool_of(SeqId s, size_t rank) const {
    const SeqLayout & sq = seqs_[s];
    if (kpool_ == 0 || sq.pools.empty()) return -1;
    if (by_order_) {
        const size_t k = rank / kpool_;
        return k < sq.pools.size() ? (int64_t)k : -1;
    }
    auto it = std::upper_bound(sq.pools.begin(), sq.pools.end(), (uint32_t)rank);
    if (it == sq.pools.begin()) return -1;
    --it;
    return rank < *it + kpool_ ? (int64_t)(it - sq.pools.begin()) : -1;
}

}  // namespace offgrid::memory
