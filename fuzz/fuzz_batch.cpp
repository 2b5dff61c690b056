// libFuzzer target: batch validation and the split, fed through the hybrid memory's decode flow. Any input
// must end in Ok, NoSpace or InvalidBatch (with nothing changed), never a crash or an oversized ubatch.
#include <cstdint>
#include <cstdlib>

#include "memory/hybrid_memory.h"

namespace {

using namespace offgrid::memory;

struct Input {
    const uint8_t * d;
    size_t n, at = 0;
    int next() { return at < n ? d[at++] : -1; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (size < 4) return 0;
    MemoryParams p;
    p.shape.layers = {LayerCache::attention_rows(2, 2, 2, 2), LayerCache::recurrent_rows(2, 1)};
    p.shape.type_k = offgrid::tensor::ElemType::F32;
    p.shape.type_v = offgrid::tensor::ElemType::F32;
    p.n_ctx = 48;
    p.n_seq_max = 1 + data[0] % 4;
    p.unified = data[1] & 1;
    p.n_rs_seq = (data[1] >> 1) & 3;
    p.n_ubatch = p.n_rs_seq + 1 + data[2] % 8;
    p.kpool = data[3] % 5;
    p.by_order = data[1] & 8;
    p.n_vocab = 200;
    HybridMemory mem(p);
    Input in{data + 4, size - 4};
    for (int call = 0; call < 4 && in.at < in.n; ++call) {
        Batch b;
        const int n = in.next() % 24;
        const bool explicit_pos = in.next() & 1;
        for (int i = 0; i < n; ++i) {
            b.tokens.push_back(in.next() - 20);
            if (explicit_pos) b.pos.push_back(in.next() - 2);
            std::vector<SeqId> seqs;
            const int k = 1 + (in.next() & 1);
            for (int j = 0; j < k; ++j) seqs.push_back(in.next() % 6 - 1);
            b.seqs.push_back(seqs);
        }
        const Pos before = mem.seq_pos_max(0);
        const BeginResult r = mem.begin(b);
        if (r.status != DecodeStatus::Ok) {
            if (mem.seq_pos_max(0) != before || r.message.empty()) std::abort();
            continue;
        }
        while (mem.has_next()) {
            const Plan & plan = mem.apply();
            if (plan.tokens.size() > p.n_ubatch) std::abort();
        }
        if (in.next() & 1) mem.undo(); else mem.finish();
        mem.check_invariants();  // throws (a finding) when the books disagree
    }
    return 0;
}
