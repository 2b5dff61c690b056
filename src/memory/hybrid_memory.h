// The hybrid memory the runtime uses: attention KV cache, recurrent state cache and indexer (k-pool) cache that
// agree cell for cell, one batch split for all three, and per ubatch a Plan for the model (plan.h).
//
// Decode flow (one call):
//   begin(batch)   validate, split, find cells for every ubatch as a dry run. Ok, NoSpace or InvalidBatch; on
//                  anything but Ok nothing changed.
//   apply()        per ubatch: place the cells, extend the pool layout, prepare recurrent rows; returns the Plan.
//                  The model runs forward(plan, *this) before the next apply().
//   finish()       commit the call (every ubatch applied).   undo()  forget everything the call did, in all three
//                  caches (also after the last ubatch, before finish()).
//
// Thread safety
// -------------
// None inside: one HybridMemory is used by one thread at a time (the Context serialises its callers). During a
// call, the model's forward pass may read and write rows through Storage from several threads at once, each
// thread on rows of its own; the books (cells, layouts, recurrent metadata) are only touched by the calling
// thread, between apply() calls.
//
// Invariants (checked by check_invariants(); Debug builds check them after every operation)
// ----------
// Between calls (no begin() without finish() or undo()):
//   (1) Streams: one stream when unified, else one per sequence, and sequence s's cells are all in stream s.
//   (2) Books: a cell is empty (position -1, no sequence) or holds at least one sequence id < n_seq_max; every
//       stream's used count is its number of non-empty cells; each sequence's (position, cell) index lists exactly
//       the cells holding it.
//   (3) Positions are at most 2^31 - 3, so every pos_max + 1 fits in an int32 (batches and restores refuse more).
//   (4) Layout: each sequence's k-pool layout is the one a rebuild from its cells gives (edits rebuild it at once,
//       appends extend it); pooled keys of stale pools are re-pooled by the next call's first ubatch.
//   (5) Recurrent: a sequence has a recurrent state iff it has attention cells, at the position of its last cell;
//       it has at most n_rs_seq valid snapshots; a shared slot is another valid sequence's.
//   (6) Rows: K, V and indexer rows of a cell belong to that cell (a restore or copy writes them with the books).
// During a call, (1)-(6) hold again after finish() or undo(); undo() restores the exact rows and books.
//
// Heap use of a decode call
// -------------------------
// A decode step like one before it takes nothing from the heap (tests/alloc/steady_decode_alloc_test.cpp):
// - the call's state lives in one Call object made with the memory: the validated batch, the split, every token's
//   cell, the heads and staleness before the call, apply()'s working lists and the Plan. Their buffers are
//   cleared, never freed, so they keep the capacity of the largest call so far (sized for one full ubatch when
//   the memory is made). The Plan apply() returns and everything it points to (call_batch(), the spans of the
//   plan) stay valid until the next apply() or begin();
// - the per-sequence cell indexes of a stream take their nodes from the stream's NodePool (cells.h);
// - a sequence's layout lists reserve room for its stream's cells on first use (kpool_layout.h), and its pooled
//   keys room for the stream's pools (pool_keys.cpp);
// - the KV journal and the recurrent journal keep their capacity from call to call.
// What still allocates: the first calls that need more than any before (a longer prompt, more sequences at
// once), sequence edits (seq_rm / seq_cp / shifts rebuild lists), state save / load, and error messages.
//
// Every edit of the attention cells is carried to the other two caches by sync_after_edit (recurrent position
// or drop, staleness, layout rebuild), so no operation repeats those steps by hand.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "memory/batch.h"
#include "memory/huge_pages.h"
#include "memory/kpool_layout.h"
#include "memory/kv_cache.h"
#include "memory/plan.h"
#include "memory/recurrent_cache.h"

namespace offgrid::memory {

struct MemoryParams {
    CacheShape shape;
    uint32_t n_ctx = 256;       // cells: all in one stream (unified) or n_ctx / n_seq_max per sequence stream
    uint32_t n_seq_max = 1;     // sequence ids are [0, n_seq_max)
    bool unified = true;        // one shared stream, else one stream per sequence
    uint32_t n_rs_seq = 0;      // recurrent rollback snapshots per sequence
    uint32_t n_ubatch = 512;    // most tokens per ubatch
    uint32_t kpool = 0;         // pool size of the indexer (0: no pools)
    bool by_order = true;       // pools by sequence order, else by aligned positions
    uint32_t n_vocab = 0;       // token ids are checked against it (0: unchecked)
    bool multi_pos = false;     // M-RoPE positions (batch rule V4)
    // Sliding window of the attention cache (default none). It cannot be combined with kpool > 0: the pools are
    // runs of a sequence's cells in order, and every cell the window lets go would shift every later pool's
    // members, regrouping the whole sequence at each step for pooled keys no query can select anyway.
    Window window;
    // The layers whose rows this memory stores: one flag per shape.layers entry (empty: all). A pipeline rank
    // holds its own layers only (src/distributed/). A layer not held keeps its number and its place in state
    // files (zeros on save, skipped on restore) but takes no storage, and its rows must not be asked for.
    // row_state_held: the per-row state outside the layers (CacheShape::row_floats), likewise.
    std::vector<bool> held;
    bool row_state_held = true;
};

// The reference's context sizing (memory.md 0.5): n_ctx rounded up to 256; per-sequence streams get
// pad256(n_ctx / n_seq_max) cells each. Returns the cells per stream.
uint32_t cells_per_stream(uint32_t n_ctx, uint32_t n_seq_max, bool unified);
// The reference's size of a windowed cache (memory.md 3.5): pad256(min(cells, n_swa * (unified ? n_seq_max : 1)
// + n_ubatch)), given the full cache's cells per stream, and never more than those. Enough for every sequence's
// window plus one ubatch.
uint32_t window_cells_per_stream(uint32_t cells, const Window & window, uint32_t n_seq_max, bool unified,
                                 uint32_t n_ubatch);

enum class DecodeStatus { Ok, NoSpace, InvalidBatch };

struct BeginResult {
    DecodeStatus status = DecodeStatus::Ok;
    std::string message;
    size_t n_ubatches = 0;
};

struct BreakdownEntry {
    std::string cache;  // "attention", "indexer", "recurrent"
    std::string part;   // "k", "v", "rows", "conv", "ssm", "row"
    tensor::ElemType type;
    uint64_t bytes;
};

class HybridMemory final : public Storage {
public:
    explicit HybridMemory(const MemoryParams & params);
    ~HybridMemory() override;
    HybridMemory(const HybridMemory &) = delete;
    HybridMemory & operator=(const HybridMemory &) = delete;

    const MemoryParams & params() const { return params_; }

    // --- one decode call ---
    // REQUIRES: no call in progress; pending shifts applied (apply_pending_shifts), else it throws.
    BeginResult begin(const Batch & batch);
    bool has_next() const;
    // REQUIRES: has_next().
    const Plan & apply();
    // REQUIRES: every ubatch applied (else it throws: a call that stops early must be undone).
    void finish();
    // Any time during a call; no-op without one.
    void undo();
    bool in_call() const { return call_ != nullptr; }
    const ValidBatch & call_batch() const;  // the validated batch of the current call

    // --- sequence operations ---
    // REQUIRES for all of them: no call in progress (else offgrid::Error); valid sequence ids (else offgrid::Error).
    // Whole-sequence removal always works; removing the last k tokens is a rollback (k <= valid snapshots);
    // any other partial removal is refused (false, nothing changed) when the model has recurrent state.
    bool seq_rm(SeqId s, Pos p0, Pos p1);
    // Whole-sequence copy; dst's previous content is replaced. A partial range throws.
    void seq_cp(SeqId src, SeqId dst, Pos p0 = -1, Pos p1 = -1);
    void seq_keep(SeqId s);  // every other sequence is removed, in every stream
    void seq_add(SeqId s, Pos p0, Pos p1, Pos delta);
    void seq_div(SeqId s, Pos p0, Pos p1, int d);  // d < 1 throws
    // As the reference hybrid reports them: with recurrent state the minimum is the last position too.
    Pos seq_pos_min(SeqId s) const;
    Pos seq_pos_max(SeqId s) const;
    Pos seq_first_pos(SeqId s) const;  // the first position held in the attention cache (-1: none)
    void clear();
    // Stores the rows of these layers from now on (MemoryParams::held; empty: all): layers taken on start zeroed,
    // layers let go lose their rows. Only between calls.
    void hold_layers(const std::vector<bool> & held, bool row_state_held);

    // Pending position shifts (after seq_add / seq_div): rotate(global cell, old pos, new pos) re-rotates K.
    using RotateFn = std::function<void(uint32_t cell, Pos old_pos, Pos new_pos)>;
    bool has_pending_shift() const { return kv_.has_shift(); }
    void apply_pending_shifts(const RotateFn & rotate);

    std::vector<BreakdownEntry> breakdown() const;

    // --- state (format and failure rules: memory/state_io.h; code: state_io.cpp and each cache's *_state.cpp) ---
    // REQUIRES: no call in progress; seq in [-1, n_seq_max) (-1: the whole memory). Else offgrid::Error.
    std::vector<uint8_t> save_state(SeqId seq, uint32_t flags = 0, Pos from = 0) const;
    void load_state(std::span<const uint8_t> data, SeqId seq, uint32_t flags = 0, const std::string & name = "state");

    // --- invariants (the list at the top of this file) ---
    // "" when all hold, else the number and what is broken. Always "" during a call (the books are mid-edit).
    std::string invariant_violation() const;
    // Throws std::logic_error with invariant_violation() when it is not empty: a broken invariant is a bug.
    void check_invariants() const;

    // --- Storage ---
    void * k_row(uint32_t attn_layer, uint32_t cell) override { return kv_.k_row(attn_layer, cell); }
    void * v_row(uint32_t attn_layer, uint32_t cell) override { return kv_.v_row(attn_layer, cell); }
    void * idx_row(uint32_t attn_layer, uint32_t cell) override { return kv_.idx_row(attn_layer, cell); }
    RowTable k_rows(uint32_t attn_layer) override { return {kv_.k_row(attn_layer, 0), kv_.k_row_bytes(attn_layer)}; }
    RowTable v_rows(uint32_t attn_layer) override {
        return kv_.v_row_bytes(attn_layer) ? RowTable{kv_.v_row(attn_layer, 0), kv_.v_row_bytes(attn_layer)} : RowTable{};
    }
    RowTable idx_rows(uint32_t attn_layer) override {
        return kv_.idx_row_bytes(attn_layer) ? RowTable{kv_.idx_row(attn_layer, 0), kv_.idx_row_bytes(attn_layer)}
                                             : RowTable{};
    }
    PoolKeyTable pool_keys(uint32_t attn_layer, SeqId seq) override;  // pool_keys.cpp
    float * conv_state(uint32_t recr_layer, uint32_t row) override { return rec_.conv(recr_layer, row); }
    float * ssm_state(uint32_t recr_layer, uint32_t row) override { return rec_.ssm(recr_layer, row); }
    float * row_state(uint32_t row) override { return rec_.row_state(row); }
    RecurrentRewrite recurrent_rewrite(uint32_t recr_layer, uint32_t row) override {
        const RecurrentCache::Rewrite r = rec_.rewrite(recr_layer, row);
        return {r.conv_in, r.ssm_in, r.conv_out, r.ssm_out};
    }

    // --- introspection (tests, state I/O) ---
    const KvCache & kv() const { return kv_; }
    KvCache & kv() { return kv_; }
    const RecurrentCache & recurrent() const { return rec_; }
    RecurrentCache & recurrent() { return rec_; }
    const KPoolLayout & layout() const { return layout_; }
    KPoolLayout & layout() { return layout_; }
    bool has_recurrent() const { return has_recurrent_; }
    void relayout(const SeqSet & seqs);  // rebuild these sequences' layouts from the cells
    // Drops s from all three caches unconditionally (s = -1: everything), as a failed restore does.
    // REQUIRES: no call in progress.
    void drop(SeqId s);

private:
    struct Call;
    class PlanImpl;

    // After an edit of the attention cells of `changed`: each such sequence's recurrent state follows its cells
    // (dropped when none are left, else at its last position; snapshots forgotten when asked), its pools are
    // marked stale from stale(q) (kPosInf: not at all), and its layout is rebuilt.
    void sync_after_edit(const SeqSet & changed, const std::function<Pos(SeqId)> & stale, bool forget_snapshots);
    void debug_check() const;  // check_invariants() in Debug builds, nothing otherwise

    void check_seq(SeqId s, const char * op, bool allow_all = false) const;
    void check_idle(const char * op) const;
    void remove_whole(SeqId s);
    bool has_pools() const { return params_.kpool > 0 && params_.shape.has_indexer(); }
    Pos stale_pos(SeqId s, Pos p0) const;
    bool shares_cells_unevenly(SeqId s, Pos p0, Pos p1, bool any_sharer = false) const;
    std::string coupling_conflict(const ValidBatch & b) const;

    MemoryParams params_;
    bool has_recurrent_;
    KvCache kv_;
    RecurrentCache rec_;
    KPoolLayout layout_;
    std::unique_ptr<Call> call_storage_;  // one call's state and buffers, made once and reused by every call
    Call * call_ = nullptr;               // call_storage_ during a call (begin() to finish() / undo()), else null
    SeqRangeFn memory_range_;             // validation's view of the sequences (made once, not per call)
    std::vector<uint32_t> rep_mark_;  // per global cell: the plan generation that last marked it as a rep
    // Pooled keys in pool order per attention layer and sequence (Storage::pool_keys, element-major blocks): keys
    // [0, valid) equal the rep rows' pooled parts. A derived copy, never saved: every change of a sequence's pools or of a pooled
    // key lowers valid (forget_pool_keys), and pool_keys copies the rest from the rep rows.
    struct PoolKeys {
        std::vector<uint8_t, HugePageAllocator<uint8_t>> keys;  // the scan streams it: 2 MiB pages past 2 MiB
        size_t valid = 0;
    };
    std::vector<std::vector<PoolKeys>> pool_keys_;  // [attn layer][seq], empty without pools
    void forget_pool_keys(SeqId s, size_t from);     // every layer: valid = min(valid, from)
    void forget_repooled_keys(uint32_t rep);          // the pool behind rep in every sequence holding it
    uint32_t generation_ = 0;
};

}  // namespace offgrid::memory
