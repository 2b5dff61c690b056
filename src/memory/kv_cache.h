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
#include <span>
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
    // `held`: one flag per shape.layers entry (empty: all held). An attention layer not held keeps its number and
    // its declared widths (state sections carry its rows: zeros on save, skipped on restore) but no storage: its
    // row bytes read 0, so every row operation passes it by.
    KvCache(const CacheShape & shape, uint32_t kv_size, uint32_t n_stream, const Window & window = {},
            const std::vector<bool> & held = {});

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

    // Dry run over all ubatches of a batch: the global cell of every token of the split, in the split's order
    // (ubatch u's cells are cells[u.first .. u.first + u.size())). Each ubatch is placed in turn, so later ones
    // see the cells (and window reuse) of earlier ones, then everything is rolled back: the cache is exactly as
    // before, on success and on failure. False (and why) when there is no room.
    bool find_slots(const ValidBatch & batch, const Split & split, std::vector<uint32_t> & cells, std::string & why);
    // Writes the books of one ubatch into the cells find_slots chose; the next search starts after them. A cell
    // still holding an out-of-window key is taken from its owner, and the owner's older keys up to that position
    // go too (its cells stay one run of positions, as the reference keeps them). Every change is journaled, with
    // the rows of cells that lose their key when `save_rows`. Returns the sequences that lost cells.
    SeqSet place(const ValidBatch & batch, const Ubatch & ub, std::span<const uint32_t> cells, bool save_rows = true);
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
    void heads(std::vector<uint32_t> & out) const;  // the same into out (its capacity is reused)
    // Room for a call of n tokens: the journal of a call without window reuse then takes no heap memory.
    void reserve_journal(size_t n) { journal_.reserve(n); }

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

    // Row storage, per attention layer (widths are the layer's own: CacheShape::attn).
    uint32_t k_row_bytes(uint32_t layer) const { return k_row_bytes_[layer]; }
    uint32_t v_row_bytes(uint32_t layer) const { return v_row_bytes_[layer]; }      // 0: no V rows
    uint32_t idx_row_bytes(uint32_t layer) const { return idx_row_bytes_[layer]; }  // 0: no indexer rows
    uint32_t n_layers() const { return (uint32_t)k_.size(); }
    bool held(uint32_t layer) const { return k_row_bytes_[layer] > 0; }
    // Gives a layer its storage (zeroed) or takes it away; the cell books do not change.
    void hold(uint32_t layer, bool held);
    uint8_t * k_row(uint32_t layer, uint32_t cell) { return k_[layer].data() + (size_t)cell * k_row_bytes_[layer]; }
    // Null when the layer stores no V rows (v_width 0: the model reads values from its K rows).
    uint8_t * v_row(uint32_t layer, uint32_t cell) {
        return v_row_bytes_[layer] == 0 ? nullptr : v_[layer].data() + (size_t)cell * v_row_bytes_[layer];
    }
    // Null when the layer stores no indexer rows.
    uint8_t * idx_row(uint32_t layer, uint32_t cell) {
        return idx_row_bytes_[layer] == 0 ? nullptr : idx_[layer].data() + (size_t)cell * idx_row_bytes_[layer];
    }
    uint64_t k_bytes() const { return sum_bytes(k_row_bytes_); }
    uint64_t v_bytes() const { return sum_bytes(v_row_bytes_); }
    uint64_t idx_bytes() const { return sum_bytes(idx_row_bytes_); }

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
    uint64_t sum_bytes(const std::vector<uint32_t> & row_bytes) const {
        uint64_t n = 0;
        for (uint32_t b : row_bytes) n += (uint64_t)b * n_cells();
        return n;
    }

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
    // Per (stream, owner): the highest position taken from that owner by window reuse. Kept in `taken_`, a
    // buffer reused by every place() and take_cells() call, sorted by (stream, owner) before the purge.
    struct Taken {
        uint32_t st;
        SeqId owner;
        Pos upto;
    };
    void take_from_owner(uint32_t st, uint32_t local);
    // Drops each owner in taken_ from its cells up to the highest position taken from it (its cells stay one run).
    void purge(bool journal, bool save_rows);
    bool search(const ValidBatch & batch, const Ubatch & ub, std::span<uint32_t> cells, std::string & why) const;

    uint32_t kv_size_;
    Window window_;
    std::vector<CellStream> streams_;
    std::vector<CellChange> journal_;
    std::vector<uint8_t> journal_rows_;
    // Working buffers of one operation (their capacity is kept from call to call): the window reuse's owners,
    // the cells an owner loses, the heads before a dry run.
    std::vector<Taken> taken_;
    std::vector<uint32_t> older_;
    std::vector<uint32_t> saved_heads_;
    std::vector<uint32_t> k_row_bytes_, v_row_bytes_, idx_row_bytes_;  // per layer; 0: the layer has none (or is not held)
    std::vector<uint32_t> decl_k_, decl_v_, decl_idx_;  // per layer, as declared (held or not): the state's layout
    using RowArray = std::vector<uint8_t, HugePageAllocator<uint8_t>>;  // memory/huge_pages.h
    std::vector<RowArray> k_, v_, idx_;  // per layer (empty where the layer has no such rows)
};

}  // namespace offgrid::memory
