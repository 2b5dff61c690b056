#include "ops/bandwidth.h"

#include <algorithm>
#include <functional>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

namespace offgrid::ops {

namespace {

// Eight independent sums over 64-byte lines: the loads never wait on each other, so the bus is the limit. The
// result is returned so the compiler keeps the loads.
uint64_t sum_lines(const uint64_t * p, size_t n_words) {
    uint64_t a[8] = {};
    for (size_t i = 0; i + 8 <= n_words; i += 8) {
        for (size_t k = 0; k < 8; ++k) a[k] += p[i + k];
    }
    uint64_t s = 0;
    for (const uint64_t v : a) s ^= v;
    return s;
}

}  // namespace

ReadBandwidth measure_read_bandwidth(ThreadPool * pool, size_t buffer_bytes, int rounds) {
    constexpr size_t kPage = 4096;
    const size_t bytes = std::max(kPage, buffer_bytes / kPage * kPage);
    const size_t words = bytes / sizeof(uint64_t);
    struct Free {
        void operator()(uint64_t * p) const { ::operator delete[](p, std::align_val_t(kPage)); }
    };
    std::unique_ptr<uint64_t[], Free> buf(static_cast<uint64_t *>(::operator new[](bytes, std::align_val_t(kPage))));
    const int threads = pool ? pool->n_threads() : 1;
    // Each thread writes the share it later reads (its pages are then local to it where that matters).
    auto share = [&](int part, size_t & w0, size_t & w1) {
        const size_t lines = words / 8;
        w0 = lines * static_cast<size_t>(part) / static_cast<size_t>(threads) * 8;
        w1 = lines * static_cast<size_t>(part + 1) / static_cast<size_t>(threads) * 8;
    };
    auto run = [&](const std::function<void(int)> & fn) {
        if (pool) {
            pool->run_parts(threads, fn);
        } else {
            fn(0);
        }
    };
    run([&](int part) {
        size_t w0, w1;
        share(part, w0, w1);
        for (size_t i = w0; i < w1; ++i) buf[i] = i;
    });
    ReadBandwidth r;
    r.buffer_bytes = bytes;
    r.threads = threads;
    r.rounds = std::max(1, rounds);
    volatile uint64_t sink = 0;
    for (int round = 0; round < r.rounds; ++round) {
        uint64_t sums[ThreadPool::kMaxThreads] = {};
        const auto t0 = std::chrono::steady_clock::now();
        run([&](int part) {
            size_t w0, w1;
            share(part, w0, w1);
            sums[part] = sum_lines(buf.get() + w0, w1 - w0);
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (int k = 0; k < threads; ++k) sink = sink ^ sums[k];
        if (s > 0) r.bytes_per_second = std::max(r.bytes_per_second, static_cast<double>(bytes) / s);
    }
    return r;
}

}  // namespace offgrid::ops
