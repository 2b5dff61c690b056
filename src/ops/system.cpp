// The public machine queries (offgrid/system.h) over the dispatch and the bandwidth probe.
#include "offgrid/system.h"

#include "ops/bandwidth.h"
#include "ops/cpu/dispatch.h"
#include "ops/thread_pool.h"

namespace offgrid {

const char * active_isa_name() { return ops::cpu::isa_name(ops::cpu::active_isa()); }

const char * detected_isa_name() { return ops::cpu::isa_name(ops::cpu::detected_isa()); }

ReadBandwidth measure_read_bandwidth(int n_threads, size_t buffer_bytes, int rounds) {
    ops::ThreadPool pool(n_threads);  // throws Error for a count out of range
    return ops::measure_read_bandwidth(&pool, buffer_bytes, rounds);
}

}  // namespace offgrid
