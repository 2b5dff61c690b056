// One token's gated hyper-connection mixers (common::gated_hc_mix) on the `bench` shape (E 1024, hc 4, lr 8,
// F32 weights), 17 of them as in one decode step, each with its own weights and the caches flushed before every
// call (a decode step's weight stream evicts the mixers' weights between two mixers; the residual is hot, as the
// combine before leaves it). The variants take turns on every mixer in one process, so their ratios hold on a
// busy machine; they are built from the library's parts and give the same bits (checked):
//   "k-major, caller": `up` transposed to lr x dim, the gates as mul_n + add_mul_n over blocks of
//                      256 outputs, on the caller alone for one token;
//   "grouped": `up` in groups of 16 outputs (ops::lowrank_interleaved_n); "pool": one token's gates over the
//   pool in blocks of 128; "norms spread": the 4 stream norms over the pool; "early prefetch": all of `up`
//   prefetched before the norms; "block prefetch": each gate block prefetches its weights first;
//   "gated_hc_mix": the library function itself.
// Prints microseconds per token (17 mixers): the median and best of the rounds' totals, the sum of each mixer's
// fastest call (what an undisturbed step would see), and the ratios to the first variant.
//   bench_hc_mix [-r ROUNDS] [-t THREADS] [--warm]   (--warm: no flush, the weights stay in the caches)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_clock.h"
#include "common/prefetch.h"
#include "memory/huge_pages.h"
#include "model/common/hyper_connections.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/thread_pool.h"

namespace {

using namespace offgrid;
using model::common::GatedHcShape;
using model::common::GatedHcWeights;

constexpr size_t kE = 1024, kHc = 4, kLr = 8, kDim = kHc * kE, kMixers = 17;

struct Mixer {
    std::vector<float> norm, up, up_t;
    float * down = nullptr;    // in the huge-page arena, as a model file's matrices are (WeightLoad::Auto)
    float * inject = nullptr;
    GatedHcWeights w;
};

using HugeFloats = std::vector<float, memory::HugePageAllocator<float>>;

void make(Mixer & m, float * arena, std::mt19937 & rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](std::vector<float> & v, size_t n, float s) {
        v.resize(n);
        for (float & x : v) x = s * nd(rng);
    };
    fill(m.norm, kDim, 1.0f);
    fill(m.up, kDim * kLr, 1.0f);
    m.down = arena;
    m.inject = arena + kLr * kDim;
    for (size_t i = 0; i < (kLr + kHc) * kDim; ++i) arena[i] = 0.05f * nd(rng);
    m.w.norm = m.norm;
    m.w.down = ops::make_matrix(tensor::ElemType::F32, m.down, kDim, kLr);
    m.w.up = ops::make_matrix(tensor::ElemType::F32, m.up.data(), kLr, kDim);
    m.w.inject = ops::make_matrix(tensor::ElemType::F32, m.inject, kDim, kHc);
    model::common::prepare_gated_hc(m.w);
    m.up_t.resize(kLr * kDim);
    for (size_t o = 0; o < kDim; ++o)
        for (size_t k = 0; k < kLr; ++k) m.up_t[k * kDim + o] = m.up[o * kLr + k];
}

struct Variant {
    const char * name;
    bool grouped;        // `up` in groups of 16 outputs (else k-major, up_t)
    bool spread_gates;   // the gates over the pool, blocks of 128 (else on the caller, blocks of 256)
    bool spread_norms;   // the 4 stream norms over the pool (2 rows per part)
    bool block_prefetch; // each gate block prefetches its weights before it starts
    bool early_prefetch; // each part of the norms prefetches its streams' gate weights first (the caller: all)
    bool library;        // common::gated_hc_mix itself (the other fields describe it)
};

// One token through a mixer built from the library's parts as the variant says.
void mix_one(const Variant & v, const GatedHcShape & s, const Mixer & m, const float * R, float * mixed,
             float * inject, ops::ThreadPool * pool) {
    static std::vector<float> xn(kDim), lo(kLr);
    float * const xnp = xn.data();
    ops::parallel_for(v.spread_norms ? pool : nullptr, kHc, [&](size_t r0, size_t r1) {
        if (v.early_prefetch) {
            const float * p = m.w.up_grouped.data() + r0 * kE * kLr;
            for (size_t q = 0; q < (r1 - r0) * kE * kLr; q += 16) offgrid::prefetch_read(p + q);
        }
        const float * gammas[kHc];
        for (size_t h = r0; h < r1; ++h) gammas[h - r0] = m.norm.data() + h * kE;
        ops::rms_norm_rows(R + r0 * kE, r1 - r0, kE, s.eps, gammas, xnp + r0 * kE);
    }, 2);
    const ops::MatmulTask first[2] = {{m.w.down, xnp, 1, lo.data()}, {m.w.inject, xnp, 1, inject}};
    ops::matmul_group(std::span<const ops::MatmulTask>(first, 2), pool);
    const float inv_hc = 1.0f / static_cast<float>(kHc);
    for (float & x : lo) x = ops::silu(x * inv_hc);
    const size_t block = v.spread_gates ? 128 : 256, blocks = kE / block;
    ops::parallel_for(v.spread_gates ? pool : nullptr, blocks, [&](size_t b0, size_t b1) {
        float gate[256], sum[256];
        for (size_t b = b0; b < b1; ++b) {
            const size_t i0 = b * block;
            if (v.block_prefetch) {
                for (size_t h = 0; h < kHc; ++h) {
                    const float * p = v.grouped ? m.w.up_grouped.data() + (h * kE + i0) * kLr : nullptr;
                    for (size_t q = 0; v.grouped && q < block * kLr; q += 16) offgrid::prefetch_read(p + q);
                    for (size_t k = 0; !v.grouped && k < kLr; ++k)
                        for (size_t q = 0; q < block; q += 16) offgrid::prefetch_read(m.up_t.data() + k * kDim + h * kE + i0 + q);
                }
            }
            std::fill(sum, sum + block, 0.0f);
            for (size_t h = 0; h < kHc; ++h) {
                const size_t at = h * kE + i0;
                if (v.grouped) {
                    ops::lowrank_interleaved_n(m.w.up_grouped.data(), kLr, lo.data(), at, block, gate);
                } else {
                    ops::mul_n(lo[0], m.up_t.data() + at, gate, block);
                    for (size_t k = 1; k < kLr; ++k) ops::add_mul_n(lo[k], m.up_t.data() + k * kDim + at, gate, block);
                }
                ops::sigmoid_n(gate, gate, block);
                ops::add_prod_n(xnp + at, gate, sum, block);
            }
            for (size_t i = 0; i < block; ++i) mixed[i0 + i] = sum[i] * inv_hc;
        }
    });
}

}  // namespace

int main(int argc, char ** argv) {
    int rounds = 20, threads = 2;
    bool warm = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--warm") warm = true;
        else if (a == "-r" && i + 1 < argc) rounds = std::atoi(argv[++i]);
        else if (a == "-t" && i + 1 < argc) threads = std::atoi(argv[++i]);
    }
    ops::ThreadPool pool(threads);
    std::mt19937 rng(7);
    std::vector<Mixer> mixers(kMixers);
    HugeFloats arena(kMixers * (kLr + kHc) * kDim);
    for (size_t i = 0; i < kMixers; ++i) make(mixers[i], arena.data() + i * (kLr + kHc) * kDim, rng);
    const GatedHcShape shape{kE, kHc, kLr, 1e-6f};
    std::vector<float> R(kDim);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (float & x : R) x = nd(rng);
    const std::vector<float> R_src = R;
    // 64 MiB read by both threads between two calls: the mixers' weights (about 5 MiB in all) leave the caches,
    // and the pool's worker is as awake as it is between a decode step's jobs.
    HugeFloats flush(16u << 20, 1.0f);  // in 2 MiB pages, as the weight stream is: it evicts lines, not the TLB
    std::vector<double> flush_sums(64);
    auto evict = [&] {
        pool.parallel_for(64, [&](size_t b0, size_t b1) {
            for (size_t b = b0; b < b1; ++b) {
                const size_t n = flush.size() / 64;
                double s = 0;
                for (size_t i = b * n; i < (b + 1) * n; i += 16) s += flush[i];
                flush_sums[b] = s;
            }
        });
    };
    const Variant variants[] = {
        // name                               grouped pool   norms  block  early  library
        {"k-major, caller",                   false,  false, false, false, false, false},
        {"grouped, caller",                   true,   false, false, false, false, false},
        {"grouped, pool",                     true,   true,  false, false, false, false},
        {"grouped, pool, norms spread",       true,   true,  true,  false, false, false},
        {"grouped, caller, early prefetch",   true,   false, false, false, true,  false},
        {"grouped, pool, early prefetch",     true,   true,  false, false, true,  false},
        {"grouped, pool, both prefetches",    true,   true,  false, true,  true,  false},
        {"gated_hc_mix (caller, early)",      true,   false, false, false, true,  true},
    };
    constexpr int kVariants = static_cast<int>(sizeof(variants) / sizeof(variants[0]));
    std::vector<float> out[kVariants], inj[kVariants];
    for (int v = 0; v < kVariants; ++v) {
        out[v].assign(kMixers * kE, 0.0f);
        inj[v].assign(kMixers * kHc, 0.0f);
    }
    auto run = [&](int v, size_t i) {
        float * o = out[v].data() + i * kE;
        float * j = inj[v].data() + i * kHc;
        if (variants[v].library) model::common::gated_hc_mix(shape, mixers[i].w, R.data(), 1, o, j, &pool);
        else mix_one(variants[v], shape, mixers[i], R.data(), o, j, &pool);
    };
    // Per round and variant: the 17 mixers' time. The variants take turns on every mixer (in a rotating order),
    // so a slow phase of the machine hits them alike; the ratios are taken per round, then their median.
    std::vector<std::vector<double>> us(kVariants, std::vector<double>(rounds, 0.0));
    // And each mixer's fastest call: the sum of those is the time of a step that no other process disturbed.
    std::vector<std::vector<double>> fastest(kVariants, std::vector<double>(kMixers, 1e30));
    for (int r = 0; r < rounds; ++r) {
        for (size_t i = 0; i < kMixers; ++i) {
            for (int step = 0; step < kVariants; ++step) {
                const int v = (r + static_cast<int>(i) + step) % kVariants;
                if (!warm) evict();
                std::memcpy(R.data(), R_src.data(), R.size() * sizeof(float));  // hot, as the combine before leaves it
                const double t0 = bench::now_seconds(threads == 1);
                run(v, i);
                const double dt = (bench::now_seconds(threads == 1) - t0) * 1e6;
                us[v][r] += dt;
                fastest[v][i] = std::min(fastest[v][i], dt);
            }
        }
    }
    for (int v = 1; v < kVariants; ++v) {
        if (out[v] != out[0] || inj[v] != inj[0]) {
            std::printf("variant \"%s\" differs from \"%s\"\n", variants[v].name, variants[0].name);
            return 1;
        }
    }
    std::printf("one token, %zu mixers (E %zu, hc %zu, lr %zu, F32), %s, %d threads, %d rounds; us per token "
                "(17 mixers)\n", kMixers, kE, kHc, kLr, warm ? "warm caches" : "caches flushed before each call",
                threads, rounds);
    auto median = [](std::vector<double> x) {
        std::sort(x.begin(), x.end());
        return x[x.size() / 2];
    };
    auto total = [](const std::vector<double> & x) {
        double t = 0.0;
        for (double d : x) t += d;
        return t;
    };
    std::printf("  %-30s %8s %8s %8s %14s\n", "variant", "median", "best", "fastest", "ratio: median");
    for (int v = 0; v < kVariants; ++v) {
        std::vector<double> ratio(rounds);
        for (int r = 0; r < rounds; ++r) ratio[r] = us[v][r] / us[0][r];
        std::printf("  %-30s %8.1f %8.1f %8.1f %8.3f %7.3f\n", variants[v].name, median(us[v]),
                    *std::min_element(us[v].begin(), us[v].end()), total(fastest[v]), median(ratio),
                    total(fastest[v]) / total(fastest[0]));
    }
    std::printf("(median and best of the rounds' totals; fastest: the sum of each mixer's fastest call; ratios to "
                "the first variant: the median of the rounds' ratios, and of the fastest sums)\n");
    std::printf("(the outputs of all variants are bit-identical)\n");
    return 0;
}
