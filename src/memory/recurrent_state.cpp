// RecurrentCache's part of a memory state (memory/state_io.h): the recurrent section, per sequence its id, last
// position, valid snapshots and every plane of its state.
#include "memory/recurrent_cache.h"
#include "memory/state_bytes.h"

namespace offgrid::memory {

void RecurrentCache::write_states(SeqId seq, uint32_t n_seq_max, StateWriter & w) const {
    std::vector<SeqId> rs;
    for (SeqId s = 0; s < (SeqId)n_seq_max; ++s)
        if ((seq < 0 || s == seq) && present(s)) rs.push_back(s);
    w.u32((uint32_t)rs.size());
    for (SeqId s : rs) {
        w.i32(s);
        w.i32(pos(s));
        w.u32(this->seq(s).snaps);
        std::vector<float> planes;  // read_slot appends
        read_slot(slot_of(s), 1 + n_rs_seq_, planes);
        w.raw(planes.data(), planes.size() * 4);
    }
}

std::vector<RecurrentCache::StateRecord> RecurrentCache::read_states(StateReader & r, SeqId seq, uint32_t n_seq_max) const {
    const uint32_t n_rec = r.u32("recurrent count");
    if (n_rec > (seq < 0 ? n_seq_max : 1u)) r.fail("recurrent count", std::to_string(n_rec) + " states");
    std::vector<StateRecord> recs;
    SeqSet seen;
    const size_t floats = slot_floats();
    for (uint32_t i = 0; i < n_rec; ++i) {
        StateRecord rr;
        rr.seq = r.i32("recurrent seq id");
        if (rr.seq < 0 || (uint32_t)rr.seq >= n_seq_max)
            r.fail("recurrent seq id", "sequence id " + std::to_string(rr.seq) + " is out of range");
        if (seq < 0 && seen.test(rr.seq)) r.fail("recurrent seq id", "sequence " + std::to_string(rr.seq) + " appears twice");
        seen.set(rr.seq);
        rr.pos = r.i32("recurrent pos");
        if (rr.pos < 0 || rr.pos > kMaxStatePos)
            r.fail("recurrent pos", "position " + std::to_string(rr.pos) + " is outside [0, " + std::to_string(kMaxStatePos) + "]");
        rr.snaps = r.u32("recurrent snapshots");
        if (rr.snaps > n_rs_seq_) r.fail("recurrent snapshots", std::to_string(rr.snaps) + " > n_rs_seq");
        rr.planes.resize(floats);
        r.raw(rr.planes.data(), floats * 4, "recurrent rows");
        recs.push_back(std::move(rr));
    }
    return recs;
}

void RecurrentCache::restore_states(const std::vector<StateRecord> & recs, SeqId seq) {
    for (const StateRecord & rr : recs) {
        const SeqId s = seq >= 0 ? seq : rr.seq;
        claim(s);
        write_slot((uint32_t)s, 1 + n_rs_seq_, rr.planes.data());
        set_state(s, SeqState{rr.pos, -1, rr.snaps});
    }
}

}  // namespace offgrid::memory
