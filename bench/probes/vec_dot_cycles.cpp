// Probe of one quantised type's vec_dot at a level, from L1/L2 (docs/kernels.md, "Integer kernels"; not part of
// the build): `rows` weight rows of n columns (random quants, small f16 scales) against one activation row in the
// entry's format, repeated; prints cycles per super-block at a nominal clock and GB/s of weights, three times.
// The cycles assume the clock given (default 3.5 GHz; measure it, e.g. with a chain of dependent imul).
// Build by hand from the repository root, after the main build:
//   g++ -O2 -std=c++20 -Isrc -Iinclude bench/probes/vec_dot_cycles.cpp -Wl,--start-group build/liboffgrid_*.a
//     -Wl,--end-group -lpthread -o /tmp/vec_dot_cycles && /tmp/vec_dot_cycles 2560 16 q4_K 3.5
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "tensor/types.h"

int main(int argc, char ** argv) {
    using namespace offgrid;
    const int64_t n = argc > 1 ? std::atoll(argv[1]) : 2560;
    const int rows = argc > 2 ? std::atoi(argv[2]) : 16;
    const std::string name = argc > 3 ? argv[3] : "q4_K";
    const double ghz = argc > 4 ? std::atof(argv[4]) : 3.5;
    const bool q6 = name == "q6_K";
    const auto type = q6 ? tensor::ElemType::Q6_K : tensor::ElemType::Q4_K;
    const size_t block_bytes = q6 ? 210 : 144;
    const auto * k = ops::cpu::kernels_for(type, ops::cpu::active_isa());
    const size_t row_bytes = block_bytes * static_cast<size_t>(n / 256);
    std::vector<uint8_t> w(row_bytes * rows);
    std::mt19937 rng(1);
    for (auto & b : w) b = static_cast<uint8_t>(rng());
    const uint16_t scale = 0x2000;  // a small f16 for d (and dmin)
    for (size_t at = 0; at < w.size(); at += block_bytes) {
        if (q6) {
            std::memcpy(&w[at + 208], &scale, 2);
        } else {
            std::memcpy(&w[at], &scale, 2);
            std::memcpy(&w[at + 2], &scale, 2);
        }
    }
    std::vector<float> x(n);
    for (auto & v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<uint8_t> act(static_cast<size_t>(n) * 4);
    k->quantize_act(x.data(), act.data(), n);
    volatile float sink = 0;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        const int iters = 20000;
        for (int i = 0; i < iters; ++i) {
            for (int r = 0; r < rows; ++r) sink = sink + k->vec_dot(&w[r * row_bytes], act.data(), n);
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double blocks = double(iters) * rows * (n / 256);
        std::printf("%s n=%lld rows=%d: %.1f cycles a super-block at %.2f GHz, %.1f GB/s\n", name.c_str(),
                    static_cast<long long>(n), rows, s * ghz * 1e9 / blocks, ghz, blocks * block_bytes / s / 1e9);
    }
}
