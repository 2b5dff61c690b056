// KvCache's part of a memory state (memory/state_io.h, docs/memory.md "State format"): the attention section (cell
// books, K and V rows) and the indexer section (the [raw | pooled] rows of the same cells).
#include <algorithm>
#include <cstring>

#include "memory/kv_cache.h"
#include "memory/state_bytes.h"

namespace offgrid::memory {

std::vector<KvCache::StateStream> KvCache::state_cells(SeqId seq) const {
    std::vector<StateStream> out(n_stream());
    for (uint32_t st = 0; st < n_stream(); ++st) {
        if (seq >= 0 && stream_of(seq) != st) continue;
        const CellStream & cs = streams_[st];
        for (uint32_t i = 0; i < cs.size(); ++i) {
            if (cs.is_empty(i)) continue;
            if (seq >= 0 && !cs.seqs(i).test(seq)) continue;
            StateCell c{cs.pos(i), cs.shift(i), cs.ext(i), cs.seqs(i), global(st, i)};
            if (seq >= 0) c.seqs = SeqSet().set(seq);
            out[st].cells.push_back(c);
        }
    }
    return out;
}

void KvCache::write_attention(const std::vector<StateStream> & streams, StateWriter & w) const {
    for (const StateStream & sd : streams) {
        w.u32((uint32_t)sd.cells.size());
        for (const StateCell & c : sd.cells) {
            w.i32(c.pos);
            w.i32(c.shift);
            w.i32(c.ext.x);
            w.i32(c.ext.y);
            w.i32(c.ext.tok);
            w.u32((uint32_t)c.seqs.count());
            for (size_t s = seq_begin(c.seqs); s < c.seqs.size(); s = seq_next(c.seqs, s)) w.i32((int32_t)s);
        }
        for (uint32_t l = 0; l < n_layers(); ++l) {
            // A layer this memory does not hold keeps its place in the layout, as zeros.
            const auto rows = [&](const RowArray & a, uint32_t bytes) {
                for (const StateCell & c : sd.cells) {
                    if (held(l)) w.raw(a.data() + (size_t)c.cell * bytes, bytes);
                    else w.zeros(bytes);
                }
            };
            rows(k_[l], decl_k_[l]);
            if (decl_v_[l] == 0) continue;  // no V rows (v_width 0)
            rows(v_[l], decl_v_[l]);
        }
    }
}

void KvCache::write_indexer(const std::vector<StateStream> & streams, StateWriter & w) const {
    for (const StateStream & sd : streams)
        for (uint32_t l = 0; l < n_layers(); ++l) {
            if (decl_idx_[l] == 0) continue;  // no indexer rows on this layer
            for (const StateCell & c : sd.cells) {
                if (held(l)) w.raw(idx_[l].data() + (size_t)c.cell * decl_idx_[l], decl_idx_[l]);
                else w.zeros(decl_idx_[l]);
            }
        }
}

std::vector<KvCache::StateStream> KvCache::read_attention(StateReader & r, SeqId seq, uint32_t n_seq_max) const {
    std::vector<StateStream> streams(n_stream());
    for (uint32_t st = 0; st < n_stream(); ++st) {
        const uint32_t count = r.u32("cell_count");
        if (count > kv_size_) r.fail("cell_count", std::to_string(count) + " cells for a stream of " + std::to_string(kv_size_));
        StateStream & sd = streams[st];
        for (uint32_t i = 0; i < count; ++i) {
            StateCell c{};
            c.pos = r.i32("cell pos");
            if (c.pos < 0 || c.pos > kMaxStatePos)
                r.fail("cell pos", "position " + std::to_string(c.pos) + " is outside [0, " + std::to_string(kMaxStatePos) +
                                       "]: the memory could not continue it");
            c.shift = r.i32("cell shift");
            c.ext.x = r.i32("cell x");
            c.ext.y = r.i32("cell y");
            c.ext.tok = r.i32("cell token");
            const uint32_t n = r.u32("cell n_seq");
            if (n == 0 || n > n_seq_max) r.fail("cell n_seq", std::to_string(n) + " sequences in one cell");
            for (uint32_t k = 0; k < n; ++k) {
                const int32_t s = r.i32("cell seq id");
                if (s < 0 || (uint32_t)s >= n_seq_max) r.fail("cell seq id", "sequence id " + std::to_string(s) + " is out of range");
                if (seq < 0 && n_stream() > 1 && (uint32_t)s != st)
                    r.fail("cell seq id", "sequence " + std::to_string(s) + " stored in stream " + std::to_string(st));
                c.seqs.set(s);
            }
            sd.cells.push_back(c);
        }
        for (uint32_t l = 0; l < n_layers(); ++l) {
            sd.k.push_back(r.take((size_t)count * decl_k_[l], "K rows"));
            sd.v.push_back(r.take((size_t)count * decl_v_[l], "V rows"));
        }
    }
    return streams;
}

void KvCache::read_indexer(StateReader & r, std::vector<StateStream> & streams) const {
    for (StateStream & sd : streams)
        for (uint32_t l = 0; l < n_layers(); ++l) sd.idx.push_back(r.take(sd.cells.size() * decl_idx_[l], "indexer rows"));
}

void KvCache::restore_cells(const std::vector<StateStream> & streams) {
    for (const StateStream & sd : streams) {
        for (size_t i = 0; i < sd.cells.size(); ++i) {
            const StateCell & c = sd.cells[i];
            CellStream & cs = streams_[c.cell / kv_size_];
            const uint32_t local = c.cell % kv_size_;
            cs.place_with_shift(local, c.pos, c.seqs, c.ext, c.shift);
            cs.head = std::max(cs.head, local + 1);
            for (uint32_t l = 0; l < n_layers(); ++l) {
                if (!held(l)) continue;  // rows of a layer this memory does not hold are skipped
                std::memcpy(k_row(l, c.cell), sd.k[l] + i * k_row_bytes_[l], k_row_bytes_[l]);
                if (v_row_bytes_[l]) std::memcpy(v_row(l, c.cell), sd.v[l] + i * v_row_bytes_[l], v_row_bytes_[l]);
                if (idx_row_bytes_[l] && !sd.idx.empty()) std::memcpy(idx_row(l, c.cell), sd.idx[l] + i * idx_row_bytes_[l], idx_row_bytes_[l]);
            }
        }
    }
}

}  // namespace offgrid::memory
