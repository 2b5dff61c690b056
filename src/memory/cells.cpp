#include "memory/cells.h"

namespace offgrid::memory {

CellStream::CellStream(uint32_t size)
    : pos_(size, -1), seq_(size), shift_(size, 0), ext_(size), pool_(std::make_unique<NodePool>(size)) {
    for (auto & sc : seq_pos_) sc = SeqCells(PoolAllocator<std::pair<Pos, uint32_t>>(pool_.get()));
}

void CellStream::index_remove(uint32_t i) {
    const SeqSet & set = seq_[i];
    for (size_t s = seq_begin(set); s < set.size(); s = seq_next(set, s)) seq_pos_[s].erase({pos_[i], i});
}

void CellStream::index_add(uint32_t i) {
    const SeqSet & set = seq_[i];
    for (size_t s = seq_begin(set); s < set.size(); s = seq_next(set, s)) seq_pos_[s].insert({pos_[i], i});
}

void CellStream::place(uint32_t i, Pos p, const SeqSet & seqs, const CellExt & ext) {
    place_with_shift(i, p, seqs, ext, 0);
}

void CellStream::place_with_shift(uint32_t i, Pos p, const SeqSet & seqs, const CellExt & ext, Pos shift) {
    pos_[i] = p;
    seq_[i] = seqs;
    ext_[i] = ext;
    shift_[i] = shift;
    if (shift != 0) has_shift_ = true;
    ++used_;
    index_add(i);
}

void CellStream::free(uint32_t i) {
    index_remove(i);
    pos_[i] = -1;
    seq_[i].reset();
    shift_[i] = 0;
    ext_[i] = CellExt{};
    --used_;
}

bool CellStream::seq_remove(uint32_t i, SeqId s) {
    if (!seq_[i].test(s)) return false;
    seq_pos_[s].erase({pos_[i], i});
    seq_[i].reset(s);
    if (seq_[i].none()) {
        pos_[i] = -1;
        shift_[i] = 0;
        ext_[i] = CellExt{};
        --used_;
        return true;
    }
    return false;
}

void CellStream::seq_add(uint32_t i, SeqId s) {
    if (seq_[i].test(s)) return;
    seq_[i].set(s);
    seq_pos_[s].insert({pos_[i], i});
}

bool CellStream::seq_keep(uint32_t i, SeqId s) {
    if (seq_[i].test(s)) {
        if (seq_[i].count() > 1) {
            index_remove(i);
            seq_[i].reset();
            seq_[i].set(s);
            index_add(i);
        }
        return false;
    }
    if (seq_[i].any()) {
        free(i);
        return true;
    }
    return false;
}

bool CellStream::pos_add(uint32_t i, Pos d) {
    index_remove(i);
    pos_[i] += d;
    shift_[i] += d;
    has_shift_ = true;
    if (pos_[i] < 0) {
        pos_[i] = -1;
        seq_[i].reset();
        shift_[i] = 0;
        ext_[i] = CellExt{};
        --used_;
        return true;
    }
    index_add(i);
    return false;
}

void CellStream::pos_div(uint32_t i, int d) {
    index_remove(i);
    const Pos old = pos_[i];
    pos_[i] = old / d;
    shift_[i] += pos_[i] - old;
    has_shift_ = true;
    index_add(i);
}

void CellStream::reset() {
    for (uint32_t i = 0; i < size(); ++i) {
        pos_[i] = -1;
        seq_[i].reset();
        shift_[i] = 0;
        ext_[i] = CellExt{};
    }
    for (auto & sp : seq_pos_) sp.clear();
    used_ = 0;
    head = 0;
    has_shift_ = false;
}

void CellStream::reset_shift() {
    for (auto & s : shift_) s = 0;
    has_shift_ = false;
}

}  // namespace offgrid::memory
