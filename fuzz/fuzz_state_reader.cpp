// libFuzzer target: arbitrary bytes restored as a memory state, whole and into a sequence. The reader must
// refuse or fail with offgrid::Error, never crash, and leave the three caches consistent.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/error.h"
#include "memory/hybrid_memory.h"
#include "memory/state_io.h"

namespace {

using namespace offgrid::memory;

MemoryParams params() {
    MemoryParams p;
    p.shape.n_attn_layers = 1;
    p.shape.k_width = 2;
    p.shape.v_width = 2;
    p.shape.idx_width = 2;
    p.shape.n_recr_layers = 1;
    p.shape.conv_floats = 2;
    p.shape.ssm_floats = 1;
    p.shape.type_k = offgrid::tensor::ElemType::F32;
    p.shape.type_v = offgrid::tensor::ElemType::F16;
    p.n_ctx = 32;
    p.n_seq_max = 3;
    p.n_rs_seq = 2;
    p.n_ubatch = 8;
    p.kpool = 2;
    return p;
}

void fill(HybridMemory & mem) {
    Batch b;
    for (int i = 0; i < 6; ++i) {
        b.tokens.push_back(i);
        b.seqs.push_back({i % 2});
    }
    if (mem.begin(b).status != DecodeStatus::Ok) return;  // a restored state may have filled the cache
    while (mem.has_next()) mem.apply();
    mem.finish();
}

// Every sequence's layout equals its attention cells and its recurrent state exists iff it has cells.
void check(const HybridMemory & mem) {
    for (SeqId s = 0; s < 3; ++s) {
        const uint32_t st = mem.kv().stream_of(s);
        if (mem.layout().seq(s).cells.size() != mem.kv().stream(st).seq_cells(s).size()) std::abort();
        if (mem.recurrent().present(s) != (mem.kv().seq_pos_max(s) >= 0)) std::abort();
        if (mem.recurrent().present(s) && mem.recurrent().pos(s) != mem.kv().seq_pos_max(s)) std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static HybridMemory * mem = new HybridMemory(params());
    mem->clear();
    fill(*mem);
    // Start from a real state with the fuzzer's bytes spliced in, so the body parser gets exercised too.
    std::vector<uint8_t> base = state_save(*mem, size % 2 ? 0 : -1);
    std::vector<uint8_t> input(data, data + size);
    if (size > 4 && data[0] == 'S') {
        const size_t at = ((size_t)data[1] << 8 | data[2]) % (base.size() + 1);
        base.resize(at);
        base.insert(base.end(), data + 3, data + size);
        input = base;
    }
    for (SeqId dst : {-1, 1}) {
        try {
            state_load(*mem, input, dst, data[0] == 'P' ? kPartialOnly : 0);
        } catch (const offgrid::Error &) {
        }
        check(*mem);
        fill(*mem);
    }
    return 0;
}
