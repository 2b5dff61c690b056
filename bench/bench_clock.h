// The clock of the benches that take turns between variants in one process.
#pragma once

#include <chrono>
#include <ctime>

namespace offgrid::bench {

// Seconds. With one thread a measurement is timed in the thread's CPU time, which leaves out the time other
// processes of a busy machine hold the core (the bus is still shared); with more, in wall time.
inline double now_seconds(bool cpu_time) {
    if (cpu_time) {
        timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace offgrid::bench
