// Probe behind the tile shapes of the AVX-512 int16 kernels (docs/kernels.md, "Integer kernels"; not part of
// the build): 256 rows x 64 tokens from cache, one thread, each in 4-row tiles of nt tokens, computed three ways
// in one process: the 4 rows together per super-block (dot_rows<T, K, 4, nt>, what dot_tile does), rows in
// pairs and rows one after another, all bit-identical (checked). Prints GFLOP/s and the ratios to the first.
// It includes the kernel file itself, so it times exactly the kernels of the tree. Build by hand from the
// repository root, after the main build:
//   g++ -O3 -DNDEBUG -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
//     -Isrc -Iinclude bench/probes/int16_tile.cpp build/liboffgrid_tensor.a -o /tmp/int16_tile && /tmp/int16_tile
#include "ops/cpu/kernels_quant_int16_avx512.cpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/half.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

namespace {

using namespace offgrid;
using namespace offgrid::ops::cpu::quant;
using tensor::BlockQ16_K;

constexpr int64_t kCols = 1024, kRows = 256;
constexpr int kTokens = 64;

template <class T, bool K, int NR, int NT>
void sweep(const uint8_t * w, size_t rb, const uint8_t * act, size_t as, float * y) {
    for (int64_t r = 0; r < kRows; r += 4) {
        for (int t = 0; t + NT <= kTokens; t += NT) {
            for (int rr = 0; rr < 4; rr += NR) {
                dot_rows<T, K, NR, NT>(w + (r + rr) * rb, rb, act + t * as, as, kCols, y + t * kRows + r + rr, kRows);
            }
        }
    }
}

template <class F>
double best_seconds(F f) {
    double best = 1e30;
    for (int k = 0; k < 100; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// Random quant bits with a sane f16 scale at each offset of `f16_at` in every block.
std::vector<uint8_t> random_weights(size_t row_bytes, size_t block_bytes, std::initializer_list<size_t> f16_at) {
    std::vector<uint8_t> w(row_bytes * kRows);
    std::mt19937 rng(5);
    for (auto & b : w) b = static_cast<uint8_t>(rng());
    for (size_t b = 0; b < w.size() / block_bytes; ++b) {
        for (size_t off : f16_at) {
            const uint16_t h = tensor::f32_to_f16(0.01f + 0.001f * static_cast<float>(rng() % 16));
            std::memcpy(&w[b * block_bytes + off], &h, 2);
        }
    }
    return w;
}

template <class T, bool K, int NT>
void compare(const char * name, const std::vector<uint8_t> & w, size_t rb, const uint8_t * act, size_t as) {
    std::vector<float> y4(kRows * kTokens), y2(kRows * kTokens), y1(kRows * kTokens);
    sweep<T, K, 4, NT>(w.data(), rb, act, as, y4.data());
    sweep<T, K, 2, NT>(w.data(), rb, act, as, y2.data());
    sweep<T, K, 1, NT>(w.data(), rb, act, as, y1.data());
    const size_t bytes = sizeof(float) * y1.size();
    const bool same = std::memcmp(y1.data(), y2.data(), bytes) == 0 && std::memcmp(y1.data(), y4.data(), bytes) == 0;
    const double flop = 2.0 * kRows * kCols * (kTokens / NT * NT);
    const double s4 = best_seconds([&] { sweep<T, K, 4, NT>(w.data(), rb, act, as, y4.data()); });
    const double s2 = best_seconds([&] { sweep<T, K, 2, NT>(w.data(), rb, act, as, y2.data()); });
    const double s1 = best_seconds([&] { sweep<T, K, 1, NT>(w.data(), rb, act, as, y1.data()); });
    std::printf("%-5s 4x%d  4 rows %6.1f GFLOP/s  pairs %6.1f (%.3f)  one row %6.1f (%.3f)%s\n", name, NT,
                flop / s4 * 1e-9, flop / s2 * 1e-9, s4 / s2, flop / s1 * 1e-9, s4 / s1, same ? "" : "  (BITS DIFFER)");
}

template <class T, bool K>
void all_nt(const char * name, const std::vector<uint8_t> & w, size_t rb, const uint8_t * act, size_t as) {
    compare<T, K, 1>(name, w, rb, act, as);
    compare<T, K, 2>(name, w, rb, act, as);
    compare<T, K, 3>(name, w, rb, act, as);
    compare<T, K, 4>(name, w, rb, act, as);
    compare<T, K, 6>(name, w, rb, act, as);
    compare<T, K, 8>(name, w, rb, act, as);
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd;
    std::vector<float> x(kCols * kTokens);
    for (auto & v : x) v = nd(rng);
    const size_t as = static_cast<size_t>(kCols / 256) * sizeof(BlockQ16_K);
    std::vector<uint8_t> storage(as * kTokens + 64);
    uint8_t * act = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    for (int t = 0; t < kTokens; ++t) quantize_q16_k(x.data() + t * kCols, act + t * as, kCols);
    const size_t q4k = sizeof(tensor::BlockQ4_K) * kCols / 256, q6k = sizeof(tensor::BlockQ6_K) * kCols / 256;
    const size_t q40 = sizeof(tensor::BlockQ4_0) * kCols / 32;
    all_nt<DQ4K, true>("q4_K", random_weights(q4k, sizeof(tensor::BlockQ4_K), {0, 2}), q4k, act, as);
    all_nt<DQ6K, true>("q6_K", random_weights(q6k, sizeof(tensor::BlockQ6_K), {208}), q6k, act, as);
    all_nt<DQ40, false>("q4_0", random_weights(q40, sizeof(tensor::BlockQ4_0), {0}), q40, act, as);
}

#else
int main() { return 0; }
#endif
