// Per-kernel speed of the dispatch table: for each weight type (F32, F16, BF16, the quantised types in their
// default kernels, their exact f32-activation kernels and their 8-bit-activation kernels) and each ISA level
// this CPU has, a streaming matvec (vec_dot over a matrix larger than the last-level cache: GB/s of weights),
// a decode-shaped matvec from cache (4-row tiles of one token: the kernel's own rate, GB/s), and a
// prompt-sized tile product (dot_tile over 64 tokens from cache: GFLOP/s), all on one thread; then ops::matmul
// at the active level with 1 and 2 threads (one token and 512 tokens). Run by hand: bench_kernels
// [--benchmark_filter=...]. OFFGRID_ISA lowers the level of the matmul cases.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/levels.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "tensor/half.h"
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

// Byte offsets of the f16 scales in a block of the types tensor::quantize_row cannot encode.
std::vector<int> f16_fields(ElemType t) {
    switch (t) {
        case ElemType::Q4_0: case ElemType::Q5_0: case ElemType::IQ4_NL: case ElemType::IQ4_XS: return {0};
        case ElemType::Q4_1: case ElemType::Q5_1: case ElemType::Q4_K: case ElemType::Q5_K: return {0, 2};
        case ElemType::Q2_K: return {80, 82};
        case ElemType::Q3_K: return {108};
        case ElemType::Q6_K: return {208};
        default: return {};
    }
}

// 64 rows of random quant bits with sane f16 scales (no encoder is needed to time a kernel).
void random_blocks(ElemType type, uint8_t * dst, size_t bytes) {
    std::mt19937 rng(5);
    for (size_t i = 0; i < bytes; ++i) dst[i] = static_cast<uint8_t>(rng());
    const size_t bb = tensor::traits(type).block_bytes;
    for (size_t b = 0; b < bytes / bb; ++b) {
        for (int off : f16_fields(type)) {
            const uint16_t h = tensor::f32_to_f16(0.01f + 0.001f * static_cast<float>(rng() % 16));
            std::memcpy(dst + b * bb + off, &h, 2);
        }
    }
}

// rows x kCols weights of the type (encoded from a repeated random block so setup stays quick).
Weights make_weights(ElemType type, int64_t rows) {
    Weights w;
    w.rows = rows;
    w.row_bytes = tensor::row_bytes(type, kCols);
    w.bytes.resize(w.row_bytes * rows);
    const auto src = random_floats(kCols * 64, 1);
    if (!f16_fields(type).empty()) {
        random_blocks(type, w.bytes.data(), w.row_bytes * static_cast<size_t>(std::min<int64_t>(rows, 64)));
    } else {
        for (int64_t r = 0; r < 64 && r < rows; ++r) tensor::quantize_row(type, src.data() + r * kCols, w.bytes.data() + r * w.row_bytes, kCols);
    }
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

// 256 rows of one token from cache, in the driver's 4-row tiles: the decode kernel's own rate (GB/s of weights).
void BM_MatvecFromCache(benchmark::State & state, ElemType type, const ops::cpu::TypeKernels * kp) {
    const ops::cpu::TypeKernels & k = *kp;
    const int64_t rows = 256;
    const Weights w = make_weights(type, rows);
    size_t stride;
    const auto act = make_acts(k, 1, stride);
    std::vector<float> y(rows);
    constexpr int T = ops::cpu::kTileMax;
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; r += T) {
            const uint8_t * wr = w.bytes.data() + r * w.row_bytes;
            if (k.dot_tile) {
                k.dot_tile(wr, w.row_bytes, act.data(), stride, kCols, T, 1, y.data() + r, rows);
            } else {
                for (int rr = 0; rr < T; ++rr) y[r + rr] = k.vec_dot(wr + rr * w.row_bytes, act.data(), kCols);
            }
        }
        benchmark::DoNotOptimize(y.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w.bytes.size()));
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

// The same 256 x 64 product through the entry's prompt product (TypeKernels::gemm), the tokens packed once (one key,
// as the rows of one product on a thread).
void BM_GemmFromCache(benchmark::State & state, ElemType type, const ops::cpu::TypeKernels * kp) {
    const ops::cpu::TypeKernels & k = *kp;
    const int64_t rows = 256;
    const int n_tok = 64;
    const Weights w = make_weights(type, rows);
    size_t stride;
    const auto act = make_acts(k, n_tok, stride);
    std::vector<float> y(rows * n_tok);
    for (auto _ : state) {
        k.gemm(w.bytes.data(), w.row_bytes, act.data(), stride, kCols, rows, n_tok, y.data(), rows, 1);
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
    for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::Q8_0, ElemType::Q4_K, ElemType::Q6_K,
                          ElemType::Q5_K, ElemType::Q3_K, ElemType::Q2_K, ElemType::IQ4_XS, ElemType::Q4_0,
                          ElemType::Q5_0, ElemType::IQ4_NL, ElemType::Q4_1, ElemType::Q5_1}) {
        const std::string tn(tensor::traits(type).name);
        const bool quantised = type != ElemType::F32 && type != ElemType::F16 && type != ElemType::BF16;
        for (ops::cpu::Isa isa : ops::cpu::available_isas()) {
            const std::string in = ops::cpu::isa_name(isa);
            // The table's entry (int16 activations for the quantised types unless OFFGRID_QUANT_ACT says
            // otherwise), the exact entry, and the 8-bit-activation entry (docs/kernels.md).
            const ops::cpu::TypeKernels * k = ops::cpu::kernels_for(type, isa);
            std::vector<std::pair<std::string, const ops::cpu::TypeKernels *>> variants{
                {tn + (k->act_type == ElemType::Q16_K ? "-int16" : ""), k}};
            if (quantised && k->act_type != ElemType::F32) variants.push_back({tn + "-exact", ops::cpu::exact_kernels_for(type, isa)});
            if (type == ElemType::Q8_0) {
                // The level's int16 Q8_0 entry when the table holds the exact one (LevelFills::q8_0_int16 chooses
                // by this measurement), so each CPU kind can be measured for both.
                const ops::cpu::LevelFills * lv = ops::cpu::level_fills(isa);
                if (k->act_type == ElemType::F32 && lv != nullptr && lv->int16 != nullptr) {
                    static std::vector<std::array<ops::cpu::TypeKernels, ops::cpu::kTypeTableSize>> int16_tables;
                    int16_tables.reserve(ops::cpu::kIsaCount);
                    auto & table = int16_tables.emplace_back();
                    lv->int16(table.data());
                    const ops::cpu::TypeKernels & q = table[static_cast<uint32_t>(type)];
                    if (q.vec_dot != nullptr) variants.push_back({tn + "-int16", &q});
                }
                variants.push_back({tn + "-int8", ops::cpu::q8_0_int8_kernels(isa)});
            } else if (quantised) {
                variants.push_back({tn + "-int8", ops::cpu::int8_kernels_for(type, isa)});
            }
            for (const auto & [name, kv] : variants) {
                benchmark::RegisterBenchmark(("vec_dot_stream/" + name + "/" + in).c_str(), BM_VecDotStream, type, kv)
                    ->Unit(benchmark::kMillisecond);
                benchmark::RegisterBenchmark(("matvec_cache/" + name + "/" + in).c_str(), BM_MatvecFromCache, type, kv)
                    ->Unit(benchmark::kMicrosecond);
                benchmark::RegisterBenchmark(("tile_cache/" + name + "/" + in).c_str(), BM_TileFromCache, type, kv)
                    ->Unit(benchmark::kMicrosecond);
                if (kv->gemm != nullptr && kv->act_type != ElemType::F32) {
                    benchmark::RegisterBenchmark(("gemm_cache/" + name + "/" + in).c_str(), BM_GemmFromCache, type, kv)
                        ->Unit(benchmark::kMicrosecond);
                }
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
