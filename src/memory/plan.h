// The contract between the hybrid memory and the model: per ubatch, the memory hands the model a Plan that says
// where each token writes, which cells it may see, which pools to (re)pool and which pools and tail cells each
// token may select. The memory keeps books; the model computes. Nothing here knows the model's maths.
//
// Cells are addressed globally: cell = stream * cells_per_stream + local cell. Storage for every cache is indexed
// by that global cell (attention K/V rows, indexer rows) or by a recurrent row (recurrent state).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "tensor/types.h"

namespace offgrid::memory {

using Pos = int32_t;
using SeqId = int32_t;
using Token = int32_t;

inline constexpr int kMaxSeq = 256;

struct PosCell {
    Pos pos;
    uint32_t cell;  // global cell
    bool operator==(const PosCell &) const = default;
};

// One sequence's cells sorted by (pos, cell), and its complete pools. Pool k covers the kpool consecutive entries
// cells[pools[k] .. pools[k] + kpool); its pooled key lives in the row of its last member, the rep cell
// reps[k] == cells[pools[k] + kpool - 1].cell (kept next to the pools, so scoring reads no per-token list).
// In by-order mode pools[k] == k * kpool. Views stay valid until the next memory mutation.
struct SeqView {
    std::span<const PosCell> cells;
    std::span<const uint32_t> pools;
    std::span<const uint32_t> reps;  // reps.size() == pools.size()
};

// A pool the model must (re)compute in this ubatch from its members' indexer rows, stored into the pooled part of
// rep's row (how it is pooled, and whether its key is rotated at `pos`, is the model's matter).
struct NewPool {
    std::span<const uint32_t> members;  // kpool global cells, in sequence order
    uint32_t rep;                       // global cell of the last member
    Pos pos;                            // the first member's position
};

struct TokenPlan {
    Token token;
    Pos pos;
    SeqId seq;            // the token's first sequence id (attention and selection follow it)
    uint32_t cell;        // global cell the token's K, V and raw indexer key are written to
    bool output;          // a logits row is wanted
    uint32_t n_visible;   // entries of seq's cells with pos <= this token's pos
    // With a sliding window, entries [0, first_visible) are outside the token's window: dense attention reads
    // entries [first_visible, n_visible). Always 0 without a window.
    uint32_t first_visible = 0;
    uint32_t n_pools;     // pools of seq that end at or before this token (selectable pools: pools[0..n_pools))
    std::span<const uint32_t> tail;  // incomplete tail cells, the token itself first then older (size < kpool)
    uint32_t index = 0;   // the token's index in the decode call's batch (ubatches regroup tokens by sequence)
};

// Recurrent rows one sequence group of the ubatch works on. The model reads the state from `row`, runs the
// group's tokens in order, writes the final state back to `row`, and for k = 1..snapshots.size() writes the
// state as it was before the last k tokens of the group into snapshots[k-1] (rollback support, n_rs_seq).
// The memory has prepared `row` before handing out the plan: zeroed for a new sequence, copied for a sequence
// that shared another's state. snapshots.size() = min(n_rs_seq, tokens.size()).
struct SeqGroup {
    SeqId seq;
    std::vector<uint32_t> tokens;     // ubatch token indices, in order
    uint32_t row;                     // recurrent row holding this sequence's live state
    std::vector<uint32_t> snapshots;  // recurrent rows for rollback snapshots (may be empty)
};

struct Plan {
    std::vector<TokenPlan> tokens;       // in ubatch order
    std::vector<SeqGroup> groups;        // one per distinct sequence set in the ubatch
    std::vector<NewPool> new_pools;      // pooled once even when shared by several sequences
    uint32_t kpool = 0;                  // 0 when the model has no QSA layer

    // Read access to a sequence's cells and pools (for dense attention, pool selection, a token's predecessors).
    // Implemented by the memory; valid while the plan is.
    virtual SeqView seq_view(SeqId seq) const = 0;
    // Token id stored in a cell (a token's predecessors, for models that read them).
    virtual Token cell_token(uint32_t cell) const = 0;
    virtual ~Plan() = default;
};

// Every width of a LayerCache stays below this (the memory refuses more): a row of that many elements is far
// beyond any model, and the state header can tell a width from a digest of per-layer widths (state_io.cpp).
inline constexpr uint32_t kMaxCacheWidth = 1u << 28;

// What one model layer keeps in the memory, declared by the model. Each layer has its own widths; a layer declares
// any of these caches (none: it keeps nothing, e.g. a feed-forward-only layer).
//  * Attention caches, rows per global cell: K rows, optional V rows, optional indexer rows. A layer with K rows
//    is an attention layer; attention layers are numbered 0.. in model order (Storage's attn_layer).
//  * Recurrent caches, floats per recurrent row: conv history and recurrent state. A layer with either is a
//    recurrent layer; recurrent layers are numbered 0.. in model order (Storage's recr_layer).
struct LayerCache {
    uint32_t k_width = 0;       // elements of one K row (type_k); 0: not an attention layer
    uint32_t v_width = 0;       // elements of one V row (type_v); 0: no V rows (values are read from the K rows)
    uint32_t idx_width = 0;     // elements of one indexer part (type_idx); 0: no indexer rows
    uint32_t idx_parts = 0;     // parts of an indexer row, each idx_width wide, the pooled key last (at least 2:
                                // the parts before it are the model's, such as a raw key and a gate)
    uint32_t conv_floats = 0;   // floats of conv history per recurrent row
    uint32_t state_floats = 0;  // floats of recurrent state per recurrent row

    bool attention() const { return k_width > 0; }
    bool recurrent() const { return conv_floats > 0 || state_floats > 0; }
    bool indexer() const { return idx_width > 0; }
    bool operator==(const LayerCache &) const = default;

    static LayerCache attention_rows(uint32_t k_width, uint32_t v_width, uint32_t idx_width = 0, uint32_t idx_parts = 0) {
        return {k_width, v_width, idx_width, idx_parts, 0, 0};
    }
    static LayerCache recurrent_rows(uint32_t conv_floats, uint32_t state_floats) {
        return {0, 0, 0, 0, conv_floats, state_floats};
    }
};

// What the model needs stored (Architecture::cache_shape), from which the memory builds its caches once.
struct CacheShape {
    std::vector<LayerCache> layers;  // one per model layer, in model order
    uint32_t row_floats = 0;         // per recurrent row, outside any layer: state the model carries along a
                                     // sequence beside its layers' (0 = none)
    tensor::ElemType type_k = tensor::ElemType::F16;  // K rows: F32, F16 or Q8_0 (k_width a multiple of 32)
    tensor::ElemType type_v = tensor::ElemType::F16;  // V rows: F32, F16 or Q8_0 (v_width a multiple of 32)
    tensor::ElemType type_idx = tensor::ElemType::F16;  // indexer rows: F32 or F16 (the model derives it from type_k)

    uint32_t n_attn_layers() const { return count(&LayerCache::attention); }
    uint32_t n_recr_layers() const { return count(&LayerCache::recurrent); }
    // The declaration of attention layer `attn_layer` / recurrent layer `recr_layer` (numbered as above).
    const LayerCache & attn(uint32_t attn_layer) const { return nth(&LayerCache::attention, attn_layer); }
    const LayerCache & recr(uint32_t recr_layer) const { return nth(&LayerCache::recurrent, recr_layer); }
    bool has_indexer() const {
        for (const LayerCache & l : layers)
            if (l.attention() && l.indexer()) return true;
        return false;
    }

    bool operator==(const CacheShape &) const = default;

private:
    uint32_t count(bool (LayerCache::*kind)() const) const {
        uint32_t n = 0;
        for (const LayerCache & l : layers) n += (l.*kind)() ? 1 : 0;
        return n;
    }
    const LayerCache & nth(bool (LayerCache::*kind)() const, uint32_t i) const {
        for (const LayerCache & l : layers)
            if ((l.*kind)() && i-- == 0) return l;
        static const LayerCache none;
        return none;
    }
};

// One layer's rows of one cache as a single array: the row of global cell c starts at base + c * stride bytes.
// Attention kernels address selected rows by cell through it instead of building pointer lists.
struct RowTable {
    uint8_t * base = nullptr;
    size_t stride = 0;
    uint8_t * row(uint32_t cell) const { return base + static_cast<size_t>(cell) * stride; }
};

// A sequence's pooled keys in pool order, in blocks of kPoolKeyBlock pools stored element-major: element e of pool
// p (dim elements of elem bytes each) at base + ((p / kPoolKeyBlock) * dim * kPoolKeyBlock + e * kPoolKeyBlock +
// p % kPoolKeyBlock) * elem. The scan reads element e of 16 pools as one vector, in one stream, no transpose. The
// lanes of a last partial block past the sequence's pools hold no key.
inline constexpr size_t kPoolKeyBlock = 16;
struct PoolKeyTable {
    const uint8_t * base = nullptr;
    size_t dim = 0, elem = 0;
    size_t block_bytes() const { return kPoolKeyBlock * dim * elem; }
    const uint8_t * block(size_t b) const { return base + b * block_bytes(); }
    const uint8_t * element(size_t p, size_t e) const {
        return block(p / kPoolKeyBlock) + (e * kPoolKeyBlock + p % kPoolKeyBlock) * elem;
    }
};

// Row access to the memory's storage, for the model. Rows have the element types of the CacheShape and the widths
// of their layer's LayerCache. A layer the memory does not hold (MemoryParams::held, a pipeline rank's other
// layers) has no rows: its k_rows(l).stride is 0 and nothing of it may be read or written.
// Invariant: k_row(l, c) == k_rows(l).row(c) for every cell (likewise V and indexer rows). The recurrent accessors
// may be called from several threads at once for rows of distinct slots (a first access may journal the rows).
struct Storage {
    virtual void * k_row(uint32_t attn_layer, uint32_t cell) = 0;
    virtual void * v_row(uint32_t attn_layer, uint32_t cell) = 0;     // null when v_width is 0
    virtual void * idx_row(uint32_t attn_layer, uint32_t cell) = 0;   // idx_parts * idx_width elements; null
                                                                      // for a layer without indexer rows
    virtual RowTable k_rows(uint32_t attn_layer) = 0;
    virtual RowTable v_rows(uint32_t attn_layer) = 0;    // base null when v_width is 0
    virtual RowTable idx_rows(uint32_t attn_layer) = 0;
    // The pooled keys of sequence seq's pools in pool order, in element-major blocks (PoolKeyTable; a key is the
    // indexer's last part, idx_width elements of type_idx): equal to the pooled parts of seq_view(seq).reps' rows
    // as they are when it is called, so call it after the layer's new pools are written, and not from two threads
    // at once. Scoring then streams the keys instead of reading one row part in every kpool rows. base null: not
    // kept (the caller reads the rep rows).
    virtual PoolKeyTable pool_keys(uint32_t attn_layer, SeqId seq) {
        (void)attn_layer;
        (void)seq;
        return {};
    }
    virtual float * conv_state(uint32_t recr_layer, uint32_t row) = 0;
    virtual float * ssm_state(uint32_t recr_layer, uint32_t row) = 0;
    virtual float * row_state(uint32_t row) = 0;  // row_floats floats
    // A recurrent layer's conv and ssm rows of `row` for a step that reads the whole state and then writes every
    // float of both (one token, no snapshot due): the new state goes to *_out, computed from *_in, which may be
    // other rows (the memory keeps the old state there for undo, so nothing is copied) or the same ones.
    struct RecurrentRewrite {
        const float * conv_in;
        const float * ssm_in;
        float * conv_out;
        float * ssm_out;
    };
    virtual RecurrentRewrite recurrent_rewrite(uint32_t recr_layer, uint32_t row) {
        float * c = conv_state(recr_layer, row);
        float * s = ssm_state(recr_layer, row);
        return {c, s, c, s};
    }
    virtual ~Storage() = default;
};

}  // namespace offgrid::memory
