// Per-kernel speed of the dispatch table: for each weight type (F32, F16, BF16, Q8_0 and the int8 variant of
// Q8_0) and each ISA level this CPU has, a streaming matvec (vec_dot over a matrix larger than the last-level cache: GB/s of weights) and a
// prompt-sized tile product (dot_tile over 64 tokens from cache: GFLOP/s), both on one thread; then ops::matmul
// at the active level with 1 and 2 threads (one token and 512 tokens). Run by hand: bench_kernels
// [--benchmark_filter=...]. OFFGRID_ISA lowers the level of the matmul cases.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "tensor/quantize.h"

namespace {

using namespace offgrid;
using tensor::ElemType;

constexpr int64_t kCols = 1024;

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto & x : v) x = dist(rng);
    return v;
}

struct Weights {
    std::vector<uint8_t> bytes;
    size_t row_bytes = 0;
    int64_t rows = 0;
};

// rows x kCols weights of the type (encoded from a repeated random block so setup stays quick).
Weights make_weights(ElemType type, int64_t rows) {
    Weights w;
    w.rows = rows;
    w.row_bytes = tensor::row_bytes(type, kCols);
    w.bytes.resize(w.row_bytes * rows);
    const auto src = random_floats(kCols * 64, 1);
    for (int64_t r = 0; r < 64 && r < rows; ++r) tensor::quantize_row(type, src.data() + r * kCols, w.bytes.data() + r * w.row_bytes, kCols);
    for (int64_t r = 64; r < rows; ++r) std::memcpy(w.bytes.data() + r * w.row_bytes, w.bytes.data() + (r % 64) * w.row_bytes, w.row_bytes);
    return w;
}

std::vector<uint8_t> make_acts(const ops::cpu::TypeKernels & k, int n_tok, size_t & stride) {
    const auto x = random_floats(kCols * n_tok, 2);
    stride = ops::cpu::act_row_bytes(k.act_type, kCols);
    std::vector<uint8_t> a(stride * n_tok);
    for (int t = 0; t < n_tok; ++t) {
        if (k.act_type == ElemType::F32) {
            std::memcpy(a.data() + t * stride, x.data() + t * kCols, kCols * 4);
        } else {
            k.quantize_act(x.data() + t * kCols, a.data() + t * stride, kCols);
        }
    }
    return a;
}

// Streams every weight byte once per iteration (about 64 MiB of weights, above the last-level cache).
void BM_VecDotStream(benchmark::State & state, ElemType type, const ops::cpu::TypeKernels * kp) {
    const ops::cpu::TypeKernels & k = *kp;
    const int64_t rows = (int64_t(64) << 20) / static_cast<int64_t>(tensor::row_bytes(type, kCols));
    const Weights w = make_weights(type, rows);
    size_t stride;
    const auto act = make_acts(k, 1, stride);
    std::vector<float> y(rows);
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; ++r) y[r] = k.vec_dot(w.bytes.data() + r * w.row_bytes, act.data(), kCols);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w.bytes.size()));
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * kCols * state.iterations(), benchmark::Counter::kIsRate,
                                                   benchmark::Counter::kIs1000);
}

// 256 rows x 64 tokens, everything in cache: the arithmetic rate of the tile kernel.
void BM_TileFromCache(benchmark::State & state, ElemType type, const ops::cpu::TypeKernels * kp) {
    const ops::cpu::TypeKernels & k = *kp;
    const int64_t rows = 256;
    const int n_tok = 64;
    const Weights w = make_weights(type, rows);
    size_t stride;
    const auto act = make_acts(k, n_tok, stride);
    std::vector<float> y(rows * n_tok);
    constexpr int T = ops::cpu::kTileMax;
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; r += T) {
            for (int t = 0; t < n_tok; t += T) {
                const uint8_t * wr = w.bytes.data() + r * w.row_bytes;
                if (k.dot_tile) {
                    k.dot_tile(wr, w.row_bytes, act.data() + t * stride, stride, kCols, T, T, y.data() + t * rows + r, rows);
                } else {
                    for (int tt = 0; tt < T; ++tt)
                        for (int rr = 0; rr < T; ++rr)
                            y[(t + tt) * rows + r + rr] = k.vec_dot(wr + rr * w.row_bytes, act.data() + (t + tt) * stride, kCols);
                }
            }
        }
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * kCols * n_tok * state.iterations(),
                                                   benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// ops::matmul end to end (activation quantisation, tiling, threads) on a 4096 x 1024 matrix.
void BM_Matmul(benchmark::State & state, ElemType type) {
    const int64_t rows = 4096;
    const int n_tok = static_cast<int>(state.range(0));
    const int threads = static_cast<int>(state.range(1));
    const Weights w = make_weights(type, rows);
    const ops::Matrix m = ops::make_matrix(type, w.bytes.data(), kCols, rows);
    const auto x = random_floats(kCols * n_tok, 3);
    std::vector<float> y(rows * n_tok);
    ops::ThreadPool pool(threads);
    for (auto _ : state) {
        ops::matmul(m, x.data(), n_tok, y.data(), &pool);
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w.bytes.size()));
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * kCols * n_tok * state.iterations(),
                                                   benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

const int registered = [] {
    for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::Q8_0}) {
        const std::string tn(tensor::traits(type).name);
        for (ops::cpu::Isa isa : ops::cpu::available_isas()) {
            const std::string in = ops::cpu::isa_name(isa);
            // Q8_0 also in its int8 variant (Q8_0 activations), which the table leaves out (docs/kernels.md).
            std::vector<std::pair<std::string, const ops::cpu::TypeKernels *>> variants{
                {tn, ops::cpu::kernels_for(type, isa)}};
            if (type == ElemType::Q8_0) variants.push_back({tn + "-int8", ops::cpu::q8_0_int8_kernels(isa)});
            for (const auto & [name, k] : variants) {
                benchmark::RegisterBenchmark(("vec_dot_stream/" + name + "/" + in).c_str(), BM_VecDotStream, type, k)
                    ->Unit(benchmark::kMillisecond);
                benchmark::RegisterBenchmark(("tile_cache/" + name + "/" + in).c_str(), BM_TileFromCache, type, k)
                    ->Unit(benchmark::kMicrosecond);
            }
        }
        benchmark::RegisterBenchmark(("matmul/" + tn + "/" + ops::cpu::isa_name(ops::cpu::active_isa())).c_str(),
                                     BM_Matmul, type)
            ->ArgNames({"tokens", "threads"})
            ->Args({1, 1})->Args({1, 2})->Args({512, 1})->Args({512, 2})
            ->UseRealTime()  // the workers are not the timed thread
            ->Unit(benchmark::kMillisecond);
    }
    return 0;
}();

}  // namespace

BENCHMARK_MAIN();
