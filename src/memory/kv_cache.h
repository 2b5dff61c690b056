// The attention KV cache (memory.md sections 2-4): streams of cells, per full-attention layer K and V rows, and
// the indexer rows [raw key | pooled key] that live in exactly the same cells. There is one set of cell books
// for both, so the attention and indexer caches can never disagree about which token a cell holds.
//
// Cells are addressed globally (stream * kv_size + local cell), as plan.h promises.
//
// With a sliding window (window.h) the slot search may also take a cell whose key its sequence can never see
// again (memory.md 3.3-3.5). Every cell change a decode call makes is journaled, rows included where a key is
// lost, so a dry run and a failed call roll back exactly (the reference's Q18 fixed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "memory/batch.h"
#include "memory/cells.h"
#include "memory/huge_pages.h"
#include "memory/plan.h"
#include "memory/window.h"

namespace offgrid::memory {

class StateWriter;
class StateReader;

// Bytes per element of a cache row type (F32 or F16); throws offgrid::Error naming `field` otherwise.
uint32_t cache_elem_bytes(tensor::ElemType type, const char * field);
// Bytes of a row of `width` elements: F32, F16, or Q8_0 (blocks of 32 as f16 scale + 32 int8, width a multiple
// of 32); throws offgrid::Error naming `field` otherwise.
uint32_t cache_row_bytes(tensor::ElemType type, uint32_t width, const char * field);

class KvCache {
public:
    KvCache(const CacheShape & shape, uint32_t kv_size, uint32_t n_stream, const Window & window = {});

    uint32_t kv_size() const { return kv_size_; }
    uint32_t n_stream() const { return (uint32_t)streams_.size(); }
    uint32_t n_cells() const { return kv_size_ * n_stream(); }
    uint32_t stream_of(SeqId s) const { return n_stream() == 1 ? 0 : (uint32_t)s; }
    const CellStream & stream(uint32_t st) const { return streams_[st]; }
    CellStream & stream(uint32_t st) { return streams_[st]; }
    uint32_t global(uint32_t st, uint32_t local) const { return st * kv_size_ + local; }
    const Window & window() const { return window_; }

    // A cell the slot search may take: empty or, with a window, held by one sequence alone, outside the window
    // of that sequence's next position and not its last position (a sequence never loses its newest token, so
    // its pos_max, which batches continue from, never moves by another sequence's decode).
    bool usable(uint32_t st, uint32_t local) const;

    // Dry run over all ubatches of a batch: the global cell of every ubatch token (in ubatch order). Each ubatch
    // is placed in turn, so later ones see the cells (and window reuse) of earlier ones, then everything is
    // rolled back: the cache is exactly as before, on success and on failure. False (and why) when there is no room.
    bool find_slots(const ValidBatch & batch, const std::vector<Ubatch> & ubatches,
                    std::vector<std::vector<uint32_t>> & cells, std::string & why);
    // Writes the books of one ubatch into the cells find_slots chose; the next search starts after them. A cell
    // still holding an out-of-window key is taken from its owner, and the owner's older keys up to that position
    // go too (its cells stay one run of positions, as the reference keeps them). Every change is journaled, with
    // the rows of cells that lose their key when `save_rows`. Returns the sequences that lost cells.
    SeqSet place(const ValidBatch & batch, const Ubatch & ub, const std::vector<uint32_t> & cells,
                 bool save_rows = true);
    // Free cells for `count` cells restored into stream st: usable cells in ring order from the head; taken
    // out-of-window cells are freed from their owners as place() does (not journaled: a restore is not a call).
    // False, changing nothing, when there are too few. `lost` gets the sequences that lost cells.
    bool take_cells(uint32_t st, size_t count, std::vector<uint32_t> & out, SeqSet & lost);
    // The journal of cell changes made by place(): rollback(mark, heads) undoes the changes made after `mark`
    // (newest first, rows restored) and sets the heads; journal_clear() commits everything.
    size_t journal_size() const { return journal_.size(); }
    void rollback(size_t mark, const std::vector<uint32_t> & heads);
    void journal_clear();
    std::vector<uint32_t> heads() const;

    // Sequence operations; each returns the sequences whose cell lists changed. Ranges are half-open after
    // normalize_range. Callers have checked the sequence ids.
    SeqSet seq_rm(SeqId s, Pos p0, Pos p1);  // s = -1: every sequence
    SeqSet seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1);
    SeqSet seq_keep(SeqId s);
    SeqSet seq_add(SeqId s, Pos p0, Pos p1, Pos delta);
    SeqSet seq_div(SeqId s, Pos p0, Pos p1, int d);
    Pos seq_pos_min(SeqId s) const { return streams_[stream_of(s)].seq_pos_min(s); }
    Pos seq_pos_max(SeqId s) const { return streams_[stream_of(s)].seq_pos_max(s); }
    SeqSet present() const;  // sequences holding at least one cell
    void clear(bool zero_data);

    // Pending position shifts: rotate(global cell, old position, new position) for every shifted cell, then
    // the shifts are forgotten.
    bool has_shift() const;
    void apply_shifts(const std::function<void(uint32_t, Pos, Pos)> & rotate);

    // Row storage.
    uint32_t k_row_bytes() const { return k_row_bytes_; }
    uint32_t v_row_bytes() const { return v_row_bytes_; }
    uint32_t idx_row_bytes() const { return idx_row_bytes_; }
    uint32_t n_layers() const { return (uint32_t)k_.size(); }
    uint8_t * k_row(uint32_t layer, uint32_t cell) { return k_[layer].data() + (size_t)cell * k_row_bytes_; }
    // Null when the model stores no V rows (v_width 0: the model reads values from its K rows).
    uint8_t * v_row(uint32_t layer, uint32_t cell) {
        return v_.empty() ? nullptr : v_[layer].data() + (size_t)cell * v_row_bytes_;
    }
    uint8_t * idx_row(uint32_t layer, uint32_t cell) { return idx_[layer].data() + (size_t)cell * idx_row_bytes_; }
    bool has_idx() const { return !idx_.empty(); }
    uint64_t k_bytes() const { return (uint64_t)k_row_bytes_ * n_cells() * k_.size(); }
    uint64_t v_bytes() const { return (uint64_t)v_row_bytes_ * n_cells() * v_.size(); }
    bool has_v() const { return !v_.empty(); }
    uint64_t idx_bytes() const { return (uint64_t)idx_row_bytes_ * n_cells() * idx_.size(); }

    // --- state sections (memory/state_io.h; kv_state.cpp). Parsing changes nothing and throws FileError.
    struct StateCell {
        Pos pos, shift;
        CellExt ext;
        SeqSet seqs;
        uint32_t cell;  // global cell: where it was (save) / goes (restore, set by the caller)
    };
    struct StateStream {
        std::vector<StateCell> cells;
        std::vector<const uint8_t *> k, v, idx;  // restore: per layer the rows of all cells, back to back, in the state
    };
    // The cells a save of `seq` covers (-1: all), in stream order then cell order; a sequence save lists seq alone.
    std::vector<StateStream> state_cells(SeqId seq) const;
    // Attention section: per stream the cell count and records (pos, shift, x, y, token, n_seq, seq ids), then per
    // layer the K rows and the V rows. Indexer section: per stream and layer the rows of the same cells.
    void write_attention(const std::vector<StateStream> & streams, StateWriter & w) const;
    void write_indexer(const std::vector<StateStream> & streams, StateWriter & w) const;
    std::vector<StateStream> read_attention(StateReader & r, SeqId seq, uint32_t n_seq_max) const;
    void read_indexer(StateReader & r, std::vector<StateStream> & streams) const;
    // REQUIRES: every StateCell::cell names an empty cell. Writes the books and rows there.
    void restore_cells(const std::vector<StateStream> & streams);

private:
    void copy_rows(uint32_t dst_cell, uint32_t src_cell);

    // One cell's books before a change; rows_at indexes journal_rows_ when its rows were saved.
    struct CellChange {
        uint32_t cell;
        Pos pos, shift;
        SeqSet seqs;
        CellExt ext;
        size_t rows_at;
        bool has_rows;
    };
    void record(uint32_t cell, bool save_rows);
    // (stream, owner) -> the highest position taken from that owner by window reuse.
    using Taken = std::map<std::pair<uint32_t, SeqId>, Pos>;
    void take_from_owner(uint32_t st, uint32_t local, Taken & taken);
    // Drops each owner from its cells up to the highest position taken from it (its cells stay one run).
    void purge(const Taken & taken, bool journal, bool save_rows);
    bool search(const ValidBatch & batch, const Ubatch & ub, std::vector<uint32_t> & cells, std::string & why) const;

    uint32_t kv_size_;
    Window window_;
    std::vector<CellStream> streams_;
    std::vector<CellChange> journal_;
    std::vector<uint8_t> journal_rows_;
    uint32_t k_row_bytes_, v_row_bytes_, idx_row_bytes_;
    using RowArray = std::vector<uint8_t, HugePageAllocator<uint8_t>>;  // memory/huge_pages.h
    std::vector<RowArray> k_, v_, idx_;
};

}  // namespace offgrid::memory
