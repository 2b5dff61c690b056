// Cell metadata of one stream (memory.md section 1): per cell a position (-1 = empty), a sequence set, a pending
// shift and extra data (2-D position, token id); per sequence an ordered index of (position, local cell).
// The K/V/indexer rows live in the caches; a cell here is only books.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "memory/node_pool.h"
#include "memory/plan.h"
#include "memory/seq_set.h"

namespace offgrid::memory {

struct CellExt {
    Pos x = 0;
    Pos y = 0;
    Token tok = -1;
    bool operator==(const CellExt &) const = default;
};

// (position, local cell) pairs of one sequence, in order. The nodes come from the stream's NodePool.
using SeqCells = std::set<std::pair<Pos, uint32_t>, std::less<std::pair<Pos, uint32_t>>,
                          PoolAllocator<std::pair<Pos, uint32_t>>>;

// The per-sequence indexes take their nodes from one NodePool per stream, in chunks of `size` nodes (one per cell:
// enough while every cell holds one sequence), so placing and freeing cells in a steady decode step allocates
// nothing. A stream is moved, never copied (its indexes point into its own pool).
class CellStream {
public:
    explicit CellStream(uint32_t size);
    CellStream(CellStream &&) = default;  // the pool moves with its indexes and keeps its address
    CellStream(const CellStream &) = delete;
    CellStream & operator=(const CellStream &) = delete;
    CellStream & operator=(CellStream &&) = delete;

    uint32_t size() const { return (uint32_t)pos_.size(); }
    uint32_t used() const { return used_; }
    bool is_empty(uint32_t i) const { return pos_[i] < 0; }
    Pos pos(uint32_t i) const { return pos_[i]; }
    const SeqSet & seqs(uint32_t i) const { return seq_[i]; }
    Pos shift(uint32_t i) const { return shift_[i]; }
    const CellExt & ext(uint32_t i) const { return ext_[i]; }
    bool has_shift() const { return has_shift_; }

    const SeqCells & seq_cells(SeqId s) const { return seq_pos_[s]; }
    Pos seq_pos_min(SeqId s) const { return seq_pos_[s].empty() ? -1 : seq_pos_[s].begin()->first; }
    Pos seq_pos_max(SeqId s) const { return seq_pos_[s].empty() ? -1 : seq_pos_[s].rbegin()->first; }

    // Fills an empty cell.
    void place(uint32_t i, Pos p, const SeqSet & seqs, const CellExt & ext);
    // Sets a cell's full metadata (whole-state restore and cross-stream copy); the cell must be empty.
    void place_with_shift(uint32_t i, Pos p, const SeqSet & seqs, const CellExt & ext, Pos shift);
    // Frees a non-empty cell, whatever its sequences.
    void free(uint32_t i);
    // Removes s from the cell; frees it when no sequence is left. Returns true when freed.
    bool seq_remove(uint32_t i, SeqId s);
    // Adds s to a non-empty cell.
    void seq_add(uint32_t i, SeqId s);
    // Keeps only s in the cell; frees a cell holding other sequences only. Returns true when freed.
    bool seq_keep(uint32_t i, SeqId s);
    // Moves the cell by d for every sequence in it; frees it when the position turns negative (true).
    bool pos_add(uint32_t i, Pos d);
    // Divides the position; the pending shift grows by new - old (the reference's sign defect Q1 fixed).
    void pos_div(uint32_t i, int d);

    void reset();
    void reset_shift();

    uint32_t head = 0;  // where the next slot search starts

private:
    void index_remove(uint32_t i);
    void index_add(uint32_t i);

    std::vector<Pos> pos_;
    std::vector<SeqSet> seq_;
    std::vector<Pos> shift_;
    std::vector<CellExt> ext_;
    std::unique_ptr<NodePool> pool_;  // before seq_pos_: destroyed after the indexes that use it
    std::array<SeqCells, kMaxSeq> seq_pos_;
    uint32_t used_ = 0;
    bool has_shift_ = false;
};

}  // namespace offgrid::memory
