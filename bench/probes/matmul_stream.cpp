// Probe behind "Decode against the bus" (docs/kernels.md; not part of the build): ops::matmul of n_tok tokens over
// as many matrices of one weight type and shape as fill 600 MiB of 2 MiB pages (MADV_HUGEPAGE, as the weights are
// read), so the weights stream from DRAM as in decode. Prints GB/s of weights, best of 5 passes. The weight bytes
// are random: the integer kernels' speed does not depend on the values. Build by hand after the main build:
//   g++ -O2 -std=c++20 -Isrc bench/probes/matmul_stream.cpp build/liboffgrid_ops.a build/liboffgrid_tensor.a
//     build/liboffgrid_common.a -lpthread -o /tmp/matmul_stream
//   /tmp/matmul_stream q4_K 2560 10240 2 [n_tok]      (type: q4_K q6_K q5_0 q8_0; cols rows threads)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/matmul.h"
#include "ops/thread_pool.h"

using namespace offgrid;

int main(int argc, char ** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: matmul_stream TYPE COLS ROWS THREADS [N_TOK]\n");
        return 2;
    }
    const std::string name = argv[1];
    const int cols = std::atoi(argv[2]), rows = std::atoi(argv[3]), threads = std::atoi(argv[4]);
    const int n_tok = argc > 5 ? std::atoi(argv[5]) : 1;
    const tensor::ElemType type = name == "q4_K" ? tensor::ElemType::Q4_K
                                  : name == "q6_K" ? tensor::ElemType::Q6_K
                                  : name == "q5_0" ? tensor::ElemType::Q5_0
                                                   : tensor::ElemType::Q8_0;
    const size_t matrix_bytes = ops::weight_row_bytes(type, cols) * static_cast<size_t>(rows);
    constexpr size_t kHuge = size_t{2} << 20;
    const int n_mat = static_cast<int>((size_t{600} << 20) / matrix_bytes);
    const size_t bytes = (matrix_bytes * static_cast<size_t>(n_mat) + kHuge) / kHuge * kHuge;
    auto * buf = static_cast<uint8_t *>(std::aligned_alloc(kHuge, bytes));
    ::madvise(buf, bytes, MADV_HUGEPAGE);
    std::mt19937 rng(1);
    for (size_t i = 0; i + 4 <= bytes; i += 4) {
        const uint32_t v = rng();
        std::memcpy(buf + i, &v, 4);
    }
    std::vector<ops::Matrix> mats;
    for (int i = 0; i < n_mat; ++i) mats.push_back(ops::make_matrix(type, buf + i * matrix_bytes, cols, rows));
    std::vector<float> x(static_cast<size_t>(cols) * n_tok, 0.5f), y(static_cast<size_t>(rows) * n_tok);
    ops::ThreadPool pool(threads);
    double best = 1e30;
    for (int pass = 0; pass < 5; ++pass) {
        const auto t0 = std::chrono::steady_clock::now();
        for (const ops::Matrix & m : mats) ops::matmul(m, x.data(), n_tok, y.data(), &pool);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s %d x %d, %d matrices (%.0f MB), %d threads, %d tokens: %.2f GB/s, %.1f us per matrix\n",
                name.c_str(), rows, cols, n_mat, static_cast<double>(n_mat * matrix_bytes) / 1e6, threads, n_tok,
                static_cast<double>(n_mat * matrix_bytes) / best / 1e9, best / n_mat * 1e6);
    std::free(buf);
}
