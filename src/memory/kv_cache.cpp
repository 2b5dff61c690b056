#include "memory/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace offgrid::memory {

namespace {

// The cells of one sequence with p0 <= pos < p1, copied out: the caller changes the index it came from.
std::vector<uint32_t> cells_in_range(const SeqCells & sc, Pos p0, Pos p1) {
    std::vector<uint32_t> out;
    for (auto it = sc.lower_bound({p0, 0}); it != sc.end() && it->first < p1; ++it) out.push_back(it->second);
    return out;
}

}  // namespace

uint32_t cache_elem_bytes(tensor::ElemType type, const char * field) {
    switch (type) {
        case tensor::ElemType::F32: return 4;
        case tensor::ElemType::F16: return 2;
        default:
            throw Error(std::string(field) + ": cache rows must be f32 or f16, not type id " +
                        std::to_string((uint32_t)type));
    }
}

uint32_t cache_row_bytes(tensor::ElemType type, uint32_t width, const char * field) {
    if (type != tensor::ElemType::Q8_0) return width * cache_elem_bytes(type, field);
    if (width % 32 != 0) {
        throw Error(std::string(field) + ": q8_0 rows need a width that is a multiple of 32, not " + std::to_string(width));
    }
    return width / 32 * 34;  // tensor::BlockQ8_0
}

KvCache::KvCache(const CacheShape & shape, uint32_t kv_size, uint32_t n_stream, const Window & window,
                 const std::vector<bool> & held)
    : kv_size_(kv_size), window_(window) {
    window_.check();
    if (kv_size == 0) throw Error("kv_size: a cache needs at least one cell per stream");
    if (n_stream == 0 || n_stream > (uint32_t)kMaxSeq) throw Error("n_stream: must be in [1, 256]");
    streams_.reserve(n_stream);
    for (uint32_t st = 0; st < n_stream; ++st) streams_.emplace_back(kv_size);
    if (!held.empty() && held.size() != shape.layers.size()) throw Error("held layers: one flag per layer of the shape");
    for (size_t i = 0; i < shape.layers.size(); ++i) {
        const LayerCache & l = shape.layers[i];
        if (!l.attention()) {
            if (l.v_width > 0 || l.indexer()) throw Error("cache shape: V or indexer rows on a layer without K rows");
            continue;
        }
        if (l.indexer() && l.idx_parts < 2) throw Error("idx_parts: an indexer row needs a key and a pooled part");
        decl_k_.push_back(cache_row_bytes(shape.type_k, l.k_width, "type_k"));
        decl_v_.push_back(cache_row_bytes(shape.type_v, l.v_width, "type_v"));
        decl_idx_.push_back(l.indexer() ? l.idx_parts * l.idx_width * cache_elem_bytes(shape.type_idx, "indexer type") : 0);
        k_row_bytes_.push_back(0);
        v_row_bytes_.push_back(0);
        idx_row_bytes_.push_back(0);
        k_.emplace_back();
        v_.emplace_back();
        idx_.emplace_back();
        if (held.empty() || held[i]) hold((uint32_t)(k_.size() - 1), true);
    }
}

void KvCache::hold(uint32_t layer, bool held) {
    const size_t cells = n_cells();
    k_row_bytes_[layer] = held ? decl_k_[layer] : 0;
    v_row_bytes_[layer] = held ? decl_v_[layer] : 0;
    idx_row_bytes_[layer] = held ? decl_idx_[layer] : 0;
    k_[layer] = RowArray(cells * k_row_bytes_[layer]);
    v_[layer] = RowArray(cells * v_row_bytes_[layer]);
    idx_[layer] = RowArray(cells * idx_row_bytes_[layer]);
}

std::vector<uint32_t> KvCache::heads() const {
    std::vector<uint32_t> h;
    heads(h);
    return h;
}

void KvCache::heads(std::vector<uint32_t> & out) const {
    out.clear();
    for (auto & st : streams_) out.push_back(st.head);
}

bool KvCache::usable(uint32_t st, uint32_t local) const {
    const CellStream & cs = streams_[st];
    if (cs.is_empty(local)) return true;
    if (!window_.active() || cs.seqs(local).count() != 1) return false;
    const SeqId owner = (SeqId)seq_begin(cs.seqs(local));
    const Pos last = cs.seq_pos_max(owner);
    return cs.pos(local) < last && window_.masked(cs.pos(local), last + 1);
}

// One ubatch's cells on the cache as it is now: per group (one per sequence set with separate streams, else one)
// the usable cells in ring order from the stream's head.
bool KvCache::search(const ValidBatch & batch, const Ubatch & ub, std::span<uint32_t> cells,
                     std::string & why) const {
    const size_t n_groups = n_stream() == 1 ? 1 : ub.sets.size();
    const size_t per = ub.size() / n_groups;
    const uint32_t n = kv_size_;
    for (size_t g = 0; g < n_groups; ++g) {
        const uint32_t st = stream_of(batch.first[ub.idx[g * per]]);
        const CellStream & cs = streams_[st];
        if (per > n) {
            why = "a ubatch of " + std::to_string(per) + " tokens does not fit in " + std::to_string(n) + " cells";
            return false;
        }
        uint32_t h = cs.head;
        if (h > cs.used() + 2 * per) h = 0;  // many holes before the head: rescan from 0
        size_t got = 0;
        for (uint32_t tested = 0; got < per && tested < n; ++tested, ++h) {
            if (h >= n) h = 0;
            if (usable(st, h)) cells[g * per + got++] = global(st, h);
        }
        if (got < per) {
            why = "no room: " + std::to_string(per) + " cells wanted in stream " + std::to_string(st) + ", " +
                  std::to_string(got) + " usable";
            return false;
        }
    }
    return true;
}

bool KvCache::find_slots(const ValidBatch & batch, const Split & split, std::vector<uint32_t> & cells,
                         std::string & why) {
    cells.resize(split.tokens().size());
    const size_t mark = journal_.size();
    heads(saved_heads_);
    bool ok = true;
    for (size_t u = 0; u < split.size() && ok; ++u) {
        const Ubatch ub = split[u];
        const std::span<uint32_t> ub_cells(cells.data() + ub.first, ub.size());
        ok = search(batch, ub, ub_cells, why);
        if (ok) place(batch, ub, ub_cells, false);  // no rows are written in a dry run
    }
    rollback(mark, saved_heads_);
    return ok;
}

void KvCache::record(uint32_t cell, bool save_rows) {
    const CellStream & cs = streams_[cell / kv_size_];
    const uint32_t i = cell % kv_size_;
    CellChange c{cell, cs.pos(i), cs.shift(i), cs.seqs(i), cs.ext(i), journal_rows_.size(), false};
    if (save_rows && !cs.is_empty(i)) {
        c.has_rows = true;
        for (uint32_t l = 0; l < n_layers(); ++l) {
            if (!held(l)) continue;
            journal_rows_.insert(journal_rows_.end(), k_row(l, cell), k_row(l, cell) + k_row_bytes_[l]);
            if (v_row_bytes_[l]) journal_rows_.insert(journal_rows_.end(), v_row(l, cell), v_row(l, cell) + v_row_bytes_[l]);
            if (idx_row_bytes_[l]) journal_rows_.insert(journal_rows_.end(), idx_row(l, cell), idx_row(l, cell) + idx_row_bytes_[l]);
        }
    }
    journal_.push_back(c);
}

void KvCache::take_from_owner(uint32_t st, uint32_t local) {
    CellStream & cs = streams_[st];
    const SeqId owner = (SeqId)seq_begin(cs.seqs(local));
    auto it = std::find_if(taken_.begin(), taken_.end(), [&](const Taken & t) { return t.st == st && t.owner == owner; });
    if (it == taken_.end()) {
        taken_.push_back({st, owner, cs.pos(local)});
    } else {
        it->upto = std::max(it->upto, cs.pos(local));
    }
    cs.free(local);
}

void KvCache::purge(bool journal, bool save_rows) {
    std::sort(taken_.begin(), taken_.end(),
              [](const Taken & a, const Taken & b) { return a.st != b.st ? a.st < b.st : a.owner < b.owner; });
    for (const Taken & t : taken_) {
        CellStream & cs = streams_[t.st];
        older_.clear();
        for (auto & [p, c] : cs.seq_cells(t.owner)) {
            if (p > t.upto) break;
            older_.push_back(c);
        }
        for (uint32_t c : older_) {
            if (journal) record(global(t.st, c), save_rows);
            cs.seq_remove(c, t.owner);
        }
    }
    taken_.clear();
}

SeqSet KvCache::place(const ValidBatch & batch, const Ubatch & ub, std::span<const uint32_t> cells, bool save_rows) {
    SeqSet lost;
    taken_.clear();
    for (size_t j = 0; j < ub.size(); ++j) {
        const uint32_t i = ub.idx[j];
        const uint32_t st = cells[j] / kv_size_, local = cells[j] % kv_size_;
        CellStream & cs = streams_[st];
        record(cells[j], save_rows);
        if (!cs.is_empty(local)) {  // window reuse (usable() admitted it)
            lost.set(seq_begin(cs.seqs(local)));
            take_from_owner(st, local);
        }
        cs.place(local, batch.pos[i], batch.seqs[i], CellExt{batch.pos_x[i], batch.pos_y[i], batch.tokens[i]});
    }
    purge(true, save_rows);
    for (size_t j = 0; j < ub.size(); ++j) streams_[cells[j] / kv_size_].head = cells[j] % kv_size_ + 1;
    return lost;
}

bool KvCache::take_cells(uint32_t st, size_t count, std::vector<uint32_t> & out, SeqSet & lost) {
    out.clear();
    CellStream & cs = streams_[st];
    for (uint32_t k = 0, i = cs.head; k < kv_size_ && out.size() < count; ++k, ++i) {
        if (i >= kv_size_) i = 0;
        if (usable(st, i)) out.push_back(i);
    }
    if (out.size() < count) return false;
    taken_.clear();
    for (uint32_t i : out) {
        if (cs.is_empty(i)) continue;
        lost.set(seq_begin(cs.seqs(i)));
        take_from_owner(st, i);
    }
    purge(false, false);
    return true;
}

void KvCache::rollback(size_t mark, const std::vector<uint32_t> & heads) {
    for (size_t e = journal_.size(); e-- > mark;) {
        const CellChange & c = journal_[e];
        CellStream & cs = streams_[c.cell / kv_size_];
        const uint32_t i = c.cell % kv_size_;
        if (!cs.is_empty(i)) cs.free(i);
        if (c.pos >= 0) cs.place_with_shift(i, c.pos, c.seqs, c.ext, c.shift);
        if (c.has_rows) {
            const uint8_t * r = journal_rows_.data() + c.rows_at;
            for (uint32_t l = 0; l < n_layers(); ++l) {
                if (!held(l)) continue;
                std::memcpy(k_row(l, c.cell), r, k_row_bytes_[l]);
                r += k_row_bytes_[l];
                if (v_row_bytes_[l]) {
                    std::memcpy(v_row(l, c.cell), r, v_row_bytes_[l]);
                    r += v_row_bytes_[l];
                }
                if (idx_row_bytes_[l]) {
                    std::memcpy(idx_row(l, c.cell), r, idx_row_bytes_[l]);
                    r += idx_row_bytes_[l];
                }
            }
        }
    }
    if (mark < journal_.size()) {
        journal_rows_.resize(journal_[mark].rows_at);
        journal_.resize(mark);
    }
    for (size_t st = 0; st < streams_.size() && st < heads.size(); ++st) streams_[st].head = heads[st];
}

void KvCache::journal_clear() {
    journal_.clear();
    journal_rows_.clear();
}

SeqSet KvCache::seq_rm(SeqId s, Pos p0, Pos p1) {
    std::tie(p0, p1) = normalize_range(p0, p1);
    SeqSet changed;
    if (p0 >= p1) return changed;
    if (s < 0) {
        for (auto & cs : streams_) {
            for (uint32_t i = 0; i < cs.size(); ++i) {
                if (cs.is_empty(i) || cs.pos(i) < p0 || cs.pos(i) >= p1) continue;
                changed |= cs.seqs(i);
                cs.free(i);
                cs.head = std::min(cs.head, i);
            }
        }
        return changed;
    }
    CellStream & cs = streams_[stream_of(s)];
    const std::vector<uint32_t> hit = cells_in_range(cs.seq_cells(s), p0, p1);
    for (uint32_t i : hit)
        if (cs.seq_remove(i, s)) cs.head = std::min(cs.head, i);
    if (!hit.empty()) changed.set(s);
    return changed;
}

void KvCache::copy_rows(uint32_t dst, uint32_t src) {
    for (uint32_t l = 0; l < n_layers(); ++l) {
        if (!held(l)) continue;
        std::memcpy(k_row(l, dst), k_row(l, src), k_row_bytes_[l]);
        if (v_row_bytes_[l]) std::memcpy(v_row(l, dst), v_row(l, src), v_row_bytes_[l]);
        if (idx_row_bytes_[l]) std::memcpy(idx_row(l, dst), idx_row(l, src), idx_row_bytes_[l]);
    }
}

SeqSet KvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
    SeqSet changed;
    if (src == dst) return changed;
    std::tie(p0, p1) = normalize_range(p0, p1);
    const uint32_t ss = stream_of(src), sd = stream_of(dst);
    if (ss == sd) {
        CellStream & cs = streams_[ss];
        const std::vector<uint32_t> hit = cells_in_range(cs.seq_cells(src), p0, p1);
        for (uint32_t i : hit) cs.seq_add(i, dst);
        if (!hit.empty()) changed.set(dst);
        return changed;
    }
    // Separate streams: dst's stream becomes a copy of src's cells (whole sequence), rows copied now.
    CellStream & from = streams_[ss];
    CellStream & to = streams_[sd];
    if (to.used() > 0) changed.set(dst);
    to.reset();
    SeqSet only;
    only.set(dst);
    for (auto & [pos, i] : from.seq_cells(src)) {
        to.place_with_shift(i, pos, only, from.ext(i), from.shift(i));
        copy_rows(global(sd, i), global(ss, i));
        changed.set(dst);
    }
    to.head = from.head;
    return changed;
}

SeqSet KvCache::seq_keep(SeqId s) {
    CellStream & cs = streams_[stream_of(s)];
    SeqSet changed;
    for (uint32_t i = 0; i < cs.size(); ++i) {
        if (cs.is_empty(i)) continue;
        SeqSet before = cs.seqs(i);
        before.reset(s);
        changed |= before;
        if (cs.seq_keep(i, s)) cs.head = std::min(cs.head, i);
    }
    return changed;
}

SeqSet KvCache::seq_add(SeqId s, Pos p0, Pos p1, Pos delta) {
    SeqSet changed;
    if (delta == 0) return changed;
    std::tie(p0, p1) = normalize_range(p0, p1);
    if (p0 >= p1) return changed;
    CellStream & cs = streams_[stream_of(s)];
    const std::vector<uint32_t> hit = cells_in_range(cs.seq_cells(s), p0, p1);
    for (uint32_t i : hit) {
        changed |= cs.seqs(i);  // a shared cell moves for every sequence in it
        if (cs.pos_add(i, delta)) cs.head = std::min(cs.head, i);
    }
    return changed;
}

SeqSet KvCache::seq_div(SeqId s, Pos p0, Pos p1, int d) {
    SeqSet changed;
    if (d == 1) return changed;
    std::tie(p0, p1) = normalize_range(p0, p1);
    if (p0 >= p1) return changed;
    CellStream & cs = streams_[stream_of(s)];
    const std::vector<uint32_t> hit = cells_in_range(cs.seq_cells(s), p0, p1);
    for (uint32_t i : hit) {
        changed |= cs.seqs(i);
        cs.pos_div(i, d);
    }
    return changed;
}

SeqSet KvCache::present() const {
    SeqSet out;
    for (auto & cs : streams_)
        for (int s = 0; s < kMaxSeq; ++s)
            if (!cs.seq_cells(s).empty()) out.set(s);
    return out;
}

void KvCache::clear(bool zero_data) {
    for (auto & cs : streams_) cs.reset();
    if (zero_data) {
        for (auto & b : k_) std::fill(b.begin(), b.end(), 0);
        for (auto & b : v_) std::fill(b.begin(), b.end(), 0);
        for (auto & b : idx_) std::fill(b.begin(), b.end(), 0);
    }
}

bool KvCache::has_shift() const {
    for (auto & cs : streams_)
        if (cs.has_shift()) return true;
    return false;
}

void KvCache::apply_shifts(const std::function<void(uint32_t, Pos, Pos)> & rotate) {
    for (uint32_t st = 0; st < n_stream(); ++st) {
        CellStream & cs = streams_[st];
        if (!cs.has_shift()) continue;
        for (uint32_t i = 0; i < cs.size(); ++i)
            if (!cs.is_empty(i) && cs.shift(i) != 0) rotate(global(st, i), cs.pos(i) - cs.shift(i), cs.pos(i));
        cs.reset_shift();
    }
}

}  // namespace offgrid::memory
