// The memory state's format (memory/state_io.h): header and framing here; each cache reads and writes its own
// sections (KvCache: kv_state.cpp, RecurrentCache: recurrent_state.cpp); HybridMemory keeps them in step.
#include "memory/state_io.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "common/crc32c.h"
#include "common/error.h"
#include "memory/state_bytes.h"
#include "tensor/types.h"

namespace offgrid::memory {

namespace {

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
        {"ssm_floats", p.shape.ssm_floats},      {"row_floats", p.shape.row_floats},
        {"n_rs_seq", p.n_rs_seq},                {"kpool", p.kpool},
        {"by_order", p.by_order ? 1u : 0u},
    };
}

// Header: a mismatch is a refusal and changes nothing. The checksum was verified first (frame()).
void read_header(StateReader & r, const HybridMemory & mem, SeqId seq, uint32_t flags) {
    r.u32("magic");
    r.u32("version");
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
        if (got == v) continue;
        // Element types by name (q8_0, f16), not by ggml type number.
        const bool is_type = std::strcmp(field, "type_k") == 0 || std::strcmp(field, "type_v") == 0;
        auto show = [&](uint32_t x) {
            if (!is_type) return std::to_string(x);
            const auto t = tensor::type_traits(x);
            return t ? std::string(t->name) : "type " + std::to_string(x);
        };
        r.fail(field, "the state was made with " + show(got) + ", this memory has " + show(v));
    }
}

constexpr const char * kSectionNames[3] = {"attention section", "recurrent section", "indexer section"};
constexpr size_t kShapeFields = 17;  // fingerprint()'s entries
constexpr size_t kHeaderBytes = (5 + kShapeFields) * 4;  // magic, version, kind, flags, source seq id, the shape

struct Frame {
    std::span<const uint8_t> header;   // up to the header checksum
    std::span<const uint8_t> body[3];  // attention, recurrent, indexer
    size_t body_at[3] = {0, 0, 0};     // offsets of the bodies in the state
};

// Checks the framing and every checksum before anything is parsed: a damaged state is refused whole, with the
// offset of the damaged part, and nothing changes.
Frame frame(std::span<const uint8_t> data, const std::string & name) {
    StateReader r(data, name);
    if (r.u32("magic") != kStateMagic) r.fail("magic", "not an offgrid memory state");
    const uint32_t version = r.u32("version");
    if (version != kStateVersion) {
        r.fail("version", "version " + std::to_string(version) + ", this build reads version " +
                              std::to_string(kStateVersion) +
                              (version < kStateVersion ? " only (older states lack checksums or staleness marks: save them again)" : ""));
    }
    if (data.size() < kHeaderBytes + 4) r.fail("header", "truncated: " + std::to_string(data.size()) + " bytes");
    Frame f;
    f.header = data.subspan(0, kHeaderBytes);
    uint32_t stored = 0;
    std::memcpy(&stored, data.data() + kHeaderBytes, 4);
    if (crc32c(f.header.data(), f.header.size()) != stored) {
        throw FileError(name, 0, "header", "checksum mismatch: the header (bytes 0.." + std::to_string(kHeaderBytes) +
                                               ") is damaged");
    }
    size_t at = kHeaderBytes + 4;
    for (int k = 0; k < 3; ++k) {
        StateReader fr(data.subspan(at), name, at);
        uint64_t n = 0;
        fr.raw(&n, 8, kSectionNames[k]);
        const uint32_t crc = fr.u32(kSectionNames[k]);
        if (n > fr.left()) {
            throw FileError(name, at, kSectionNames[k], "size " + std::to_string(n) + " runs past the end (" +
                                                            std::to_string(fr.left()) + " bytes left): damaged or cut");
        }
        f.body_at[k] = at + 12;
        f.body[k] = data.subspan(at + 12, static_cast<size_t>(n));
        if (crc32c(f.body[k].data(), f.body[k].size()) != crc) {
            throw FileError(name, at, kSectionNames[k], "checksum mismatch: the section (bytes " + std::to_string(at) +
                                                            ".." + std::to_string(at + 12 + n) + ") is damaged");
        }
        at += 12 + static_cast<size_t>(n);
    }
    if (at != data.size()) throw FileError(name, at, "end", std::to_string(data.size() - at) + " bytes after the last section");
    return f;
}

void put_section(StateWriter & out, const std::vector<uint8_t> & body) {
    const uint64_t n = body.size();
    out.raw(&n, 8);
    out.u32(crc32c(body.data(), body.size()));
    out.raw(body.data(), body.size());
}

}  // namespace

void state_reseal(std::span<uint8_t> data) {
    if (data.size() < kHeaderBytes + 4) return;
    const uint32_t h = crc32c(data.data(), kHeaderBytes);
    std::memcpy(data.data() + kHeaderBytes, &h, 4);
    size_t at = kHeaderBytes + 4;
    for (int k = 0; k < 3 && data.size() - at >= 12; ++k) {
        uint64_t n = 0;
        std::memcpy(&n, data.data() + at, 8);
        if (n > data.size() - at - 12) return;
        const uint32_t crc = crc32c(data.data() + at + 12, static_cast<size_t>(n));
        std::memcpy(data.data() + at + 8, &crc, 4);
        at += 12 + static_cast<size_t>(n);
    }
}

std::vector<uint8_t> HybridMemory::save_state(SeqId seq, uint32_t flags, Pos from) const {
    check_idle("state_save");
    if (seq < -1 || seq >= (SeqId)params_.n_seq_max)
        throw Error("state_save: sequence id " + std::to_string(seq) + " is out of range");
    const bool append = (flags & kAppend) != 0;
    if (append && (seq < 0 || (flags & kPartialOnly) != 0))
        throw Error("state_save: a sequence tail is saved from one sequence, with its cells");
    if (!append && from != 0) throw Error("state_save: a first position needs kAppend");
    StateWriter w;
    w.u32(kStateMagic);
    w.u32(kStateVersion);
    w.u32(seq < 0 ? 0 : 1);
    w.u32(flags);
    w.i32(seq);
    for (auto & [name, v] : fingerprint(*this)) w.u32(v);
    if (w.out.size() != kHeaderBytes) throw std::logic_error("state_save: the header has " + std::to_string(w.out.size()) + " bytes");
    w.u32(crc32c(w.out.data(), w.out.size()));

    const bool partial = (flags & kPartialOnly) != 0;
    StateWriter att, recw, idxw;
    if (!partial) {
        auto cells = kv_.state_cells(seq);
        if (append)
            for (auto & sd : cells)
                std::erase_if(sd.cells, [from](const KvCache::StateCell & c) { return c.pos < from; });
        kv_.write_attention(cells, att);
        // Staleness first (version 4): the saved pooled keys are those of the memory, stale ones included, so a
        // restore carries the marks instead of pooling every restored sequence again.
        if (has_pools()) {
            for (SeqId s = 0; s < (SeqId)params_.n_seq_max; ++s)
                if (seq < 0 || s == seq) idxw.i32(layout_.stale(s));
        }
        kv_.write_indexer(cells, idxw);
    }
    rec_.write_states(seq, params_.n_seq_max, recw);
    put_section(w, att.out);
    put_section(w, recw.out);
    put_section(w, idxw.out);
    return std::move(w.out);
}

void HybridMemory::load_state(std::span<const uint8_t> data, SeqId seq, uint32_t flags, const std::string & name) {
    check_idle("state_load");
    if (seq < -1 || seq >= (SeqId)params_.n_seq_max)
        throw Error("state_load: sequence id " + std::to_string(seq) + " is out of range");
    // Framing and checksums, then the header: any failure so far is a refusal, and nothing changes.
    const Frame f = frame(data, name);
    {
        StateReader h(f.header, name);
        read_header(h, *this, seq, flags);
    }
    StateReader ra(f.body[0], name, f.body_at[0]), rrec(f.body[1], name, f.body_at[1]), ri(f.body[2], name, f.body_at[2]);
    // Parse the whole body before touching the memory; any failure from here on drops the destination.
    const bool partial = (flags & kPartialOnly) != 0;
    const bool append = (flags & kAppend) != 0;
    if (append && seq < 0) throw Error("state_load: a sequence tail extends one sequence, not the whole context");
    const Pos before = append ? kv_.seq_pos_max(seq) : -1;  // the destination's last position (-1: empty)
    const uint32_t n_seq_max = params_.n_seq_max;
    std::vector<KvCache::StateStream> streams(kv_.n_stream());
    std::vector<RecurrentCache::StateRecord> recs;
    std::vector<Pos> stale;  // per saved sequence (one for a sequence state)
    try {
        if (!partial) streams = kv_.read_attention(ra, seq, n_seq_max);
        recs = rec_.read_states(rrec, seq, n_seq_max);
        if (!partial && has_pools()) {
            for (SeqId s = 0; s < (seq < 0 ? (SeqId)n_seq_max : 1); ++s) {
                stale.push_back(ri.i32("stale mark"));
                if (stale.back() < 0) ri.fail("stale mark", "negative position " + std::to_string(stale.back()));
            }
        }
        if (!partial) kv_.read_indexer(ri, streams);
        for (StateReader * sr : {&ra, &rrec, &ri})
            if (sr->left() != 0) sr->fail("end", std::to_string(sr->left()) + " bytes after the section's last field");
        if (append) {
            // The tail continues the sequence: its first position is the one after the sequence's last.
            Pos first = kPosInf;
            for (auto & sd : streams)
                for (auto & c : sd.cells) first = std::min(first, c.pos);
            if (first != kPosInf && before >= 0 && first != before + 1)
                ra.fail("cell pos", "the tail starts at position " + std::to_string(first) + ", the sequence ends at " +
                                        std::to_string(before) + ": it does not continue it");
        }

        // The sections must describe the same sequences at the same last positions (invariant 5). A partial state
        // is checked against the attention cells already in memory.
        if (has_recurrent_) {
            std::map<SeqId, Pos> last;
            if (!partial) {
                for (auto & sd : streams)
                    for (auto & c : sd.cells)
                        for (size_t s = seq_begin(c.seqs); s < c.seqs.size(); s = seq_next(c.seqs, s)) {
                            const SeqId key = seq >= 0 ? seq : (SeqId)s;
                            auto [it, fresh] = last.try_emplace(key, c.pos);
                            if (!fresh) it->second = std::max(it->second, c.pos);
                        }
            } else {
                for (SeqId s = 0; s < (SeqId)n_seq_max; ++s)
                    if ((seq < 0 || s == seq) && kv_.seq_pos_max(s) >= 0) last[s] = kv_.seq_pos_max(s);
            }
            if (last.size() != recs.size())
                rrec.fail("recurrent count", "the recurrent section does not cover the same sequences as the attention cells");
            for (auto & rr : recs) {
                const SeqId s = seq >= 0 ? seq : rr.seq;
                if (!last.count(s) || last[s] != rr.pos)
                    rrec.fail("recurrent pos", "sequence " + std::to_string(s) + " ends at " + std::to_string(rr.pos) +
                                                   " in the recurrent section but not in the attention cells");
            }
        }
    } catch (const FileError &) {
        drop(seq);
        throw;
    }

    // Where the cells go. Only "no room" can still fail.
    if (seq < 0) {
        if (!partial) {
            clear();
            for (uint32_t st = 0; st < kv_.n_stream(); ++st) {
                auto & sd = streams[st];
                for (size_t i = 0; i < sd.cells.size(); ++i) sd.cells[i].cell = kv_.global(st, (uint32_t)i);
            }
        } else {
            for (SeqId s = 0; s < (SeqId)n_seq_max; ++s) rec_.drop(s);
        }
    } else if (!partial) {
        if (append) rec_.drop(seq);  // its cells stay; the recurrent state is the tail's
        else drop(seq);
        // Fragmented placement is fine: any free cells of the sequence's stream, scanned from the head. With a
        // window, cells out of their owners' windows may be taken, as a decode takes them.
        const uint32_t st = kv_.stream_of(seq);
        size_t total = 0;
        for (auto & sd : streams) total += sd.cells.size();
        std::vector<uint32_t> free_cells;
        SeqSet lost;
        if (!kv_.take_cells(st, total, free_cells, lost)) {
            throw FileError(name, f.body_at[0], "cell_count",
                            "no room: " + std::to_string(total) + " cells wanted, " + std::to_string(free_cells.size()) + " free");
        }
        relayout(lost);
        size_t k = 0;
        for (auto & sd : streams)
            for (auto & c : sd.cells) {
                // Cells placed out of their saved order could regroup equal positions into other pools.
                if (k > 0 && free_cells[k] < free_cells[k - 1] && !stale.empty()) stale[0] = 0;
                c.cell = kv_.global(st, free_cells[k++]);
                c.seqs = SeqSet().set(seq);
            }
    } else {
        rec_.drop(seq);
    }
    if (!partial) kv_.restore_cells(streams);
    rec_.restore_states(recs, seq);
    // The pool layout follows the new cells. The rows came with their pooled keys and the cells keep their saved
    // order (whole restores compact them in order; a sequence restore checked it above), so every pool has the
    // members it was pooled from and the saved staleness marks hold. A partial state (recurrent rows only) leaves
    // the cells in memory, whose pools are pooled again.
    SeqSet all;
    for (SeqId s = 0; s < (SeqId)n_seq_max; ++s)
        if (seq < 0 || s == seq) all.set(s);
    relayout(all);
    for (SeqId s = 0; s < (SeqId)n_seq_max; ++s) {
        if (!all.test(s)) continue;
        if (stale.empty()) layout_.mark_stale(s, 0);
        else if (append) layout_.mark_stale(s, stale[0]);  // the cells before keep their own mark
        else layout_.set_stale(s, stale[seq < 0 ? (size_t)s : 0]);
    }
    // The scan's copies of the pooled keys are brought up to date here rather than by the first decode after the
    // restore: that decode is what a benchmark or a client times (a 64k sequence: 8 MiB of keys gathered from the
    // rep rows, about 3 ms). The same bytes either way (pool_keys copies whatever is past the valid prefix).
    for (uint32_t l = 0; l < pool_keys_.size(); ++l)
        for (SeqId s = 0; s < (SeqId)n_seq_max; ++s)
            if (all.test(s) && !layout_.seq(s).reps.empty()) pool_keys(l, s);
    debug_check();
}

std::vector<uint8_t> state_save(const HybridMemory & mem, SeqId seq, uint32_t flags, Pos from) {
    return mem.save_state(seq, flags, from);
}

void state_load(HybridMemory & mem, std::span<const uint8_t> data, SeqId seq, uint32_t flags, const std::string & name) {
    mem.load_state(data, seq, flags, name);
}

}  // namespace offgrid::memory
