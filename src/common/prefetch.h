// A read-prefetch hint that compiles everywhere: GCC and Clang's __builtin_prefetch where they build the code,
// nothing elsewhere. A hint only: no result ever depends on it, only the speed of a scattered or strided read.
#pragma once

namespace offgrid {

// Asks for the cache line holding p ahead of its use (into every cache level). p need not be valid memory.
inline void prefetch_read(const void * p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p);
#else
    (void)p;
#endif
}

}  // namespace offgrid
