// libFuzzer target: Reader::from_memory on arbitrary bytes. A malformed input must end in offgrid::Error;
// anything else (crash, sanitizer report, other exception, hang, huge allocation) is a finding. Accepted
// inputs are also read through completely, and written back with the Writer, which must give a file the
// Reader accepts and that writes back to the same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "gguf/reader.h"
#include "gguf/writer.h"

namespace {

// Touches every byte of the tensor data the Reader hands out and dequantises what it can.
void read_tensors(const offgrid::gguf::Reader & r) {
    using namespace offgrid;
    volatile uint8_t sink = 0;
    for (const auto & t : r.tensors()) {
        for (uint64_t i = 0; i < t.n_bytes; ++i) sink = sink ^ t.data[i];
        const auto & traits = tensor::traits(t.type);
        if (!traits.can_dequantize) continue;
        // The first row: ne[0] elements, at most 1 << 16 of them to keep executions fast.
        const auto n = static_cast<size_t>(std::min<int64_t>(t.ne[0], int64_t{1} << 16));
        const size_t whole = n - n % traits.block_size;
        std::vector<float> row(whole);
        tensor::dequantize_row(t.type, t.data, row.data(), whole);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    using namespace offgrid;
    std::vector<uint8_t> first;
    try {
        const auto r = gguf::Reader::from_memory(data, size, "fuzz");
        read_tensors(r);
        for (const auto & kv : r.metadata()) {
            if (r.find(kv.key) != &kv.value) __builtin_trap();
        }
        for (const auto & t : r.tensors()) {
            if (r.find_tensor(t.name) != &t) __builtin_trap();
        }
        first = gguf::Writer::from_reader(r).to_bytes();
    } catch (const Error &) {
        return 0;
    }
    // A file written by the Writer must be accepted, and writing it again must be a fixed point.
    try {
        const auto again = gguf::Reader::from_memory(first.data(), first.size(), "fuzz-rewritten");
        if (gguf::Writer::from_reader(again).to_bytes() != first) __builtin_trap();
    } catch (const Error &) {
        __builtin_trap();
    }
    return 0;
}
