// The attention over the budget alone, as one decode token of a QSA layer of the `bench` shape pays it at depth:
// 8 query heads of 128 over 2 KV heads, f16 rows of both KV heads (512 B a cell), the cells of 512 pools of 4
// scattered over a 64k-cell cache (in sequence order, as the selection hands them out), one KV group per thread
// as the model splits it (ops::attend_rows). The rows are read from memory: each repetition uses the next of
// several caches (256 MiB in all). Prints the best and median time per layer and the bytes per second.
//   bench_budget_attend [-n REPS] [--warm]   (--warm: the same cache every time, from the caches)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "memory/huge_pages.h"
#include "ops/attention.h"
#include "ops/cpu/dispatch.h"
#include "ops/half.h"
#include "ops/thread_pool.h"
#include "args/cli_args.h"

namespace {

using namespace offgrid;

constexpr size_t kD = 128, kH = 8, kHkv = 2, kR = 4, kPools = 512, kCells = 65536;
constexpr size_t kRow = kHkv * kD * 2;  // bytes of a K (or V) row, both KV heads

}  // namespace

int main(int argc, char ** argv) {
    int64_t reps = 40;
    tools::ArgParser args;
    args.integer({"-n", "--reps"}, &reps, 1, 100000);
    bool warm = false;
    args.flag({"--warm"}, &warm);
    if (!args.parse(std::vector<std::string>(argv + 1, argv + argc))) {
        std::printf("usage: bench_budget_attend [-n REPS (40)] [--warm]\n");
        return 0;
    }
    const size_t n_caches = (size_t{256} << 20) / (2 * kCells * kRow);
    std::vector<uint16_t, memory::HugePageAllocator<uint16_t>> k(n_caches * kCells * kRow / 2), v(k.size());
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (size_t i = 0; i < k.size(); i += 7) k[i] = v[i] = ops::float_to_half(nd(rng));  // sparse fill: speed only
    std::vector<uint32_t> pools(kCells / kR);
    for (size_t i = 0; i < pools.size(); ++i) pools[i] = static_cast<uint32_t>(i);
    std::shuffle(pools.begin(), pools.end(), rng);
    pools.resize(kPools);
    std::sort(pools.begin(), pools.end());
    std::vector<uint32_t> cells;
    for (uint32_t p : pools)
        for (uint32_t c = 0; c < kR; ++c) cells.push_back(p * kR + c);
    std::vector<float> q(kH * kD), out(kH * kD);
    for (auto & x : q) x = nd(rng);
    const size_t group = kH / kHkv, bytes = cells.size() * 2 * kRow;
    std::printf("isa %s: %zu cells (%zu pools of %zu), %zu B of K and V per cell, %.2f MiB per layer, %s, best "
                "and median of %lld\n| threads | best us | median us | best GB/s | median GB/s |\n|---:|---:|---:|---:|---:|\n",
                ops::cpu::isa_name(ops::cpu::active_isa()), cells.size(), kPools, kR, 2 * kRow, bytes / 1048576.0,
                warm ? "warm" : "from memory", static_cast<long long>(reps));
    size_t next = 0;
    for (int threads : {1, 2}) {
        ops::ThreadPool pool(threads);
        std::vector<double> us;
        for (int64_t i = 0; i < reps; ++i) {
            const size_t c = next;
            if (!warm) next = (next + 1) % n_caches;
            const auto * kb = reinterpret_cast<const uint8_t *>(k.data()) + c * kCells * kRow;
            const auto * vb = reinterpret_cast<const uint8_t *>(v.data()) + c * kCells * kRow;
            const auto t0 = std::chrono::steady_clock::now();
            ops::parallel_for(&pool, kHkv, [&](size_t g0, size_t g1) {
                for (size_t g = g0; g < g1; ++g) {
                    const ops::CacheTable kt{kb + g * kD * 2, kRow, tensor::ElemType::F16};
                    const ops::CacheTable vt{vb + g * kD * 2, kRow, tensor::ElemType::F16};
                    ops::attend_rows(&q[g * group * kD], group, kD, kD, kt, vt, cells, 0.088f, &out[g * group * kD], kD);
                }
            });
            const auto t1 = std::chrono::steady_clock::now();
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        std::sort(us.begin(), us.end());
        const double best = us.front(), med = us[us.size() / 2];
        std::printf("| %d | %.1f | %.1f | %.2f | %.2f |\n", threads, best, med, bytes / best / 1e3, bytes / med / 1e3);
    }
    return 0;
}
