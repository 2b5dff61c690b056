// The QSA part of one decode step, alone, at several depths: score the pooled keys, select the best pools, gather
// and attend, for one query token on the `bench` shape (8 query heads of 128 over 2 KV heads, 4 indexer heads of
// 128, r 4, top_k 2048, f16 rows), on synthetic cache rows. Two variants in one process, so their ratio holds on a
// busy machine: "pointers" (per-token pointer lists, ops::score_pools, top_k + sort, attend_heads),
// "rows" (cells addressed through the row tables, ops::score_pool_rows over the rep rows, the O(n)
// best_pools, ops::attend_rows) and "in order" (as "rows", the pooled keys read from one array in pool order, as
// memory::Storage::pool_keys hands them out). One thread. Prints microseconds per QSA layer and per 1k tokens.
//   bench_sparse_step [-d 4096,16384,65536] [-n REPS] [--warm]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "memory/huge_pages.h"
#include "memory/plan.h"
#include "model/common/kpool_select.h"
#include "ops/attention.h"
#include "ops/cpu/dispatch.h"
#include "ops/elementwise.h"
#include "ops/half.h"
#include "args/cli_args.h"

namespace {

using namespace offgrid;

constexpr size_t kD = 128, kH = 8, kHkv = 2, kDi = 128, kHi = 4, kR = 4, kTopK = 2048;

struct Cache {
    size_t n;
    std::vector<uint16_t, memory::HugePageAllocator<uint16_t>> k, v, idx;  // k, v: n rows of kHkv * kD; idx: n rows of [raw | pooled], kDi each
    std::vector<memory::PosCell> cells;
    std::vector<uint32_t> pools, reps;
    std::vector<uint16_t, memory::HugePageAllocator<uint16_t>> pooled;  // the reps' pooled halves, in pool order
};

Cache make_cache(size_t n, std::mt19937 & rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    Cache c;
    c.n = n;
    c.k.resize(n * kHkv * kD);
    c.v.resize(n * kHkv * kD);
    c.idx.resize(n * 2 * kDi);
    for (auto & x : c.k) x = ops::float_to_half(nd(rng));
    for (auto & x : c.v) x = ops::float_to_half(nd(rng));
    for (auto & x : c.idx) x = ops::float_to_half(nd(rng));
    for (size_t i = 0; i < n; ++i) c.cells.push_back({static_cast<memory::Pos>(i), static_cast<uint32_t>(i)});
    for (size_t p = 0; p + kR <= n; p += kR) {
        c.pools.push_back(static_cast<uint32_t>(p));
        c.reps.push_back(static_cast<uint32_t>(p + kR - 1));
    }
    for (uint32_t rep : c.reps) c.pooled.insert(c.pooled.end(), &c.idx[rep * 2 * kDi + kDi], &c.idx[rep * 2 * kDi + 2 * kDi]);
    return c;
}

// The token at the end of the context: its visible pools and its tail.
memory::TokenPlan last_token(const Cache & c, std::vector<uint32_t> & tail) {
    memory::TokenPlan tp{};
    tp.pos = static_cast<memory::Pos>(c.n - 1);
    tp.n_visible = static_cast<uint32_t>(c.n);
    tp.n_pools = static_cast<uint32_t>(c.pools.size());
    for (size_t j = c.n; j-- > c.pools.size() * kR;) tail.push_back(static_cast<uint32_t>(j));
    tp.tail = tail;
    return tp;
}

void step_pointers(const Cache & c, const memory::TokenPlan & tp, const float * q, const float * qi, float * out) {
    const memory::SeqView view{c.cells, c.pools, c.reps};
    std::vector<const void *> keys(tp.n_pools);
    for (size_t p = 0; p < tp.n_pools; ++p) keys[p] = &c.idx[(view.pools[p] + kR - 1) * 2 * kDi + kDi];
    std::vector<float> scores(tp.n_pools);
    ops::score_pools(qi, kHi, kDi, keys, tensor::ElemType::F16, scores.data());
    std::vector<uint32_t> picked = ops::top_k(scores.data(), scores.size(), kTopK / kR);
    std::sort(picked.begin(), picked.end());
    std::vector<uint32_t> cells;
    model::common::pool_cells(view, tp, kR, picked, true, cells);
    std::vector<const void *> kr(cells.size()), vr(cells.size());
    for (size_t j = 0; j < cells.size(); ++j) {
        kr[j] = &c.k[cells[j] * kHkv * kD];
        vr[j] = &c.v[cells[j] * kHkv * kD];
    }
    const ops::CacheRows K{kr, tensor::ElemType::F16}, V{vr, tensor::ElemType::F16};
    const size_t group = kH / kHkv;
    for (size_t g = 0; g < kHkv; ++g) {
        ops::attend_heads(q + g * group * kD, group, kD, kD, K, V, g * kD, 0.088f, out + g * group * kD, kD);
    }
}

void step_rows(const Cache & c, const memory::TokenPlan & tp, const float * q, const float * qi, float * out,
               std::vector<float> & scores, std::vector<uint32_t> & scratch, std::vector<uint32_t> & picked,
               std::vector<uint32_t> & cells, bool in_order) {
    const memory::SeqView view{c.cells, c.pools, c.reps};
    const auto * idx = reinterpret_cast<const uint8_t *>(c.idx.data());
    const ops::CacheTable pooled{idx + kDi * 2, 2 * kDi * 2, tensor::ElemType::F16};
    const ops::CacheTable keys{reinterpret_cast<const uint8_t *>(c.pooled.data()), kDi * 2, tensor::ElemType::F16};
    scores.resize(tp.n_pools);
    if (in_order) {
        ops::score_pool_rows(qi, 1, kHi * kDi, kHi, kDi, keys, nullptr, tp.n_pools, scores.data(), 0);
    } else {
        ops::score_pool_rows(qi, 1, kHi * kDi, kHi, kDi, pooled, view.reps.data(), tp.n_pools, scores.data(), 0);
    }
    model::common::best_pools(scores.data(), tp.n_pools, kTopK / kR, scratch, picked);
    cells.clear();
    model::common::pool_cells(view, tp, kR, picked, true, cells);
    const size_t group = kH / kHkv, row = kHkv * kD * 2;
    for (size_t g = 0; g < kHkv; ++g) {
        const ops::CacheTable K{reinterpret_cast<const uint8_t *>(c.k.data()) + g * kD * 2, row, tensor::ElemType::F16};
        const ops::CacheTable V{reinterpret_cast<const uint8_t *>(c.v.data()) + g * kD * 2, row, tensor::ElemType::F16};
        ops::attend_rows(q + g * group * kD, group, kD, kD, K, V, cells, 0.088f, out + g * group * kD, kD);
    }
}

// Written between repetitions so that every repetition reads the cache rows from memory, as a decode step
// does (the weights of the other layers pass through the caches in between).
std::vector<uint8_t> g_flush;
bool g_cold = true;

template <typename F>
double best_us(int reps, F && f) {
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
        if (g_cold) {
            for (size_t j = 0; j < g_flush.size(); j += 64) g_flush[j] = static_cast<uint8_t>(g_flush[j] + 1);
        }
        const auto t0 = std::chrono::steady_clock::now();
        f();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return best;
}

}  // namespace

int main(int argc, char ** argv) {
    std::string depths = "4096,16384,65536";
    int64_t reps = 20;
    tools::ArgParser args;
    args.text({"-d", "--depths"}, &depths);
    args.integer({"-n", "--reps"}, &reps, 1, 100000);
    bool warm = false;
    args.flag({"--warm"}, &warm);
    if (!args.parse(std::vector<std::string>(argv + 1, argv + argc))) {
        std::printf("usage: bench_sparse_step [-d 4096,16384,65536] [-n REPS (20)] [--warm]\n");
        return 0;
    }
    g_cold = !warm;
    if (g_cold) g_flush.assign(size_t{256} << 20, 0);
    std::printf("isa %s, one thread, best of %lld, %s, microseconds per QSA layer and decode token\n",
                ops::cpu::isa_name(ops::cpu::active_isa()), static_cast<long long>(reps),
                g_cold ? "cache rows read from memory (256 MiB written between repetitions)" : "warm caches");
    std::printf("| depth | pointers us | rows us | in order us | pointers / rows | rows / in order | in order us per 1k tokens |\n"
                "|---:|---:|---:|---:|---:|---:|---:|\n");
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(kH * kD), qi(kHi * kDi), out_a(kH * kD), out_b(kH * kD), out_c(kH * kD);
    for (auto & x : q) x = nd(rng);
    for (auto & x : qi) x = nd(rng) * 0.1f;
    std::vector<float> scores;
    std::vector<uint32_t> scratch, picked, cells;
    for (const int64_t d : tools::parse_integer_list("--depths", depths, 64, 1 << 22)) {
        const Cache c = make_cache(static_cast<size_t>(d), rng);
        std::vector<uint32_t> tail;
        const memory::TokenPlan tp = last_token(c, tail);
        const double a = best_us(static_cast<int>(reps), [&] { step_pointers(c, tp, q.data(), qi.data(), out_a.data()); });
        const double b = best_us(static_cast<int>(reps), [&] {
            step_rows(c, tp, q.data(), qi.data(), out_b.data(), scores, scratch, picked, cells, false);
        });
        const double o = best_us(static_cast<int>(reps), [&] {
            step_rows(c, tp, q.data(), qi.data(), out_c.data(), scores, scratch, picked, cells, true);
        });
        double diff = 0;
        for (size_t i = 0; i < out_a.size(); ++i) diff = std::max(diff, std::fabs(double(out_a[i]) - out_b[i]));
        const bool same = std::equal(out_b.begin(), out_b.end(), out_c.begin());
        std::printf("| %lld | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |   (max |diff| %.2g; in order %s)\n",
                    static_cast<long long>(d), a, b, o, a / b, b / o, o / (static_cast<double>(d) / 1024.0), diff,
                    same ? "same bits" : "DIFFERS");
    }
    return 0;
}
