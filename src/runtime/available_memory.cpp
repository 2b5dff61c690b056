#include "runtime/available_memory.h"

#include <algorithm>
#include <cstdio>

#include <sys/resource.h>
#include <unistd.h>

namespace offgrid::runtime {
namespace {

// The process's address space now (VmSize), 0 when unknown.
uint64_t mapped_bytes() {
    uint64_t kb = 0;
    if (std::FILE * f = std::fopen("/proc/self/status", "r")) {
        char line[256];
        unsigned long long v = 0;
        while (std::fgets(line, sizeof line, f)) {
            if (std::sscanf(line, "VmSize: %llu kB", &v) == 1) {
                kb = v;
                break;
            }
        }
        std::fclose(f);
    }
    return kb * 1024;
}

uint64_t physical_or_available_bytes() {
    if (std::FILE * f = std::fopen("/proc/meminfo", "r")) {
        char line[256];
        unsigned long long kb = 0;
        bool found = false;
        while (std::fgets(line, sizeof line, f)) {
            if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                found = true;
                break;
            }
        }
        std::fclose(f);
        if (found) return static_cast<uint64_t>(kb) * 1024;
    }
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

}  // namespace

uint64_t available_memory_bytes() {
    uint64_t avail = physical_or_available_bytes();
    struct rlimit lim {};
    if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
        const uint64_t used = mapped_bytes();
        const uint64_t room = lim.rlim_cur > used ? lim.rlim_cur - used : 0;
        avail = avail == 0 ? room : std::min(avail, room);
    }
    return avail;
}

}  // namespace offgrid::runtime
