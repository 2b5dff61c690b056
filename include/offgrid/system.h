// What the machine offers the library: the kernel level chosen for this CPU and the memory bandwidth a decode
// step can draw on (decode speed is read against it).
//
// Thread safety: every function may be called from any thread. The kernel level is read once per process
// (the CPU's features, then OFFGRID_ISA) and never changes afterwards.
#pragma once

#include <cstddef>

namespace offgrid {

// The kernel level the library runs ("scalar", "avx2", "avx512", "amx", "neon", "neondot"): the detected one, or the one
// OFFGRID_ISA names when the CPU runs it.
const char * active_isa_name();
// The best kernel level this CPU runs.
const char * detected_isa_name();

struct ReadBandwidth {
    double bytes_per_second = 0;  // the best round (a shared machine only ever slows a round down)
    size_t buffer_bytes = 0;
    int threads = 1;
    int rounds = 0;
};

// The memory bus as a decode step sees it: `n_threads` threads (1..kMaxThreads of offgrid/context.h) each read
// their own contiguous share of a buffer of `buffer_bytes` (rounded down to 4 KiB, at least 4 KiB), far larger
// than the last-level cache, with plain loads, `rounds` times. The buffer is written once first, so every page
// exists. Throws Error for a thread count out of range, std::bad_alloc when the buffer cannot be had.
ReadBandwidth measure_read_bandwidth(int n_threads, size_t buffer_bytes = size_t(1) << 30, int rounds = 5);

}  // namespace offgrid
