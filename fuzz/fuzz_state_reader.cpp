// libFuzzer target: arbitrary bytes restored as a memory state, whole and into a sequence. The reader must
// refuse or fail with offgrid::Error, never crash, refuse damaged states with nothing changed, and leave the three
// caches consistent (HybridMemory::check_invariants).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "memory/hybrid_memory.h"
#include "memory/state_io.h"

namespace {

using namespace offgrid::memory;

MemoryParams params() {
    MemoryParams p;
    p.shape.layers = {LayerCache::attention_rows(2, 2, 2, 2), LayerCache::recurrent_rows(2, 1)};
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
    // A restored state may carry pending shifts (a field of every cell): apply them, as a context would.
    if (mem.has_pending_shift()) mem.apply_pending_shifts([](uint32_t, Pos, Pos) {});
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

// OFFGRID_FUZZ_WRITE_SEEDS=DIR: write the seed corpus (states of this target's memory) into DIR and exit.
void write_seeds(const char * dir) {
    HybridMemory mem(params());
    fill(mem);
    const std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds = {
        {"whole.state", state_save(mem, -1)},
        {"seq0.state", state_save(mem, 0)},
        {"seq1.state", state_save(mem, 1)},
        {"empty_seq2.state", state_save(mem, 2)},
    };
    for (const auto & [name, bytes] : seeds) {
        for (const char mode : {'\0', 'R'}) {
            std::vector<uint8_t> out;
            if (mode) out.push_back(static_cast<uint8_t>(mode));
            out.insert(out.end(), bytes.begin(), bytes.end());
            const std::string path = std::string(dir) + "/" + (mode ? "resealed_" : "") + name;
            if (std::FILE * f = std::fopen(path.c_str(), "wb")) {
                std::fwrite(out.data(), 1, out.size(), f);
                std::fclose(f);
            }
        }
    }
    std::vector<uint8_t> partial = {'P'};
    const auto p = state_save(mem, 0, kPartialOnly);
    partial.insert(partial.end(), p.begin(), p.end());
    if (std::FILE * f = std::fopen((std::string(dir) + "/partial_seq0.state").c_str(), "wb")) {
        std::fwrite(partial.data(), 1, partial.size(), f);
        std::fclose(f);
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    if (const char * dir = std::getenv("OFFGRID_FUZZ_WRITE_SEEDS")) {
        write_seeds(dir);
        std::exit(0);
    }
    return 0;
}

// The first byte picks a mode: 'S' splices the rest into a real state at an offset given by the next two bytes,
// 'P' restores the rest as a partial-only state, 'R' restores the rest after recomputing its checksums (so the
// body parser behind them is reached); anything else restores the whole input as it is.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static HybridMemory * mem = new HybridMemory(params());
    if (size == 0) return 0;
    mem->clear();
    fill(*mem);
    std::vector<uint8_t> input(data, data + size);
    uint32_t flags = 0;
    if (size > 4 && data[0] == 'S') {
        // Start from a real state with the fuzzer's bytes spliced in (resealed), so the body parser gets exercised.
        std::vector<uint8_t> base = state_save(*mem, size % 2 ? 0 : -1);
        const size_t at = ((size_t)data[1] << 8 | data[2]) % (base.size() + 1);
        base.resize(at);
        base.insert(base.end(), data + 3, data + size);
        state_reseal(base);
        input = base;
    } else if (data[0] == 'P' || data[0] == 'R') {
        input.assign(data + 1, data + size);
        if (data[0] == 'P') flags = kPartialOnly;
        if (data[0] == 'R') state_reseal(input);
    }
    for (SeqId dst : {-1, 1}) {
        const std::vector<uint8_t> before = state_save(*mem, -1);
        try {
            state_load(*mem, input, dst, flags);
        } catch (const offgrid::FileError & e) {
            // A damaged or foreign state is refused before anything changes.
            const std::string what = e.what();
            if ((what.find("checksum") != std::string::npos || what.find("magic") != std::string::npos) &&
                state_save(*mem, -1) != before) {
                std::abort();
            }
        } catch (const offgrid::Error &) {
        }
        mem->check_invariants();
        check(*mem);
        fill(*mem);
    }
    return 0;
}
