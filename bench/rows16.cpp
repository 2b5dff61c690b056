// q4_K in 16-row groups (ops/rows16.h) against the file's layout, through ops::matmul on the same weights: the
// rows16 product for up to 8 tokens against the 4-row tiles and the lanes (as the engine picks for the count),
// both in one process, alternated, with the bits compared. Run it in the int8 mode (elsewhere both sides take the
// plain kernels):
//   OFFGRID_QUANT_ACT=int8 bench_rows16 [ROWS (4096)] [THREADS (1)] [TOKENS... (1 2 3 4 8)]
//   (2560 columns; ROWS 512 stays in L2, 4096 in the L3, 131072 streams 189 MB from DRAM)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "memory/huge_pages.h"
#include "ops/matmul.h"
#include "ops/rows16.h"
#include "ops/thread_pool.h"
#include "tensor/half.h"

using namespace offgrid;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char ** argv) {
    const int64_t cols = 2560;
    const int64_t rows = argc > 1 ? std::atoll(argv[1]) / ops::kRows16 * ops::kRows16 : 4096;
    const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
    std::vector<int> counts;
    for (int i = 3; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
    if (counts.empty()) counts = {1, 2, 3, 4, 8};
    if (rows <= 0 || threads < 1) {
        std::fprintf(stderr, "usage: bench_rows16 [ROWS] [THREADS] [TOKENS...]\n");
        return 2;
    }
    using Bytes = std::vector<uint8_t, memory::HugePageAllocator<uint8_t>>;
    Bytes plain_bytes(ops::weight_row_bytes(tensor::ElemType::Q4_K, cols) * static_cast<size_t>(rows));
    std::mt19937 rng(3);
    for (auto & b : plain_bytes) b = static_cast<uint8_t>(rng());
    for (size_t at = 0; at < plain_bytes.size(); at += 144) {  // q4_K blocks: f16 d and dmin first
        const uint16_t d = tensor::f32_to_f16(0.001f + 0.0001f * static_cast<float>(rng() % 16));
        const uint16_t dmin = tensor::f32_to_f16(0.0005f + 0.0001f * static_cast<float>(rng() % 16));
        std::memcpy(&plain_bytes[at], &d, 2);
        std::memcpy(&plain_bytes[at + 2], &dmin, 2);
    }
    const ops::Matrix plain = ops::make_matrix(tensor::ElemType::Q4_K, plain_bytes.data(), cols, rows);
    Bytes grouped_bytes(plain_bytes.size());
    const ops::Matrix grouped = ops::repack_rows16(plain, grouped_bytes.data());
    ops::ThreadPool pool(threads);
    std::normal_distribution<float> nd;
    std::printf("q4_K %lld x %lld (%.1f MB), %d thread(s): microseconds a product, best of 5 rounds\n",
                static_cast<long long>(rows), static_cast<long long>(cols),
                static_cast<double>(plain_bytes.size()) / 1e6, threads);
    for (int nt : counts) {
        std::vector<float> x(static_cast<size_t>(nt) * cols);
        for (auto & v : x) v = nd(rng);
        std::vector<float> y0(static_cast<size_t>(nt * rows)), y1(y0.size());
        ops::matmul(plain, x.data(), nt, y0.data(), &pool);
        ops::matmul(grouped, x.data(), nt, y1.data(), &pool);
        const bool same = std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) == 0;
        double best0 = 1e30, best1 = 1e30;
        const int reps = rows >= 65536 ? 8 : 200;
        for (int round = 0; round < 5; ++round) {
            double t0 = now();
            for (int r = 0; r < reps; ++r) ops::matmul(plain, x.data(), nt, y0.data(), &pool);
            best0 = std::min(best0, (now() - t0) / reps);
            t0 = now();
            for (int r = 0; r < reps; ++r) ops::matmul(grouped, x.data(), nt, y1.data(), &pool);
            best1 = std::min(best1, (now() - t0) / reps);
        }
        const double mb = static_cast<double>(plain_bytes.size()) / 1e9;
        std::printf("tokens %d: file layout %9.1f (%5.1f GB/s)  16-row groups %9.1f (%5.1f GB/s)  %.2fx  bits %s\n", nt,
                    best0 * 1e6, mb / best0, best1 * 1e6, mb / best1, best0 / best1, same ? "same" : "DIFFER");
    }
    return 0;
}
