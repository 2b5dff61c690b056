// Batched decode is a streaming problem too: how fast does each F32 tile shape read its weights when a product
// has 1-8 tokens (a decode step of several sequences: the experts' products see ~1-4 tokens, the other products
// all of them)? Over a buffer of weights far larger than the caches, in 2 MiB pages (as `--no-mmap` loads them),
// cut into products of a decode step's shapes (1024 x 1024: attention / recurrent projections; 256 rows of 1024:
// an expert's gate or up; 1024 rows of 256: its down), every F32 tile variant of kernels_float at the active
// level (AVX-512, or AVX2 under OFFGRID_ISA=avx2), and ops::matmul through the table, computes every product of
// a pass with the driver's split: whole 4-row tiles in up to 4 ranges per thread, token groups of the variant's
// tile_tokens inside each tile. Variants and token counts take turns inside each round, so a busy machine
// disturbs them alike. Prints the best GB/s of weights per shape and token count, and each variant's ratio to
// the first (the tile before this bench existed). With one thread a pass is timed in the thread's CPU time.
// A plain read of the same products (AVX-512 loads summed, each thread its share of every product's rows, as the
// driver splits them) takes its turn in every round too: the last column is the table's tile (ops::matmul) as a
// fraction of that read, the bus in the same process and the same moments.
// usage: bench_float_tiles [MiB=128] [threads=2] [rounds=7] [pad=0 floats between activation rows]
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <immintrin.h>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_float.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "bench_clock.h"

using namespace offgrid;

namespace {

struct Shape {
    const char * name;
    int64_t cols, rows;
};

double best(const std::vector<double> & v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

// One product through a tile variant, split as ops::matmul splits it.
void product(const ops::cpu::FloatTileVariant & v, const float * w, const Shape & s, const float * x, int64_t x_stride,
             int n_tok, float * y, ops::ThreadPool & pool) {
    const size_t row_bytes = static_cast<size_t>(s.cols) * sizeof(float);
    pool.parallel_for(static_cast<size_t>(s.rows / 4), [&](size_t begin, size_t end) {
        for (size_t tile = begin; tile < end; ++tile) {
            const int64_t r = static_cast<int64_t>(tile) * 4;
            for (int t = 0; t < n_tok; t += v.tile_tokens) {
                const int nt = std::min(v.tile_tokens, n_tok - t);
                v.dot_tile(w + r * s.cols, row_bytes, x + t * x_stride, x_stride * sizeof(float), s.cols, 4, nt, y + t * s.rows + r,
                           static_cast<size_t>(s.rows));
            }
        }
    }, 4);
}

// The bytes [begin, end) read with AVX-512 loads into four sums (the bus, without any arithmetic to wait for).
__attribute__((target("avx512f"))) float read_bytes(const uint8_t * begin, const uint8_t * end) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (const uint8_t * p = begin; p + 256 <= end; p += 256) {
        s0 = _mm512_add_ps(s0, _mm512_loadu_ps(reinterpret_cast<const float *>(p)));
        s1 = _mm512_add_ps(s1, _mm512_loadu_ps(reinterpret_cast<const float *>(p + 64)));
        s2 = _mm512_add_ps(s2, _mm512_loadu_ps(reinterpret_cast<const float *>(p + 128)));
        s3 = _mm512_add_ps(s3, _mm512_loadu_ps(reinterpret_cast<const float *>(p + 192)));
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    float total = 0;
    for (float v : lanes) total += v;
    return total;
}

// One product's rows read as the driver splits them (whole 4-row tiles, up to 4 ranges per thread).
float read_product(const float * w, const Shape & s, ops::ThreadPool & pool) {
    const size_t row_bytes = static_cast<size_t>(s.cols) * sizeof(float);
    const auto * base = reinterpret_cast<const uint8_t *>(w);
    std::vector<float> sums(static_cast<size_t>(s.rows / 4), 0.0f);
    pool.parallel_for(static_cast<size_t>(s.rows / 4), [&](size_t begin, size_t end) {
        sums[begin] = read_bytes(base + begin * 4 * row_bytes, base + end * 4 * row_bytes);
    }, 4);
    float total = 0;
    for (float v : sums) total += v;
    return total;
}

}  // namespace

int main(int argc, char ** argv) {
    const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 128;
    const int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
    const int64_t pad = argc > 4 ? std::atoi(argv[4]) : 0;  // floats between activation rows
    const ops::cpu::Isa isa = ops::cpu::active_isa();
    const bool avx512 = isa == ops::cpu::Isa::Avx512 || isa == ops::cpu::Isa::Amx;  // Amx keeps Avx512's float kernels
    const auto variants = avx512 ? ops::cpu::f32_tile_variants_avx512()
                          : isa == ops::cpu::Isa::Avx2 ? ops::cpu::f32_tile_variants_avx2()
                                                       : std::vector<ops::cpu::FloatTileVariant>{};
    if (variants.empty()) {
        std::printf("bench_float_tiles: no tile variants at the %s level\n", ops::cpu::isa_name(isa));
        return 0;
    }
    const size_t bytes = mib << 20;
    constexpr size_t kHuge = size_t{2} << 20;
    auto * w = static_cast<float *>(std::aligned_alloc(kHuge, bytes));
    madvise(w, bytes, MADV_HUGEPAGE);
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (size_t i = 0; i < bytes / sizeof(float); ++i) w[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
    std::vector<float> x(8 * (1024 + pad)), y(8 * 1024);
    for (float & v : x) v = dist(rng);
    const Shape shapes[] = {{"1024x1024", 1024, 1024}, {"expert up", 1024, 256}, {"expert down", 256, 1024}};
    ops::ThreadPool pool(threads);
    const size_t n_var = variants.size() + 2;  // + ops::matmul through the table, + the plain read
    // gbs[shape][n_tok - 1][variant]: one figure per round.
    std::vector<std::vector<std::vector<std::vector<double>>>> gbs(
        3, std::vector<std::vector<std::vector<double>>>(8, std::vector<std::vector<double>>(n_var)));
    for (int round = 0; round < rounds; ++round) {
        for (int s = 0; s < 3; ++s) {
            const Shape & sh = shapes[s];
            const size_t per = static_cast<size_t>(sh.cols * sh.rows);
            const size_t n_products = bytes / sizeof(float) / per;
            const ops::Matrix whole = ops::make_matrix(tensor::ElemType::F32, w, sh.cols, sh.rows * static_cast<int64_t>(n_products));
            for (int nt = 1; nt <= 8; ++nt) {
                for (size_t v = 0; v < n_var; ++v) {
                    const double t0 = bench::now_seconds(threads == 1);
                    for (size_t p = 0; p < n_products; ++p) {
                        if (v < variants.size()) {
                            product(variants[v], w + p * per, sh, x.data(), sh.cols + pad, nt, y.data(), pool);
                        } else if (v == n_var - 1) {
                            y[0] += read_product(w + p * per, sh, pool);
                        } else {
                            ops::matmul(whole.row_slice(static_cast<int64_t>(p) * sh.rows, sh.rows), x.data(), nt, y.data(), &pool);
                        }
                    }
                    gbs[s][nt - 1][v].push_back(static_cast<double>(n_products * per * sizeof(float)) / (bench::now_seconds(threads == 1) - t0) / 1e9);
                }
            }
        }
    }
    std::printf("%s, %zu MiB in 2 MiB pages, %d threads, best of %d rounds, GB/s of weights (ratio to the first), %s\n",
                ops::cpu::isa_name(isa), mib, threads, rounds, threads == 1 ? "thread CPU time" : "wall time");
    std::printf("%-12s %3s", "shape", "tok");
    for (const auto & v : variants) std::printf(" | %18s", v.name);
    std::printf(" | %18s | %18s\n", "ops::matmul", "read (matmul/read)");
    for (int s = 0; s < 3; ++s) {
        for (int nt = 1; nt <= 8; ++nt) {
            std::printf("%-12s %3d", shapes[s].name, nt);
            const double base = best(gbs[s][nt - 1][0]);
            for (size_t v = 0; v + 1 < n_var; ++v) {
                const double m = best(gbs[s][nt - 1][v]);
                std::printf(" | %10.1f (%4.2f)", m, m / base);
            }
            const double read = best(gbs[s][nt - 1][n_var - 1]);
            std::printf(" | %10.1f (%4.2f)", read, best(gbs[s][nt - 1][n_var - 2]) / read);
            std::printf("\n");
        }
    }
    std::free(w);
    return y[0] == 12345.0f ? 1 : 0;
}
