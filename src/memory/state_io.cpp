#include "memory/state_io.h"

#include <cstring>
#include <map>

#include "common/error.h"

namespace offgrid::memory {

namespace {

class Writer {
public:
    void u32(uint32_t v) { raw(&v, 4); }
    void i32(int32_t v) { raw(&v, 4); }
    void raw(const void * p, size_t n) {
        const uint8_t * b = (const uint8_t *)p;
        out.insert(out.end(), b, b + n);
    }
    std::vector<uint8_t> out;
};

class Reader {
public:
    Reader(std::span<const uint8_t> d, const std::string & name) : d_(d), name_(name) {}
    uint32_t u32(const char * field) {
        uint32_t v;
        raw(&v, 4, field);
        return v;
    }
    int32_t i32(const char * field) {
        int32_t v;
        raw(&v, 4, field);
        return v;
    }
    void raw(void * p, size_t n, const char * field) {
        if (n > d_.size() - off_) truncated_ = true;
        if (n > d_.size() - off_) fail(field, "truncated: " + std::to_string(n) + " bytes wanted, " +
                                                  std::to_string(d_.size() - off_) + " left");
        if (n > 0) std::memcpy(p, d_.data() + off_, n);  // an empty destination may be a null pointer
        off_ += n;
    }
    const uint8_t * take(size_t n, const char * field) {
        if (n > d_.size() - off_) truncated_ = true;
        if (n > d_.size() - off_) fail(field, "truncated: " + std::to_string(n) + " bytes wanted, " +
                                                  std::to_string(d_.size() - off_) + " left");
        const uint8_t * p = d_.data() + off_;
        off_ += n;
        return p;
    }
    [[noreturn]] void fail(const std::string & field, const std::string & what) const {
        throw FileError(name_, off_, field, what);
    }
    size_t offset() const { return off_; }
    size_t left() const { return d_.size() - off_; }
    bool truncated() const { return truncated_; }

private:
    bool truncated_ = false;
    std::span<const uint8_t> d_;
    std::string name_;
    size_t off_ = 0;
};

// Everything in the header that must match the memory reading it.
std::vector<std::pair<const char *, uint32_t>> fingerprint(const HybridMemory & mem) {
    const MemoryParams & p = mem.params();
    return {
        {"n_stream", mem.kv().n_stream()},       {"cells_per_stream", mem.kv().kv_size()},
        {"n_seq_max", p.n_seq_max},              {"n_attn_layers", p.shape.n_attn_layers},
        {"k_width", p.shape.k_width},            {"v_width", p.shape.v_width},
        {"idx_width", p.shape.idx_width},        {"idx_parts", p.shape.idx_width > 0 ? p.shape.idx_parts : 0u},
        {"type_k", (uint32_t)p.shape.type_k},    {"type_v", (uint32_t)p.shape.type_v},
        {"n_recr_layers", p.shape.n_recr_layers}, {"conv_floats", p.shape.conv_floats},
        {"ssm_floats", p.shape.ssm_floats},      {"ple_floats", p.shape.ple_floats},
        {"n_rs_seq", p.n_rs_seq},                {"kpool", p.kpool},
        {"by_order", p.by_order ? 1u : 0u},
    };
}

struct CellRecord {
    Pos pos, shift;
    CellExt ext;
    SeqSet seqs;
    uint32_t cell = 0;  // where it was (save) / goes (load), global
};

struct RecRecord {
    SeqId seq;
    Pos pos;
    uint32_t snaps;
    std::vector<float> planes;
};

// The cells a save covers, in stream order then cell order.
std::vector<std::vector<CellRecord>> saved_cells(const HybridMemory & mem, SeqId seq) {
    const KvCache & kv = mem.kv();
    std::vector<std::vector<CellRecord>> out(kv.n_stream());
    for (uint32_t st = 0; st < kv.n_stream(); ++st) {
        if (seq >= 0 && kv.stream_of(seq) != st) continue;
        const CellStream & cs = kv.stream(st);
        for (uint32_t i = 0; i < cs.size(); ++i) {
            if (cs.is_empty(i)) continue;
            if (seq >= 0 && !cs.seqs(i).test(seq)) continue;
            CellRecord r{cs.pos(i), cs.shift(i), cs.ext(i), cs.seqs(i), kv.global(st, i)};
            if (seq >= 0) r.seqs = SeqSet().set(seq);
            out[st].push_back(r);
        }
    }
    return out;
}

// Header: a mismatch is a refusal and changes nothing.
void read_header(Reader & r, const HybridMemory & mem, SeqId seq, uint32_t flags) {
    if (r.u32("magic") != kStateMagic) r.fail("magic", "not an offgrid memory state");
    const uint32_t version = r.u32("version");
    if (version != kStateVersion)
        r.fail("version", "version " + std::to_string(version) + ", this build reads " + std::to_string(kStateVersion));
    const uint32_t kind = r.u32("kind");
    if (kind != (seq < 0 ? 0u : 1u))
        r.fail("kind", seq < 0 ? "a sequence state cannot replace the whole context"
                               : "a whole-context state cannot be read into one sequence");
    const uint32_t saved_flags = r.u32("flags");
    if (saved_flags != flags)
        r.fail("flags", "saved with flags " + std::to_string(saved_flags) + ", read with " + std::to_string(flags));
    r.i32("source seq id");
    for (auto & [field, v] : fingerprint(mem)) {
        const uint32_t got = r.u32(field);
        if (got != v) r.fail(field, "the state was made with " + std::to_string(got) + ", this memory has " + std::to_string(v));
    }

}

}  // namespace

std::vector<uint8_t> state_save(const HybridMemory & mem_c, SeqId seq, uint32_t flags) {
    if (mem_c.in_call()) throw Error("state_save: not allowed while a decode call is in progress");
    if (seq < -1 || seq >= (SeqId)mem_c.params().n_seq_max)
        throw Error("state_save: sequence id " + std::to_string(seq) + " is out of range");
    HybridMemory & mem = const_cast<HybridMemory &>(mem_c);  // row access only; nothing is modified
    KvCache & kv = mem.kv();
    Writer w;
    w.u32(kStateMagic);
    w.u32(kStateVersion);
    w.u32(seq < 0 ? 0 : 1);
    w.u32(flags);
    w.i32(seq);
    for (auto & [name, v] : fingerprint(mem)) w.u32(v);

    const bool partial = (flags & kPartialOnly) != 0;
    const auto cells = saved_cells(mem, seq);
    if (!partial) {
        // Attention: per stream the cell books, then per layer the K rows and the V rows of those cells.
        for (uint32_t st = 0; st < kv.n_stream(); ++st) {
            w.u32((uint32_t)cells[st].size());
            for (auto & r : cells[st]) {
                w.i32(r.pos);
                w.i32(r.shift);
                w.i32(r.ext.x);
                w.i32(r.ext.y);
                w.i32(r.ext.tok);
                w.u32((uint32_t)r.seqs.count());
                for (size_t s = r.seqs._Find_first(); s < r.seqs.size(); s = r.seqs._Find_next(s)) w.i32((int32_t)s);
            }
            for (uint32_t l = 0; l < kv.n_layers(); ++l) {
                for (auto & r : cells[st]) w.raw(kv.k_row(l, r.cell), kv.k_row_bytes());
                for (auto & r : cells[st]) w.raw(kv.v_row(l, r.cell), kv.v_row_bytes());
            }
        }
    }
    // Recurrent: per sequence its position, valid snapshots and every plane of its state.
    const RecurrentCache & rec = mem.recurrent();
    std::vector<SeqId> rs;
    for (SeqId s = 0; s < (SeqId)mem.params().n_seq_max; ++s)
        if ((seq < 0 || s == seq) && rec.present(s)) rs.push_back(s);
    w.u32((uint32_t)rs.size());
    for (SeqId s : rs) {
        w.i32(s);
        w.i32(rec.pos(s));
        w.u32(rec.seq(s).snaps);
        std::vector<float> planes;
        rec.read_slot(rec.slot_of(s), 1 + rec.n_rs_seq(), planes);
        w.raw(planes.data(), planes.size() * 4);
    }
    if (!partial && kv.idx_row_bytes() > 0) {
        // Indexer: per layer the [raw | pooled] rows of the attention section's cells, in the same order.
        for (uint32_t st = 0; st < kv.n_stream(); ++st)
            for (uint32_t l = 0; l < kv.n_layers(); ++l)
                for (auto & r : cells[st]) w.raw(kv.idx_row(l, r.cell), kv.idx_row_bytes());
    }
    return std::move(w.out);
}

void state_load(HybridMemory & mem, std::span<const uint8_t> data, SeqId seq, uint32_t flags, const std::string & name) {
    if (mem.in_call()) throw Error("state_load: not allowed while a decode call is in progress");
    if (seq < -1 || seq >= (SeqId)mem.params().n_seq_max)
        throw Error("state_load: sequence id " + std::to_string(seq) + " is out of range");
    Reader r(data, name);
    try {
        read_header(r, mem, seq, flags);
    } catch (const FileError &) {
        if (r.truncated()) mem.drop(seq);  // a cut state fails like any other; a mismatch is a refusal
        throw;
    }
    // Parse the whole body before touching the memory; any failure from here on drops the destination.
    KvCache & kv = mem.kv();
    RecurrentCache & rec = mem.recurrent();
    const bool partial = (flags & kPartialOnly) != 0;
    const uint32_t n_seq_max = mem.params().n_seq_max;
    struct StreamData {
        std::vector<CellRecord> cells;
        std::vector<const uint8_t *> k, v, idx;  // per layer: the rows of all cells, back to back
    };
    std::vector<StreamData> streams(kv.n_stream());
    std::vector<RecRecord> recs;
    try {
        if (!partial) {
            for (uint32_t st = 0; st < kv.n_stream(); ++st) {
                const uint32_t count = r.u32("cell_count");
                if (count > kv.kv_size())
                    r.fail("cell_count", std::to_string(count) + " cells for a stream of " + std::to_string(kv.kv_size()));
                auto & sd = streams[st];
                for (uint32_t i = 0; i < count; ++i) {
                    CellRecord c;
                    c.pos = r.i32("cell pos");
                    if (c.pos < 0) r.fail("cell pos", "negative position " + std::to_string(c.pos));
                    c.shift = r.i32("cell shift");
                    c.ext.x = r.i32("cell x");
                    c.ext.y = r.i32("cell y");
                    c.ext.tok = r.i32("cell token");
                    const uint32_t n = r.u32("cell n_seq");
                    if (n == 0 || n > n_seq_max) r.fail("cell n_seq", std::to_string(n) + " sequences in one cell");
                    for (uint32_t k = 0; k < n; ++k) {
                        const int32_t s = r.i32("cell seq id");
                        if (s < 0 || (uint32_t)s >= n_seq_max) r.fail("cell seq id", "sequence id " + std::to_string(s) + " is out of range");
                        if (seq < 0 && kv.n_stream() > 1 && (uint32_t)s != st)
                            r.fail("cell seq id", "sequence " + std::to_string(s) + " stored in stream " + std::to_string(st));
                        c.seqs.set(s);
                    }
                    sd.cells.push_back(c);
                }
                for (uint32_t l = 0; l < kv.n_layers(); ++l) {
                    sd.k.push_back(r.take((size_t)count * kv.k_row_bytes(), "K rows"));
                    sd.v.push_back(r.take((size_t)count * kv.v_row_bytes(), "V rows"));
                }
            }
        }
        const uint32_t n_rec = r.u32("recurrent count");
        if (n_rec > (seq < 0 ? n_seq_max : 1u)) r.fail("recurrent count", std::to_string(n_rec) + " states");
        SeqSet seen;
        const size_t slot_floats = rec.slot_floats();
        for (uint32_t i = 0; i < n_rec; ++i) {
            RecRecord rr;
            rr.seq = r.i32("recurrent seq id");
            if (rr.seq < 0 || (uint32_t)rr.seq >= n_seq_max) r.fail("recurrent seq id", "sequence id " + std::to_string(rr.seq) + " is out of range");
            if (seq < 0 && seen.test(rr.seq)) r.fail("recurrent seq id", "sequence " + std::to_string(rr.seq) + " appears twice");
            seen.set(rr.seq);
            rr.pos = r.i32("recurrent pos");
            if (rr.pos < 0) r.fail("recurrent pos", "negative position");
            rr.snaps = r.u32("recurrent snapshots");
            if (rr.snaps > rec.n_rs_seq()) r.fail("recurrent snapshots", std::to_string(rr.snaps) + " > n_rs_seq");
            rr.planes.resize(slot_floats);
            r.raw(rr.planes.data(), slot_floats * 4, "recurrent rows");
            recs.push_back(std::move(rr));
        }
        if (!partial && kv.idx_row_bytes() > 0) {
            for (uint32_t st = 0; st < kv.n_stream(); ++st)
                for (uint32_t l = 0; l < kv.n_layers(); ++l)
                    streams[st].idx.push_back(r.take(streams[st].cells.size() * kv.idx_row_bytes(), "indexer rows"));
        }
        if (r.left() != 0) r.fail("end", std::to_string(r.left()) + " bytes after the last section");

        // The sections must describe the same sequences at the same last positions. A partial state is checked
        // against the attention cells already in memory.
        if (mem.has_recurrent()) {
            std::map<SeqId, Pos> last;
            if (!partial) {
                for (auto & sd : streams)
                    for (auto & c : sd.cells)
                        for (size_t s = c.seqs._Find_first(); s < c.seqs.size(); s = c.seqs._Find_next(s)) {
                            const SeqId key = seq >= 0 ? seq : (SeqId)s;
                            auto [it, fresh] = last.try_emplace(key, c.pos);
                            if (!fresh) it->second = std::max(it->second, c.pos);
                        }
            } else {
                for (SeqId s = 0; s < (SeqId)n_seq_max; ++s)
                    if ((seq < 0 || s == seq) && kv.seq_pos_max(s) >= 0) last[s] = kv.seq_pos_max(s);
            }
            if (last.size() != recs.size())
                r.fail("recurrent count", "the recurrent section does not cover the same sequences as the attention cells");
            for (auto & rr : recs) {
                const SeqId s = seq >= 0 ? seq : rr.seq;
                if (!last.count(s) || last[s] != rr.pos)
                    r.fail("recurrent pos", "sequence " + std::to_string(s) + " ends at " + std::to_string(rr.pos) +
                                                " in the recurrent section but not in the attention cells");
            }
        }
    } catch (const FileError &) {
        mem.drop(seq);
        throw;
    }

    // Apply. Only "no room" can still fail.
    const size_t off = r.offset();
    if (seq < 0) {
        if (!partial) {
            mem.clear();
            for (uint32_t st = 0; st < kv.n_stream(); ++st) {
                auto & sd = streams[st];
                for (size_t i = 0; i < sd.cells.size(); ++i) sd.cells[i].cell = kv.global(st, (uint32_t)i);
            }
        } else {
            for (SeqId s = 0; s < (SeqId)n_seq_max; ++s) rec.drop(s);
        }
    } else {
        if (!partial) {
            mem.drop(seq);
            // Fragmented placement is fine: any free cells of the sequence's stream, scanned from the head.
            const uint32_t st = kv.stream_of(seq);
            size_t total = 0;
            for (auto & sd : streams) total += sd.cells.size();
            // With a window, cells out of their owners' windows may be taken, as a decode takes them.
            std::vector<uint32_t> free_cells;
            SeqSet lost;
            if (!kv.take_cells(st, total, free_cells, lost)) {
                throw FileError(name, off, "cell_count",
                                "no room: " + std::to_string(total) + " cells wanted, " + std::to_string(free_cells.size()) + " free");
            }
            mem.relayout(lost);
            size_t k = 0;
            for (auto & sd : streams)
                for (auto & c : sd.cells) {
                    c.cell = kv.global(st, free_cells[k++]);
                    c.seqs = SeqSet().set(seq);
                }
        } else {
            rec.drop(seq);
        }
    }
    if (!partial) {
        for (uint32_t st = 0; st < kv.n_stream(); ++st) {
            auto & sd = streams[st];
            for (size_t i = 0; i < sd.cells.size(); ++i) {
                const CellRecord & c = sd.cells[i];
                CellStream & cs = kv.stream(c.cell / kv.kv_size());
                const uint32_t local = c.cell % kv.kv_size();
                cs.place_with_shift(local, c.pos, c.seqs, c.ext, c.shift);
                cs.head = std::max(cs.head, local + 1);
                for (uint32_t l = 0; l < kv.n_layers(); ++l) {
                    std::memcpy(kv.k_row(l, c.cell), sd.k[l] + i * kv.k_row_bytes(), kv.k_row_bytes());
                    if (kv.has_v()) std::memcpy(kv.v_row(l, c.cell), sd.v[l] + i * kv.v_row_bytes(), kv.v_row_bytes());
                    if (!sd.idx.empty())
                        std::memcpy(kv.idx_row(l, c.cell), sd.idx[l] + i * kv.idx_row_bytes(), kv.idx_row_bytes());
                }
            }
        }
    }
    for (auto & rr : recs) {
        const SeqId s = seq >= 0 ? seq : rr.seq;
        rec.claim(s);
        rec.write_slot((uint32_t)s, 1 + rec.n_rs_seq(), rr.planes.data());
        rec.set_state(s, RecurrentCache::SeqState{rr.pos, -1, rr.snaps});
    }
    // The pool layout follows the new cells; every restored sequence is pooled again at its next decode.
    SeqSet all;
    for (SeqId s = 0; s < (SeqId)n_seq_max; ++s)
        if (seq < 0 || s == seq) all.set(s);
    mem.relayout(all);
    for (SeqId s = 0; s < (SeqId)n_seq_max; ++s)
        if (all.test(s)) mem.layout().mark_stale(s, 0);
}

}  // namespace offgrid::memory
