// Few-token products on quantised weights (as in decode steps of 2-8 sequences): ops::matmul on the scale
// shape's products (gen-model --preset scale), with matrices rotated over 96 MiB of weights so every call streams its weights from DRAM as
// in the model, at 1..8 and 16 tokens, one process. Per shape and token count: microseconds per call, GB/s of weights,
// GFLOP/s, and the cost ratio to one token (1.00 would be "n tokens for the price of the bytes").
// Run by hand: bench_quant_batch [threads] [type...]  (types: q4_K q6_K q5_0 q8_0 q3_K q5_K q5_1; default q4_K q6_K q8_0, 1 and 2
// threads); OFFGRID_BENCH_TOKENS=1,64,512 measures other token counts.
// OFFGRID_ISA lowers the level; OFFGRID_QUANT_ACT picks the activation format as in the engine.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "memory/huge_pages.h"
#include "ops/cpu/dispatch.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "tensor/half.h"
#include "tensor/types.h"

namespace {

using namespace offgrid;
using tensor::ElemType;

// 96 MiB, far above the 32 MiB L3; OFFGRID_BENCH_POOL_MB=8 times the products from the L3 instead.
size_t pool_bytes = 96u << 20;

// Random quant bits with sane f16 scales (byte offsets per block), so no encoder is needed.
std::vector<int> f16_fields(ElemType t) {
    switch (t) {
        case ElemType::Q4_K: return {0, 2};
        case ElemType::Q6_K: return {208};
        case ElemType::Q8_0: return {0};
        case ElemType::Q5_0: return {0};
        case ElemType::Q5_1: return {0, 2};
        case ElemType::Q5_K: return {0, 2};
        case ElemType::Q3_K: return {108};
        default: return {};
    }
}

// In 2 MiB pages, as the engine keeps loaded weights (gguf::Reader reads them into memory advised MADV_HUGEPAGE):
// with 4 KiB pages a 4-row tile's streams would take a TLB miss every few rows.
using Weights = std::vector<uint8_t, memory::HugePageAllocator<uint8_t>>;

Weights random_weights(ElemType type, size_t bytes) {
    Weights w(bytes);
    std::mt19937 rng(5);
    for (size_t i = 0; i < bytes; i += 4) {
        const uint32_t v = rng();
        std::memcpy(&w[i], &v, std::min<size_t>(4, bytes - i));
    }
    const size_t bb = tensor::traits(type).block_bytes;
    for (size_t b = 0; b < bytes / bb; ++b) {
        for (int off : f16_fields(type)) {
            const uint16_t h = tensor::f32_to_f16(0.01f + 0.001f * static_cast<float>(rng() % 16));
            std::memcpy(&w[b * bb + off], &h, 2);
        }
    }
    return w;
}

struct Shape {
    const char * what;
    int64_t cols, rows;
};

// Token counts measured: 1..8 and 16, or the comma-separated list in OFFGRID_BENCH_TOKENS (say 1,64,512 for
// prompt products).
std::vector<int> token_counts = {1, 2, 3, 4, 5, 6, 7, 8, 16};

void run(ElemType type, const Shape & s, ops::ThreadPool * pool, int threads) {
    if (s.cols % tensor::traits(type).block_size != 0) return;  // llama.cpp's quantiser picks another type there
    const size_t rb = tensor::row_bytes(type, static_cast<uint64_t>(s.cols));
    const size_t mat_bytes = rb * static_cast<size_t>(s.rows);
    const size_t n_mats = std::max<size_t>(2, pool_bytes / mat_bytes);
    const auto w = random_weights(type, mat_bytes * n_mats);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    const size_t max_tokens = static_cast<size_t>(*std::max_element(token_counts.begin(), token_counts.end()));
    std::vector<float> x(static_cast<size_t>(s.cols) * max_tokens), y(static_cast<size_t>(s.rows) * max_tokens);
    for (auto & v : x) v = nd(rng);
    double us1 = 0;
    for (int nt : token_counts) {
        size_t m = 0;
        auto call = [&] {
            const ops::Matrix mat = ops::make_matrix(type, w.data() + (m++ % n_mats) * mat_bytes, s.cols, s.rows);
            ops::matmul(mat, x.data(), nt, y.data(), pool);
        };
        for (size_t i = 0; i < n_mats; ++i) call();  // warm-up: page in, grow the scratch
        // Best of 5 sweeps over all matrices (each sweep streams the 96 MiB once).
        double best = 1e30;
        for (int rep = 0; rep < 5; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            for (size_t i = 0; i < n_mats; ++i) call();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        const double us = best / static_cast<double>(n_mats) * 1e6;
        if (nt == 1) us1 = us;
        std::printf("%-5s %-22s t=%d tokens=%d  %8.1f us  %6.1f GB/s  %6.1f GFLOP/s  cost/1-token %.2f\n",
                    std::string(tensor::traits(type).name).c_str(), s.what, threads, nt, us, static_cast<double>(mat_bytes) / us * 1e-3,
                    2.0 * static_cast<double>(s.cols * s.rows * nt) / us * 1e-3, us / us1);
    }
}

}  // namespace

int main(int argc, char ** argv) {
    std::vector<int> thread_counts = {1, 2};
    std::vector<ElemType> types = {ElemType::Q4_K, ElemType::Q6_K, ElemType::Q8_0};
    if (argc > 1) thread_counts = {std::atoi(argv[1])};
    if (const char * mb = std::getenv("OFFGRID_BENCH_POOL_MB"); mb != nullptr && std::atoi(mb) > 0) {
        pool_bytes = static_cast<size_t>(std::atoi(mb)) << 20;
    }
    if (const char * list = std::getenv("OFFGRID_BENCH_TOKENS"); list != nullptr && *list != '\0') {
        token_counts.clear();
        for (const char * p = list; *p != '\0';) {
            token_counts.push_back(std::max(1, std::atoi(p)));
            while (*p != '\0' && *p != ',') ++p;
            if (*p == ',') ++p;
        }
    }
    if (argc > 2) {
        types.clear();
        for (int i = 2; i < argc; ++i) {
            const std::string t = argv[i];
            if (t == "q4_K") types.push_back(ElemType::Q4_K);
            if (t == "q6_K") types.push_back(ElemType::Q6_K);
            if (t == "q8_0") types.push_back(ElemType::Q8_0);
            if (t == "q5_0") types.push_back(ElemType::Q5_0);
            if (t == "q5_1") types.push_back(ElemType::Q5_1);
            if (t == "q5_K") types.push_back(ElemType::Q5_K);
            if (t == "q3_K") types.push_back(ElemType::Q3_K);
        }
    }
    std::printf("isa %s\n", ops::cpu::isa_name(ops::cpu::active_isa()));
    // The scale shape's products: expert gate/up (2560 -> 640), expert down (640 -> 2560), a hyper-connection
    // up-projection (320 -> 10240), a projection (2560 -> 4096), a slice of the output head (2560 -> 16384 of its
    // 248320 rows).
    const Shape shapes[] = {{"expert 2560->640", 2560, 640}, {"expert 640->2560", 640, 2560}, {"hc 320->10240", 320, 10240},
                            {"proj 2560->4096", 2560, 4096}, {"head 2560->16384", 2560, 16384}};
    for (int threads : thread_counts) {
        ops::ThreadPool pool(threads);
        for (ElemType t : types) {
            for (const Shape & s : shapes) run(t, s, threads > 1 ? &pool : nullptr, threads);
        }
    }
}
