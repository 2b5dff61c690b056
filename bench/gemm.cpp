// Prompt products of F32 weights (9+ tokens): GFLOP/s of the tile path against the gemm entry, per shape of
// the F32 bench file (1024-wide rows: 1024 -> 2048, 1024, 4096, 16384; an expert's 1024 -> 256 and 256 -> 1024)
// and token count, in one process, with the weights from memory as in a prompt (each product takes the next
// matrix of a 256 MiB buffer in 2 MiB pages, far larger than the caches). "tiles" is the driver's path without a gemm entry (token chunks of 256 KB,
// 4-row tiles, token groups of the entry's tile_tokens through dot_tile, split by 4-row tiles as ops::matmul splits
// them); "matmul" is ops::matmul through the table (the gemm entry from 9 tokens on); the other columns call each
// blocking variant of the AVX-512 gemm on the same split. Variants take turns inside each round, so a busy
// machine disturbs them alike; prints the best of the rounds and each column's ratio to "tiles".
// usage: bench_gemm [threads=2] [rounds=5] [min_ms=30 per measurement]
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/gemm_float.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "bench_clock.h"

using namespace offgrid;

namespace {

struct Shape {
    const char * name;
    int64_t cols, rows;
};

// ops::matmul's split: whole 4-row tiles, at least 4 per part (and 32 KB x tokens of weights).
size_t min_tiles_of(const Shape & s, int64_t n_tok) {
    const size_t tile_work = 4 * static_cast<size_t>(s.cols) * 4 * static_cast<size_t>(n_tok);
    return std::max<size_t>(4, (32 * 1024 + tile_work - 1) / tile_work);
}

// The driver's tile path for F32 (rows_with_kernels in src/ops/matmul.cpp without the gemm branch).
void tiles_path(const ops::cpu::TypeKernels & k, const float * w, const Shape & s, const float * x, int64_t n_tok,
                float * y, ops::ThreadPool & pool) {
    const size_t row_bytes = static_cast<size_t>(s.cols) * sizeof(float);
    const int tt = k.tile_tokens;
    const int64_t chunk = std::max<int64_t>(tt, static_cast<int64_t>((256 * 1024) / row_bytes) / tt * tt);
    pool.parallel_for(static_cast<size_t>((s.rows + 3) / 4), [&](size_t b, size_t e) {
        const int64_t r0 = static_cast<int64_t>(b) * 4, r1 = std::min<int64_t>(s.rows, static_cast<int64_t>(e) * 4);
        for (int64_t c0 = 0; c0 < n_tok; c0 += chunk) {
            const int64_t c1 = std::min(n_tok, c0 + chunk);
            for (int64_t r = r0; r < r1; r += 4) {
                const int nr = static_cast<int>(std::min<int64_t>(4, r1 - r));
                for (int64_t t = c0; t < c1; t += tt) {
                    const int nt = static_cast<int>(std::min<int64_t>(tt, c1 - t));
                    k.dot_tile(w + r * s.cols, row_bytes, x + t * s.cols, row_bytes, s.cols, nr, nt, y + t * s.rows + r,
                               static_cast<size_t>(s.rows));
                }
            }
        }
    }, min_tiles_of(s, n_tok));
}

// A new activation key per product, as ops::matmul gives (each thread packs the tokens once per product).
void gemm_path(const ops::cpu::GemmVariant & v, const float * w, const Shape & s, const float * x, int64_t n_tok,
               float * y, ops::ThreadPool & pool) {
    static uint64_t last_key = uint64_t{1} << 62;
    const uint64_t key = ++last_key;
    const size_t row_bytes = static_cast<size_t>(s.cols) * sizeof(float);
    pool.parallel_for(static_cast<size_t>((s.rows + 3) / 4), [&](size_t b, size_t e) {
        const int64_t r0 = static_cast<int64_t>(b) * 4, r1 = std::min<int64_t>(s.rows, static_cast<int64_t>(e) * 4);
        v.gemm(w + r0 * s.cols, row_bytes, x, row_bytes, s.cols, r1 - r0, n_tok, y + r0, static_cast<size_t>(s.rows), key);
    }, min_tiles_of(s, n_tok));
}

}  // namespace

int main(int argc, char ** argv) {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
    const double min_s = (argc > 3 ? std::atof(argv[3]) : 30.0) / 1000.0;
    const ops::cpu::Isa isa = ops::cpu::active_isa();
    const ops::cpu::TypeKernels & k = *ops::cpu::kernels_for(tensor::ElemType::F32, isa);
    const bool avx512 = isa == ops::cpu::Isa::Avx512 || isa == ops::cpu::Isa::Amx;  // Amx keeps Avx512's float kernels
    const auto variants = avx512 ? ops::cpu::f32_gemm_variants_avx512()
                                                       : std::vector<ops::cpu::GemmVariant>{};
    struct Case {
        Shape s;
        int64_t tokens;
    };
    const Shape shapes[] = {{"1024->2048", 1024, 2048}, {"1024->1024", 1024, 1024}, {"1024->4096", 1024, 4096},
                            {"1024->16384", 1024, 16384}, {"expert 1024->256", 1024, 256},
                            {"expert 256->1024", 256, 1024}};
    std::vector<Case> cases;
    for (const Shape & s : shapes) {
        const bool expert = s.rows == 256 || s.cols == 256;
        for (int64_t t : expert ? std::vector<int64_t>{9, 16, 32, 128} : std::vector<int64_t>{32, 128, 512}) {
            cases.push_back({s, t});
        }
    }
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const size_t w_bytes = size_t{256} << 20;
    auto * w = static_cast<float *>(std::aligned_alloc(size_t{2} << 20, w_bytes));
    madvise(w, w_bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < w_bytes / sizeof(float); ++i) w[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
    std::vector<float> x(1024 * 512), y(16384 * 512);
    for (float & v : x) v = dist(rng);
    ops::ThreadPool pool(threads);
    const size_t n_col = 2 + variants.size();
    std::vector<std::vector<std::vector<double>>> gflops(cases.size(), std::vector<std::vector<double>>(n_col));
    for (int round = 0; round < rounds; ++round) {
        for (size_t c = 0; c < cases.size(); ++c) {
            const Case & cs = cases[c];
            const size_t per = static_cast<size_t>(cs.s.cols * cs.s.rows);
            const size_t n_mats = w_bytes / sizeof(float) / per;
            size_t next = 0;
            for (size_t v = 0; v < n_col; ++v) {
                std::function<void()> run = [&] {
                    const float * wm = w + (next++ % n_mats) * per;
                    if (v == 0) {
                        tiles_path(k, wm, cs.s, x.data(), cs.tokens, y.data(), pool);
                    } else if (v == 1) {
                        const ops::Matrix m = ops::make_matrix(tensor::ElemType::F32, wm, cs.s.cols, cs.s.rows);
                        ops::matmul(m, x.data(), cs.tokens, y.data(), &pool);
                    } else {
                        gemm_path(variants[v - 2], wm, cs.s, x.data(), cs.tokens, y.data(), pool);
                    }
                };
                run();  // warm
                int reps = 0;
                const double t0 = bench::now_seconds(threads == 1);
                double t1 = t0;
                while (t1 - t0 < min_s) {
                    run();
                    ++reps;
                    t1 = bench::now_seconds(threads == 1);
                }
                const double flop = 2.0 * static_cast<double>(cs.s.cols * cs.s.rows * cs.tokens) * reps;
                gflops[c][v].push_back(flop / (t1 - t0) / 1e9);
            }
        }
    }
    std::printf("%s, %d threads, best of %d rounds, GFLOP/s (ratio to tiles), %s\n", ops::cpu::isa_name(isa), threads,
                rounds, threads == 1 ? "thread CPU time" : "wall time");
    std::printf("%-17s %4s | %13s | %13s", "shape", "tok", "tiles", "matmul");
    for (const auto & v : variants) std::printf(" | %26s", v.name);
    std::printf("\n");
    for (size_t c = 0; c < cases.size(); ++c) {
        std::printf("%-17s %4lld", cases[c].s.name, static_cast<long long>(cases[c].tokens));
        const double base = *std::max_element(gflops[c][0].begin(), gflops[c][0].end());
        for (size_t v = 0; v < n_col; ++v) {
            const double g = *std::max_element(gflops[c][v].begin(), gflops[c][v].end());
            std::printf(v < 2 ? " | %6.1f (%4.2f)" : " | %19.1f (%4.2f)", g, g / base);
        }
        std::printf("\n");
    }
    std::free(w);
    return y[0] == 12345.0f ? 1 : 0;
}
