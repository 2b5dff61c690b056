// The attention of a prompt on a QSA layer of the scale shape, alone: per token, 24 query heads of 256 over 2 KV
// heads (12 a group, one ops::attend_rows call a group), f16 K and V rows (1 KiB a cell for both heads), each token
// over its own 2,048 cells (512 pools of 4 drawn from a cache of --cells cells, most shared with the token before,
// as neighbouring prompt tokens select: per token, --replace N times a random one of its pools is replaced by a
// random pool, 32 by default), one thread. The cache is small enough to stay in the L3, as a layer's rows at the
// agent workload's depths mostly do. Prints microseconds per call and GFLOP/s (4 * 12 * 2048 * 256 a call).
//   bench_prompt_attend [-n TOKENS (64)] [-r ROUNDS (5)] [--cells N (8192)] [--replace N (32)] [--hot]
//   (OFFGRID_ISA picks the level; --hot: every call over the same 64 rows, the arithmetic alone)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "args/cli_args.h"
#include "memory/huge_pages.h"
#include "ops/attention.h"
#include "ops/cpu/dispatch.h"
#include "ops/half.h"

namespace {

using namespace offgrid;

constexpr size_t kD = 256, kH = 24, kHkv = 2, kR = 4, kPools = 512;
constexpr size_t kRow = kHkv * kD * 2;  // bytes of a K (or V) row, both KV heads

}  // namespace

int main(int argc, char ** argv) {
    int64_t tokens = 64, rounds = 5, n_cells = 8192, replace = static_cast<int64_t>(kPools / 16);
    tools::ArgParser args;
    args.integer({"-n"}, &tokens, 1, 4096);
    args.integer({"-r"}, &rounds, 1, 1000);
    args.integer({"--cells"}, &n_cells, 4096, 1 << 20);
    args.integer({"--replace"}, &replace, 0, 1 << 20);
    bool hot = false;
    args.flag({"--hot"}, &hot);
    if (!args.parse(std::vector<std::string>(argv + 1, argv + argc))) {
        std::printf("usage: bench_prompt_attend [-n TOKENS] [-r ROUNDS] [--cells N] [--replace N] [--hot]\n");
        return 0;
    }
    const size_t cells_total = static_cast<size_t>(n_cells);
    // In 2 MiB pages, as the engine's K and V rows (memory::HugePageAllocator): each row of a selection lies on
    // another 4 KiB page, so 4 KiB pages would add a TLB walk to most row fetches.
    std::vector<uint16_t, memory::HugePageAllocator<uint16_t>> k(cells_total * kRow / 2), v(k.size());
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t i = 0; i < k.size(); ++i) {
        k[i] = ops::float_to_half(0.3f * nd(rng));
        v[i] = ops::float_to_half(nd(rng));
    }
    // Each token's pools: the previous token's with `replace` draws replaced, kept in pool order.
    const size_t n_pools = cells_total / kR;
    std::vector<uint32_t> pools(n_pools);
    for (size_t i = 0; i < n_pools; ++i) pools[i] = static_cast<uint32_t>(i);
    std::shuffle(pools.begin(), pools.end(), rng);
    std::vector<uint32_t> sel(pools.begin(), pools.begin() + kPools);
    std::vector<std::vector<uint32_t>> cells(static_cast<size_t>(tokens));
    for (auto & c : cells) {
        for (int64_t i = 0; i < replace; ++i) sel[rng() % kPools] = static_cast<uint32_t>(rng() % n_pools);
        std::vector<uint32_t> s = sel;
        std::sort(s.begin(), s.end());
        s.erase(std::unique(s.begin(), s.end()), s.end());
        for (uint32_t p : s)
            for (uint32_t r = 0; r < kR; ++r) c.push_back(p * kR + r);
        if (hot) {
            for (size_t j = 0; j < c.size(); ++j) c[j] = static_cast<uint32_t>(j % 64);  // rows in L1/L2: arithmetic alone
        }
    }
    std::vector<float> q(static_cast<size_t>(tokens) * kH * 2 * kD), out(kH * kD);  // q and gate interleaved
    for (auto & x : q) x = nd(rng);
    const size_t group = kH / kHkv;
    double best = 1e30, flop = 0.0;
    for (int64_t round = 0; round < rounds; ++round) {
        flop = 0.0;
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t t = 0; t < tokens; ++t) {
            const auto & c = cells[static_cast<size_t>(t)];
            for (size_t g = 0; g < kHkv; ++g) {
                const ops::CacheTable kt{reinterpret_cast<const uint8_t *>(k.data()) + g * kD * 2, kRow, tensor::ElemType::F16};
                const ops::CacheTable vt{reinterpret_cast<const uint8_t *>(v.data()) + g * kD * 2, kRow, tensor::ElemType::F16};
                ops::attend_rows(&q[(static_cast<size_t>(t) * kH + g * group) * 2 * kD], group, 2 * kD, kD, kt, vt, c,
                                 0.0625f, &out[g * group * kD], kD);
                flop += 4.0 * group * static_cast<double>(c.size()) * kD;
            }
        }
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
    }
    double check = 0.0;
    for (float x : out) check += x;
    const double calls = static_cast<double>(tokens) * kHkv;
    std::printf("isa %s, %lld tokens x %zu groups of %zu heads of %zu, ~%zu cells each, cache %lld cells: best of %lld "
                "%.1f us a call, %.1f GFLOP/s (check %.4f)\n",
                ops::cpu::isa_name(ops::cpu::active_isa()), static_cast<long long>(tokens), kHkv, group, kD,
                cells[0].size(), static_cast<long long>(n_cells), static_cast<long long>(rounds), best / calls * 1e6,
                flop / best / 1e9, check);
    return 0;
}
