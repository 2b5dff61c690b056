// The pooled-key scan alone: one decode query (4 indexer heads of 128, the `bench` shape) scored against the f16
// pooled keys of one QSA layer in pool order, split over a ThreadPool as the model splits it, two layouts in one
// process: "rows" (key after key, ops::score_pool_rows, 16 keys transposed in registers) and "blocks" (element-major
// blocks of 16 keys, as memory::Storage::pool_keys hands them out, ops::score_pool_blocks). The keys are read from
// memory: every repetition scans the next slice of a 256 MiB array, so none is in a cache. Prints the best and
// median time per scan and the bytes per second, for 1 and 2 threads, and checks the scores against the scalar
// twin bit for bit.
//   bench_scan [-d 65536] [-n REPS] [--warm]   (--warm: the same slice every time, from the caches)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "memory/huge_pages.h"
#include "ops/attention.h"
#include "ops/cpu/attn_rows.h"
#include "ops/cpu/dispatch.h"
#include "ops/half.h"
#include "ops/thread_pool.h"
#include "args/cli_args.h"

namespace {

using namespace offgrid;

constexpr size_t kDi = 128, kHi = 4, kR = 4;
constexpr size_t kArrayBytes = size_t{256} << 20;

}  // namespace

int main(int argc, char ** argv) {
    int64_t depth = 65536, reps = 40;
    tools::ArgParser args;
    args.integer({"-d", "--depth"}, &depth, 64, 1 << 22);
    args.integer({"-n", "--reps"}, &reps, 1, 100000);
    bool warm = false;
    args.flag({"--warm"}, &warm);
    if (!args.parse(std::vector<std::string>(argv + 1, argv + argc))) {
        std::printf("usage: bench_scan [-d 65536] [-n REPS (40)] [--warm]\n");
        return 0;
    }
    const size_t n_keys = static_cast<size_t>(depth) / kR, key_bytes = kDi * 2, slice = n_keys * key_bytes;
    const size_t n_slices = std::max<size_t>(2, kArrayBytes / slice);
    std::vector<uint16_t, memory::HugePageAllocator<uint16_t>> keys(n_slices * n_keys * kDi);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto & x : keys) x = ops::float_to_half(nd(rng));
    std::vector<float> qi(kHi * kDi), scores(n_keys), twin(n_keys);
    for (auto & x : qi) x = nd(rng) * 0.1f;
    const auto * base = reinterpret_cast<const uint8_t *>(keys.data());
    // The same keys in element-major blocks of 16, slice by slice.
    const size_t B = ops::cpu::kScoreBlock;
    std::vector<uint16_t, memory::HugePageAllocator<uint16_t>> blocked(keys.size());
    for (size_t p = 0; p < n_slices * n_keys; ++p)
        for (size_t e = 0; e < kDi; ++e) blocked[(p / B) * kDi * B + e * B + p % B] = keys[p * kDi + e];
    const auto * bbase = reinterpret_cast<const uint8_t *>(blocked.data());

    // The twin's scores of slice 0, for the bit check.
    ops::cpu::attn_row_kernels(ops::cpu::Isa::Scalar)
        .score_f16(qi.data(), 1, kHi * kDi, kHi, kDi, base, key_bytes, nullptr, n_keys, twin.data(), 0);

    std::printf("isa %s, depth %lld: %zu pooled keys of %zu B (%.2f MiB) per scan, %s, best and median of %lld\n",
                ops::cpu::isa_name(ops::cpu::active_isa()), static_cast<long long>(depth), n_keys, key_bytes,
                slice / 1048576.0, warm ? "warm" : "from memory", static_cast<long long>(reps));
    std::printf("| layout | threads | best us | median us | best GB/s | median GB/s | bits vs twin |\n"
                "|---|---:|---:|---:|---:|---:|---|\n");
    size_t next = 1;
    for (int threads : {1, 2}) {
        ops::ThreadPool pool(threads);
        std::vector<double> us[2];
        bool same[2] = {true, true};
        for (int64_t i = 0; i < reps + 1; ++i) {
            const size_t s = (i == reps || warm) ? 0 : next;  // the last repetition scans slice 0 for the bit check
            next = next + 1 < n_slices ? next + 1 : 1;
            for (int v = 0; v < 2; ++v) {  // the two layouts alternate, so a busy machine disturbs both alike
                const uint8_t * b = (v == 0 ? base : bbase) + s * slice;
                const auto t0 = std::chrono::steady_clock::now();
                if (v == 0) {
                    ops::parallel_for(&pool, n_keys, [&](size_t p0, size_t p1) {
                        const ops::CacheTable t{b + p0 * key_bytes, key_bytes, tensor::ElemType::F16};
                        ops::score_pool_rows(qi.data(), 1, kHi * kDi, kHi, kDi, t, nullptr, p1 - p0, scores.data() + p0, 0);
                    }, 512);
                } else {
                    ops::parallel_for(&pool, (n_keys + B - 1) / B, [&](size_t b0, size_t b1) {
                        const size_t p0 = b0 * B, p1 = std::min(b1 * B, n_keys);
                        ops::score_pool_blocks(qi.data(), 1, kHi * kDi, kHi, kDi, b + b0 * B * key_bytes,
                                               tensor::ElemType::F16, p1 - p0, scores.data() + p0, 0);
                    }, 512 / B);
                }
                const auto t1 = std::chrono::steady_clock::now();
                if (i < reps) us[v].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
                else same[v] = std::memcmp(scores.data(), twin.data(), n_keys * sizeof(float)) == 0;
            }
        }
        for (int v = 0; v < 2; ++v) {
            std::sort(us[v].begin(), us[v].end());
            const double best = us[v].front(), med = us[v][us[v].size() / 2];
            std::printf("| %s | %d | %.1f | %.1f | %.2f | %.2f | %s |\n", v == 0 ? "rows" : "blocks", threads, best, med,
                        slice / best / 1e3, slice / med / 1e3, same[v] ? "same" : "differ");
        }
    }
    return 0;
}
