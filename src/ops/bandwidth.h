// The memory bus as a decode step sees it: the threads of a pool read their shares of a buffer far larger than the
// last-level cache with plain loads, as the weight products stream their rows. Decode figures are read against it
// (`offgrid bench` prints weight bytes per token over time per token as a fraction of this figure).
#pragma once

#include <cstddef>

#include "offgrid/system.h"
#include "ops/thread_pool.h"

namespace offgrid::ops {

using ReadBandwidth = offgrid::ReadBandwidth;  // the public figure (offgrid/system.h)

// Reads a buffer of `buffer_bytes` (rounded down to 4 KiB, at least 4 KiB) `rounds` times, each thread of `pool`
// (nullptr: the caller alone) its own contiguous share. The buffer is written once first, so every page exists.
// Throws std::bad_alloc when the buffer cannot be had.
ReadBandwidth measure_read_bandwidth(ThreadPool * pool, size_t buffer_bytes = size_t(1) << 30, int rounds = 5);

}  // namespace offgrid::ops
