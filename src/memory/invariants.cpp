// HybridMemory::invariant_violation: the one checker of the invariants listed at the top of hybrid_memory.h, used
// by the tests, the fuzz targets and (after every operation) Debug builds.
#include <string>

#include "memory/hybrid_memory.h"

namespace offgrid::memory {

std::string HybridMemory::invariant_violation() const {
    if (call_) return "";  // mid-call the caches are being edited; the checker REQUIRES an idle memory
    const auto seq_name = [](SeqId s) { return "seq " + std::to_string(s) + ": "; };
    const uint32_t n_seq = params_.n_seq_max;
    // (1) streams
    if (kv_.n_stream() != (params_.unified ? 1u : n_seq)) return "(1) " + std::to_string(kv_.n_stream()) + " streams";
    for (uint32_t st = 0; st < kv_.n_stream(); ++st) {
        const CellStream & cs = kv_.stream(st);
        // (2) books: sequences of non-empty cells, used count, the per-sequence index
        uint32_t used = 0;
        std::array<size_t, kMaxSeq> held{};
        for (uint32_t i = 0; i < cs.size(); ++i) {
            if (cs.is_empty(i)) {
                if (cs.seqs(i).any()) return "(2) stream " + std::to_string(st) + " cell " + std::to_string(i) + ": empty with sequences";
                continue;
            }
            ++used;
            if (cs.seqs(i).none()) return "(2) stream " + std::to_string(st) + " cell " + std::to_string(i) + ": no sequence";
            // (3) positions
            if (cs.pos(i) > kPosInf - 2) return "(3) cell " + std::to_string(i) + ": position " + std::to_string(cs.pos(i));
            const SeqSet & seqs = cs.seqs(i);
            for (SeqId s = (SeqId)seq_begin(seqs); s < kMaxSeq; s = (SeqId)seq_next(seqs, s)) {
                if ((uint32_t)s >= n_seq) return "(2) cell " + std::to_string(i) + " holds sequence " + std::to_string(s);
                if (kv_.n_stream() > 1 && (uint32_t)s != st) return "(1) " + seq_name(s) + "a cell in stream " + std::to_string(st);
                if (!cs.seq_cells(s).count({cs.pos(i), i})) return "(2) " + seq_name(s) + "cell " + std::to_string(i) + " not indexed";
                ++held[s];
            }
        }
        if (used != cs.used()) return "(2) stream " + std::to_string(st) + ": used count " + std::to_string(cs.used()) + ", cells " + std::to_string(used);
        for (SeqId s = 0; s < (SeqId)n_seq; ++s) {
            if (kv_.n_stream() > 1 && (uint32_t)s != st) {
                if (!cs.seq_cells(s).empty()) return "(1) " + seq_name(s) + "indexed in stream " + std::to_string(st);
                continue;
            }
            if (cs.seq_cells(s).size() != held[s]) return "(2) " + seq_name(s) + "index and cells disagree";
        }
    }
    for (SeqId s = 0; s < (SeqId)n_seq; ++s) {
        const uint32_t st = kv_.stream_of(s);
        const SeqCells & sc = kv_.stream(st).seq_cells(s);
        // (4) the pool layout is the one its cells give
        KPoolLayout fresh(params_.kpool, params_.by_order);
        fresh.rebuild(s, sc, kv_.global(st, 0));
        if (!(fresh.seq(s) == layout_.seq(s))) return "(4) " + seq_name(s) + "layout differs from a rebuild of its cells";
        // (5) the recurrent state follows the attention cells
        if (rec_.present(s) != !sc.empty()) return "(5) " + seq_name(s) + "recurrent state present without cells or missing";
        if (rec_.present(s) && rec_.pos(s) != sc.rbegin()->first) return "(5) " + seq_name(s) + "recurrent position is not the last cell's";
        if (rec_.seq(s).snaps > rec_.n_rs_seq()) return "(5) " + seq_name(s) + "more snapshots than n_rs_seq";
        if (rec_.seq(s).shares >= (SeqId)n_seq) return "(5) " + seq_name(s) + "shares the slot of sequence " + std::to_string(rec_.seq(s).shares);
    }
    return "";
}

void HybridMemory::check_invariants() const {
    const std::string what = invariant_violation();
    if (!what.empty()) throw std::logic_error("HybridMemory invariant " + what);
}

}  // namespace offgrid::memory
