#include "memory/recurrent_cache.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/error.h"

namespace offgrid::memory {

RecurrentCache::RecurrentCache(const CacheShape & shape, uint32_t n_slots, uint32_t n_rs_seq, const std::vector<bool> & held,
                               bool row_state_held)
    : n_slots_(n_slots), n_rs_seq_(n_rs_seq), row_floats_(0), decl_row_(shape.row_floats) {
    if (n_slots == 0 || n_slots > (uint32_t)kMaxSeq) throw Error("n_seq_max: must be in [1, 256]");
    if (!held.empty() && held.size() != shape.layers.size()) throw Error("held layers: one flag per layer of the shape");
    seqs_.assign(kMaxSeq, SeqState{});
    std::vector<bool> hold_layer;
    for (size_t i = 0; i < shape.layers.size(); ++i) {
        const LayerCache & l = shape.layers[i];
        if (!l.recurrent()) continue;
        decl_conv_.push_back(l.conv_floats);
        decl_ssm_.push_back(l.state_floats);
        conv_floats_.push_back(0);
        ssm_floats_.push_back(0);
        conv_.emplace_back();
        ssm_.emplace_back();
        hold_layer.push_back(held.empty() || held[i]);
    }
    bank_.assign((size_t)n_slots * n_parts(), 0);
    journal_index_.assign(n_slots, -1);
    for (uint32_t l = 0; l < hold_layer.size(); ++l)
        if (hold_layer[l]) hold(l, true);
    if (row_state_held) hold((uint32_t)conv_.size(), true);
}

void RecurrentCache::hold(uint32_t layer, bool held) {
    const size_t rows = 2 * (size_t)n_rows();  // two banks
    if (layer == conv_.size()) {
        row_floats_ = held ? decl_row_ : 0;
        row_state_.assign(rows * row_floats_, 0.0f);
        return;
    }
    conv_floats_[layer] = held ? decl_conv_[layer] : 0;
    ssm_floats_[layer] = held ? decl_ssm_[layer] : 0;
    conv_[layer].assign(rows * conv_floats_[layer], 0.0f);
    ssm_[layer].assign(rows * ssm_floats_[layer], 0.0f);
}

uint32_t RecurrentCache::slot_floats() const {
    return (1 + n_rs_seq_) * (uint32_t)(sum(decl_conv_) + sum(decl_ssm_) + decl_row_);
}

// The declared layout: a part this cache does not hold reads as zeros and is passed by on writing.
void RecurrentCache::read_plane(uint32_t slot, uint32_t plane, std::vector<float> & out) const {
    const uint32_t r = row(plane, slot);
    const auto put = [&](const float * p, uint32_t have, uint32_t decl) {
        if (have > 0) out.insert(out.end(), p, p + have);
        else out.insert(out.end(), decl, 0.0f);
    };
    for (uint32_t l = 0; l < conv_.size(); ++l) {
        put(conv_at(l, r), conv_floats_[l], decl_conv_[l]);
        put(ssm_at(l, r), ssm_floats_[l], decl_ssm_[l]);
    }
    put(row_state_at(r), row_floats_, decl_row_);
}

void RecurrentCache::write_plane(uint32_t slot, uint32_t plane, const float * in) {
    const uint32_t r = row(plane, slot);
    // memcpy with a null pointer is undefined even for 0 bytes: parts without storage are passed by.
    for (uint32_t l = 0; l < conv_.size(); ++l) {
        if (conv_floats_[l] > 0) std::memcpy(conv_at(l, r), in, 4ull * conv_floats_[l]);
        in += decl_conv_[l];
        if (ssm_floats_[l] > 0) std::memcpy(ssm_at(l, r), in, 4ull * ssm_floats_[l]);
        in += decl_ssm_[l];
    }
    if (row_floats_ > 0) std::memcpy(row_state_at(r), in, 4ull * row_floats_);
}

void RecurrentCache::read_slot(uint32_t slot, uint32_t planes, std::vector<float> & out) const {
    for (uint32_t k = 0; k < planes; ++k) read_plane(slot, k, out);
}

void RecurrentCache::write_slot(uint32_t slot, uint32_t planes, const float * in) {
    const size_t plane_floats = slot_floats() / (1 + n_rs_seq_);
    for (uint32_t k = 0; k < planes; ++k) write_plane(slot, k, in + k * plane_floats);
}

void RecurrentCache::for_each_row(uint32_t slot, uint32_t planes, const RowFn & fn) {
    for (uint32_t k = 0; k < planes; ++k) {
        const uint32_t r = row(k, slot);
        for (uint32_t l = 0; l < conv_.size(); ++l) {
            if (conv_floats_[l] > 0) fn(conv_at(l, r), conv_floats_[l]);
            if (ssm_floats_[l] > 0) fn(ssm_at(l, r), ssm_floats_[l]);
        }
        if (row_floats_ > 0) fn(row_state_at(r), row_floats_);
    }
}

void RecurrentCache::flip(uint32_t slot, uint32_t part, uint32_t first_plane) {
    uint8_t & bank = bank_[(size_t)slot * n_parts() + part];
    const size_t old_bank = bank;
    bank ^= 1;
    for (uint32_t k = first_plane; k < 1 + n_rs_seq_; ++k) {
        const size_t from = old_bank * n_rows() + row(k, slot), to = (old_bank ^ 1) * n_rows() + row(k, slot);
        if (part < conv_.size()) {
            if (!held(part)) continue;
            float * c = conv_[part].data();
            const size_t cf = conv_floats_[part], sf = ssm_floats_[part];
            std::memcpy(c + to * cf, c + from * cf, 4ull * cf);
            float * s = ssm_[part].data();
            std::memcpy(s + to * sf, s + from * sf, 4ull * sf);
        } else if (row_floats_ > 0) {
            std::memcpy(row_state_.data() + to * row_floats_, row_state_.data() + from * row_floats_, 4ull * row_floats_);
        }
    }
}

// A part's first access in a call: the old bank becomes the journal's copy, the live one starts equal to it.
void RecurrentCache::save_part(uint32_t entry, uint32_t part) {
    flip(journal_slots_[entry], part, 0);
    journal_saved_[(size_t)entry * n_parts() + part] = 1;
}

void RecurrentCache::restore_part(uint32_t entry, uint32_t part) {
    bank_[(size_t)journal_slots_[entry] * n_parts() + part] ^= 1;  // the old bank was not written since the flip
}

RecurrentCache::Rewrite RecurrentCache::rewrite(uint32_t layer, uint32_t row) {
    const uint32_t slot = row % n_slots_;
    bool fresh = row < n_slots_;  // plane 0 only: snapshot planes are written in place
    if (fresh && journal_on_) {
        const int32_t e = journal_index_[slot];
        uint8_t * saved = e >= 0 ? &journal_saved_[(size_t)e * n_parts() + layer] : nullptr;
        if (saved && *saved) {
            fresh = false;  // flipped earlier in this call: the old bank holds the journal copy
        } else if (saved) {
            *saved = 1;
        }
    }
    if (!fresh) {
        float * c = conv(layer, row);
        float * s = ssm(layer, row);
        return {c, s, c, s};
    }
    const float * c_in = conv_at(layer, row);
    const float * s_in = ssm_at(layer, row);
    flip(slot, layer, 1);  // the snapshot planes keep their values in the new bank
    return {c_in, s_in, conv_at(layer, row), ssm_at(layer, row)};
}

void RecurrentCache::touch(uint32_t slot) {
    if (!journal_on_ || journal_index_[slot] >= 0) return;
    // The entries' vectors keep their capacity from call to call: a decode step allocates nothing.
    const size_t k = journal_slots_.size();
    journal_index_[slot] = (int32_t)k;
    journal_slots_.push_back(slot);
    journal_saved_.resize((k + 1) * n_parts());
    std::fill(journal_saved_.begin() + (ptrdiff_t)(k * n_parts()), journal_saved_.end(), 0);
}

void RecurrentCache::touch_now(uint32_t slot) {
    touch(slot);
    if (!journal_on_) return;
    for (uint32_t part = 0; part < n_parts(); ++part) before_access(part, slot);
}

void RecurrentCache::copy_slot(uint32_t dst, uint32_t src) {
    touch_now(dst);
    for (uint32_t k = 0; k < 1 + n_rs_seq_; ++k) {
        const uint32_t rd = row(k, dst), rs = row(k, src);
        for (uint32_t l = 0; l < conv_.size(); ++l) {
            if (conv_floats_[l] > 0) std::memcpy(conv_at(l, rd), conv_at(l, rs), 4ull * conv_floats_[l]);
            if (ssm_floats_[l] > 0) std::memcpy(ssm_at(l, rd), ssm_at(l, rs), 4ull * ssm_floats_[l]);
        }
        if (row_floats_ > 0) std::memcpy(row_state_at(rd), row_state_at(rs), 4ull * row_floats_);
    }
}

void RecurrentCache::zero_slot(uint32_t slot) {
    touch_now(slot);
    for_each_row(slot, 1 + n_rs_seq_, [](float * p, size_t n) { std::fill(p, p + n, 0.0f); });
}

void RecurrentCache::materialize(SeqId d) {
    if (seqs_[d].shares < 0) return;
    copy_slot((uint32_t)d, (uint32_t)seqs_[d].shares);
    seqs_[d].shares = -1;
}

void RecurrentCache::detach_sharers(SeqId s) {
    for (SeqId d = 0; d < kMaxSeq; ++d)
        if (seqs_[d].shares == s) materialize(d);
}

void RecurrentCache::claim(SeqId s) {
    detach_sharers(s);
    seqs_[s].shares = -1;
}

void RecurrentCache::prepare_group(SeqId lead, const SeqSet & set) {
    for (SeqId s = 0; s < kMaxSeq; ++s) {
        if (!set.test(s)) continue;
        detach_sharers(s);
    }
    if (!present(lead)) {
        seqs_[lead].shares = -1;
        zero_slot((uint32_t)lead);
    } else {
        materialize(lead);
        touch((uint32_t)lead);  // the model writes it
    }
}

void RecurrentCache::finish_group(SeqId lead, const SeqSet & set, Pos last, uint32_t n_tokens) {
    const uint32_t snaps = std::min(n_rs_seq_, n_tokens);
    for (SeqId s = 0; s < kMaxSeq; ++s) {
        if (!set.test(s)) continue;
        seqs_[s].pos = last;
        seqs_[s].snaps = snaps;
        seqs_[s].shares = s == lead ? -1 : lead;
    }
}

void RecurrentCache::drop(SeqId s) {
    detach_sharers(s);
    seqs_[s] = SeqState{};
}

void RecurrentCache::rollback(SeqId s, uint32_t k, Pos new_pos) {
    const uint32_t from = slot_of(s);
    std::vector<float> plane;
    read_plane(from, k, plane);
    claim(s);
    touch_now((uint32_t)s);
    write_plane((uint32_t)s, 0, plane.data());
    seqs_[s].pos = new_pos;
    seqs_[s].snaps = 0;  // a second rollback needs a new decode first
}

void RecurrentCache::copy(SeqId src, SeqId dst) {
    if (src == dst) return;
    drop(dst);
    if (!present(src)) return;
    seqs_[dst] = seqs_[src];
    seqs_[dst].shares = (SeqId)slot_of(src);
}

void RecurrentCache::clear() {
    for (auto & s : seqs_) s = SeqState{};
    for (auto & v : conv_) std::fill(v.begin(), v.end(), 0.0f);
    for (auto & v : ssm_) std::fill(v.begin(), v.end(), 0.0f);
    std::fill(row_state_.begin(), row_state_.end(), 0.0f);
}

void RecurrentCache::journal_begin() {
    journal_on_ = true;
    journal_seqs_ = seqs_;
    journal_forget();
}

void RecurrentCache::journal_forget() {
    for (const uint32_t slot : journal_slots_) journal_index_[slot] = -1;
    journal_slots_.clear();
    journal_saved_.clear();
}

void RecurrentCache::journal_commit() {
    journal_on_ = false;
    journal_forget();
}

void RecurrentCache::journal_undo() {
    if (!journal_on_) return;
    for (uint32_t k = 0; k < journal_slots_.size(); ++k) {
        for (uint32_t part = 0; part < n_parts(); ++part) {
            if (journal_saved_[(size_t)k * n_parts() + part]) restore_part(k, part);
        }
    }
    seqs_ = journal_seqs_;
    journal_on_ = false;
    journal_forget();
}

}  // namespace offgrid::memory
