// How much memory this process can still take without swapping: sizes the default context (-c 0) and decides
// whether weights are read into memory or mapped (WeightLoad::Auto).
#pragma once

#include <cstdint>

namespace offgrid::runtime {

// MemAvailable from /proc/meminfo, else the physical memory; less when an address-space limit (ulimit -v)
// leaves less room than that. 0 when nothing is known.
uint64_t available_memory_bytes();

}  // namespace offgrid::runtime
