// The recurrent state cache (memory.md section 5, fixed where appendix A says so): one state slot per sequence
// (slot = sequence id), each with 1 + n_rs_seq planes of rows. Plane 0 is the live state; plane k holds the state
// as it was before the last k tokens of the sequence's latest ubatch (rollback snapshots).
//
// Row r = plane * n_slots + slot. Per recurrent layer a row holds that layer's conv_floats of conv history and
// state_floats of recurrent state (CacheShape::recr); the per-row state outside any layer (row_floats) is per
// row. After a copy, the destination shares the source's slot until either of them is written (copy on write). Writes during a decode call are journaled, so a failed call
// can be undone exactly.
//
// Storage: every part of a slot (a recurrent layer's conv and ssm rows of every plane, or the per-row states) exists in
// two banks, and one bit per (slot, part) says which is live. The journal is the other bank: on a part's first
// access in a call the bit flips and the old bank stays untouched until the call ends, so undo flips it back and
// commit does nothing. A part the model rewrites whole (rewrite(): a one-token step, no snapshot) is computed from
// the old bank straight into the new one, so a kept decode step copies none of its state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "memory/huge_pages.h"
#include "memory/plan.h"
#include "memory/seq_set.h"

namespace offgrid::memory {

// The ssm banks' allocator: huge pages from 2 MiB (HugePageAllocator), below that 64-byte aligned blocks, so a
// state row (a multiple of 16 floats) starts on a cache line and the delta step can stream it.
template <class T>
struct StateRowAllocator {
    using value_type = T;
    StateRowAllocator() = default;
    template <class U>
    StateRowAllocator(const StateRowAllocator<U> &) {}
    T * allocate(size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes >= HugePageAllocator<T>::kHuge) return HugePageAllocator<T>().allocate(n);
        if (void * p = std::aligned_alloc(64, (bytes + 64) / 64 * 64)) return static_cast<T *>(p);
        throw std::bad_alloc();
    }
    void deallocate(T * p, size_t) { std::free(p); }  // both kinds come from aligned_alloc or malloc
    template <class U>
    bool operator==(const StateRowAllocator<U> &) const { return true; }
};

class StateWriter;
class StateReader;

class RecurrentCache {
public:
    struct SeqState {
        Pos pos = -1;         // last position absorbed into the state; -1: no state
        SeqId shares = -1;    // the sequence whose slot holds this one's state (-1: its own slot)
        uint32_t snaps = 0;   // valid rollback snapshots (planes 1..snaps)
        bool operator==(const SeqState &) const = default;
    };

    // `held`: one flag per shape.layers entry (empty: all held); `row_state_held`: the per-row state. A recurrent
    // layer not held keeps its number and its place in the state's planes (zeros on save, skipped on restore) but
    // no storage: its floats read 0, so every row operation passes it by.
    RecurrentCache(const CacheShape & shape, uint32_t n_slots, uint32_t n_rs_seq, const std::vector<bool> & held = {},
                   bool row_state_held = true);
    bool held(uint32_t layer) const { return conv_floats_[layer] + ssm_floats_[layer] > 0; }
    // Gives a layer (or, layer == the number of recurrent layers, the per-row state) its storage, zeroed, or takes
    // it away. Only between calls.
    void hold(uint32_t layer, bool held);

    uint32_t n_slots() const { return n_slots_; }
    uint32_t n_rs_seq() const { return n_rs_seq_; }
    uint32_t n_rows() const { return n_slots_ * (1 + n_rs_seq_); }
    uint32_t row(uint32_t plane, uint32_t slot) const { return plane * n_slots_ + slot; }
    const SeqState & seq(SeqId s) const { return seqs_[s]; }
    Pos pos(SeqId s) const { return seqs_[s].pos; }
    bool present(SeqId s) const { return seqs_[s].pos >= 0; }
    // The slot holding s's state right now (its own, or the one it shares).
    uint32_t slot_of(SeqId s) const { return seqs_[s].shares >= 0 ? (uint32_t)seqs_[s].shares : (uint32_t)s; }

    // Before a ubatch advances the sequence set `set` (first sequence `lead`): gives `lead` its own slot (copy on
    // write, or zeroed rows for a new sequence); the other sequences of the set will share it.
    void prepare_group(SeqId lead, const SeqSet & set);
    // After the ubatch: every sequence of the set sits at `last` with min(n_rs_seq, n_tokens) valid snapshots.
    void finish_group(SeqId lead, const SeqSet & set, Pos last, uint32_t n_tokens);

    void drop(SeqId s);  // forget s's state (its sharers keep theirs)
    // Restores the snapshot taken before the last k tokens (1 <= k <= snaps), now; s ends at new_pos.
    void rollback(SeqId s, uint32_t k, Pos new_pos);
    void copy(SeqId src, SeqId dst);  // dst shares src's state
    void set_pos(SeqId s, Pos p) { seqs_[s].pos = p; }
    void forget_snapshots(SeqId s) { seqs_[s].snaps = 0; }
    void clear();

    // Undo journal of one decode call.
    void journal_begin();
    void journal_commit();
    void journal_undo();

    // Row pointers for the model, which may write through them. During a decode call the first access to a
    // journaled slot's layer (or per-row states) saves that part into the journal first, so a call copies each part
    // right before the model reads it (from cache afterwards) and never copies a part it does not touch.
    float * conv(uint32_t layer, uint32_t row) {
        before_access(layer, row);
        return conv_at(layer, row);
    }
    float * ssm(uint32_t layer, uint32_t row) {
        before_access(layer, row);
        return ssm_at(layer, row);
    }
    float * row_state(uint32_t row) {
        before_access((uint32_t)conv_.size(), row);
        return row_state_at(row);
    }
    // Layer `layer`'s plane-0 rows of `row` for a step that reads the whole state first and then writes every
    // float of both rows (a one-token step with no snapshot due): the new state goes to *_out, computed from
    // *_in. On the part's first access in a call (or with no journal) the two are different banks and nothing
    // is copied; otherwise they are the same rows (in place). Thread-safe like conv()/ssm() for distinct slots.
    struct Rewrite {
        const float * conv_in;
        const float * ssm_in;
        float * conv_out;
        float * ssm_out;
    };
    Rewrite rewrite(uint32_t layer, uint32_t row);
    // Bytes of the state (one bank), and of the second bank that holds the state before the call for undo (as
    // much again: the memory reports both, since both are held).
    uint64_t conv_bytes() const { return 4ull * sum(conv_floats_) * n_rows(); }
    uint64_t ssm_bytes() const { return 4ull * sum(ssm_floats_) * n_rows(); }
    uint64_t row_state_bytes() const { return 4ull * row_floats_ * n_rows(); }
    uint64_t undo_bank_bytes() const { return conv_bytes() + ssm_bytes() + row_state_bytes(); }
    uint32_t slot_floats() const;  // floats of all planes of one slot, all layers

    // Raw copy of one slot's planes (state I/O), in a fixed order: per plane, per layer conv then ssm, then the per-row state.
    void read_slot(uint32_t slot, uint32_t planes, std::vector<float> & out) const;
    void write_slot(uint32_t slot, uint32_t planes, const float * in);
    // Plane `plane` of `slot` in the same per-layer order (one plane only).
    void read_plane(uint32_t slot, uint32_t plane, std::vector<float> & out) const;
    void write_plane(uint32_t slot, uint32_t plane, const float * in);
    void claim(SeqId s);  // s will be overwritten: detach its sharers and itself
    void set_state(SeqId s, const SeqState & st) { seqs_[s] = st; }

    // --- the recurrent section of a memory state (memory/state_io.h; recurrent_state.cpp) ---
    struct StateRecord {
        SeqId seq;
        Pos pos;
        uint32_t snaps;
        std::vector<float> planes;  // every plane of the slot, all layers
    };
    // Per sequence (seq < 0: every present one): id, last position, valid snapshots, all planes.
    void write_states(SeqId seq, uint32_t n_seq_max, StateWriter & w) const;
    // Parses without changing anything; throws FileError naming the field.
    std::vector<StateRecord> read_states(StateReader & r, SeqId seq, uint32_t n_seq_max) const;
    // Each record into its sequence (seq >= 0: into seq), in a slot of its own.
    void restore_states(const std::vector<StateRecord> & recs, SeqId seq);

private:
    using RowFn = std::function<void(float *, size_t)>;
    // fn(row data, floats) for every layer's conv and ssm rows, then the per-row state, of planes [0, planes).
    void for_each_row(uint32_t slot, uint32_t planes, const RowFn & fn);
    // Journal parts: one per recurrent layer (conv and ssm rows of every plane), then one for the per-row states.
    uint32_t n_parts() const { return (uint32_t)conv_.size() + 1; }
    void touch(uint32_t slot);          // journal a slot before the model writes it (parts saved on first access)
    void touch_now(uint32_t slot);      // journal a slot and save all of it now (before this class writes it)
    void before_access(uint32_t part, uint32_t row) {
        if (!journal_on_) return;
        const int32_t e = journal_index_[row % n_slots_];
        if (e >= 0 && !journal_saved_[(size_t)e * n_parts() + part]) save_part((uint32_t)e, part);
    }
    void save_part(uint32_t entry, uint32_t part);     // flip the part's bank; the live one gets a copy
    void restore_part(uint32_t entry, uint32_t part);  // flip it back
    // Toggles the live bank of (slot, part) and copies planes [first_plane, planes) of the part from the old bank.
    void flip(uint32_t slot, uint32_t part, uint32_t first_plane);
    size_t bank_row(uint32_t part, uint32_t row) const {  // row index within the part's two-bank buffer
        return (size_t)bank_[(size_t)(row % n_slots_) * n_parts() + part] * n_rows() + row;
    }
    float * conv_at(uint32_t layer, uint32_t row) { return conv_[layer].data() + bank_row(layer, row) * conv_floats_[layer]; }
    float * ssm_at(uint32_t layer, uint32_t row) { return ssm_[layer].data() + bank_row(layer, row) * ssm_floats_[layer]; }
    float * row_state_at(uint32_t row) { return row_state_.data() + bank_row((uint32_t)conv_.size(), row) * row_floats_; }
    const float * conv_at(uint32_t layer, uint32_t row) const {
        return conv_[layer].data() + bank_row(layer, row) * conv_floats_[layer];
    }
    const float * ssm_at(uint32_t layer, uint32_t row) const {
        return ssm_[layer].data() + bank_row(layer, row) * ssm_floats_[layer];
    }
    const float * row_state_at(uint32_t row) const {
        return row_state_.data() + bank_row((uint32_t)conv_.size(), row) * row_floats_;
    }
    void journal_forget();              // empties the journal (its buffers are kept for the next call)
    void materialize(SeqId d);          // give d its own copy of the shared state
    void detach_sharers(SeqId s);       // every sequence sharing s's slot gets its own copy
    void copy_slot(uint32_t dst, uint32_t src);
    void zero_slot(uint32_t slot);

    static uint64_t sum(const std::vector<uint32_t> & v) {
        uint64_t n = 0;
        for (uint32_t x : v) n += x;
        return n;
    }

    uint32_t n_slots_, n_rs_seq_;
    std::vector<uint32_t> conv_floats_, ssm_floats_;  // per recurrent layer; 0 when not held
    uint32_t row_floats_;                             // 0 when not held
    std::vector<uint32_t> decl_conv_, decl_ssm_;      // as declared, held or not: the state's layout
    uint32_t decl_row_;
    std::vector<SeqState> seqs_;
    // Per layer: two banks of n_rows() rows each. The ssm rows (the bulk of the state, streamed once a token) are
    // cache-line aligned for non-temporal stores, in huge pages when large (fewer TLB misses).
    std::vector<std::vector<float>> conv_;
    std::vector<std::vector<float, StateRowAllocator<float>>> ssm_;
    std::vector<float> row_state_;                       // two banks of n_rows() per-row states
    std::vector<uint8_t> bank_;                    // live bank of (slot, part): [slot * n_parts() + part]

    bool journal_on_ = false;
    std::vector<SeqState> journal_seqs_;
    std::vector<int32_t> journal_index_;           // per slot: its journal entry in this call, or -1
    std::vector<uint32_t> journal_slots_;          // entry k's slot
    std::vector<uint8_t> journal_saved_;           // entry k, part p flipped (old bank kept): [k * n_parts() + p]
};

}  // namespace offgrid::memory
