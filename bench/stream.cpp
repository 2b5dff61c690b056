// Decode is a streaming problem: how close does a one-token product get to the memory bus? Runs, in one
// process and interleaved (so a busy machine disturbs every variant alike), over a weight buffer far larger
// than the caches:
//   bus      every thread sums its half of the buffer with plain vector loads (the bound);
//   matmul   ops::matmul of one token through the pool (the decode path);
//   group    the same rows as 64 products in one ops::matmul_group;
//   4 MiB    the same rows as 64 separate matmul calls (a decode step's matrix sizes);
//   1 MiB    as 256 separate calls (an expert's matrix).
// Prints the best GB/s of each over the rounds. usage: bench_stream [MiB=256] [threads=2] [rounds=7] [cols=1024]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/thread_pool.h"

using namespace offgrid;

namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float sum_range(const float * p, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    alignas(64) float lanes[16];
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(_mm512_loadu_ps(p + i), a0);
        a1 = _mm512_add_ps(_mm512_loadu_ps(p + i + 16), a1);
        a2 = _mm512_add_ps(_mm512_loadu_ps(p + i + 32), a2);
        a3 = _mm512_add_ps(_mm512_loadu_ps(p + i + 48), a3);
    }
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    float s = 0;
    for (const float v : lanes) s += v;
    return s;
}
#else
float sum_range(const float * p, size_t n) {
    float s = 0;
    for (size_t i = 0; i < n; ++i) s += p[i];
    return s;
}
#endif

double seconds_of(const std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char ** argv) {
    const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 256;
    const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
    const int64_t cols = argc > 4 ? std::atoi(argv[4]) : 1024;
    const int64_t rows = static_cast<int64_t>(mib << 20) / (cols * 4);
    std::vector<float> w(static_cast<size_t>(rows * cols)), x(cols, 1.0f), y(static_cast<size_t>(rows));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.01f;
    const ops::Matrix m = ops::make_matrix(tensor::ElemType::F32, w.data(), cols, rows);
    std::vector<ops::MatmulTask> tasks;
    const int64_t per = rows / 64;
    for (int64_t r = 0; r < rows; r += per) tasks.push_back({m.row_slice(r, std::min(per, rows - r)), x.data(), 1, y.data() + r});
    ops::ThreadPool pool(threads);
    const double bytes = static_cast<double>(w.size()) * 4;
    double best[5] = {0, 0, 0, 0, 0};
    auto separate = [&](int64_t n_rows) {
        for (int64_t r = 0; r < rows; r += n_rows) {
            ops::matmul(m.row_slice(r, std::min(n_rows, rows - r)), x.data(), 1, y.data() + r, &pool);
        }
    };
    std::vector<float> sink(threads);
    for (int round = 0; round < rounds; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        pool.run_parts(threads, [&](int p) {
            const size_t n = w.size() / threads;
            sink[p] = sum_range(w.data() + n * p, n);
        });
        best[0] = std::max(best[0], bytes / seconds_of(t0) / 1e9);
        t0 = std::chrono::steady_clock::now();
        ops::matmul(m, x.data(), 1, y.data(), &pool);
        best[1] = std::max(best[1], bytes / seconds_of(t0) / 1e9);
        t0 = std::chrono::steady_clock::now();
        ops::matmul_group(tasks, &pool);
        best[2] = std::max(best[2], bytes / seconds_of(t0) / 1e9);
        t0 = std::chrono::steady_clock::now();
        separate(rows / 64);
        best[3] = std::max(best[3], bytes / seconds_of(t0) / 1e9);
        t0 = std::chrono::steady_clock::now();
        separate(rows / 256);
        best[4] = std::max(best[4], bytes / seconds_of(t0) / 1e9);
    }
    std::printf("%zu MiB, %d threads, best of %d, GB/s (%% of bus): bus %.1f, matmul %.1f (%.0f), group %.1f (%.0f), "
                "4 MiB %.1f (%.0f), 1 MiB %.1f (%.0f)\n",
                mib, threads, rounds, best[0], best[1], 100 * best[1] / best[0], best[2], 100 * best[2] / best[0],
                best[3], 100 * best[3] / best[0], best[4], 100 * best[4] / best[0]);
    return sink[0] == 12345.0f ? 1 : 0;
}
