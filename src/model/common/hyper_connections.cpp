#include "model/common/hyper_connections.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "common/prefetch.h"
#include "ops/elementwise.h"
#include "ops/matmul_group.h"

namespace offgrid::model::common {

void broadcast_to_streams(const float * x, size_t n, size_t hc, size_t E, float * R) {
    for (size_t t = 0; t < n; ++t) {
        for (size_t h = 0; h < hc; ++h) std::memcpy(R + (t * hc + h) * E, x + t * E, E * sizeof(float));
    }
}

void mean_of_streams(const float * R, size_t n, size_t hc, size_t E, float * out) {
    const float inv_hc = 1.0f / static_cast<float>(hc);
    for (size_t t = 0; t < n; ++t) {
        for (size_t i = 0; i < E; ++i) {
            float sum = 0.0f;
            for (size_t h = 0; h < hc; ++h) sum += R[(t * hc + h) * E + i];
            out[t * E + i] = sum * inv_hc;
        }
    }
}

namespace {

size_t grouped_size(size_t dim, size_t lr) {
    constexpr size_t G = ops::kLowrankGroup;
    return (dim + G - 1) / G * G * lr;
}

// Asks for the cache lines of p[0, count) ahead of their use (a hint: nothing depends on it but the speed).
void prefetch_floats(const float * p, size_t count) {
    for (size_t q = 0; q < count; q += 64 / sizeof(float)) prefetch_read(p + q);
}

}  // namespace

void prepare_gated_hc(GatedHcWeights & w) {
    constexpr size_t G = ops::kLowrankGroup;
    const size_t dim = static_cast<size_t>(w.up.rows), lr = static_cast<size_t>(w.up.cols);
    if (lr > kGroupedUpMaxRank) {
        w.up_grouped.clear();
        return;
    }
    std::vector<float> row(lr);
    w.up_grouped.assign(grouped_size(dim, lr), 0.0f);
    for (size_t o = 0; o < dim; ++o) {
        ops::dequantize_matrix_row(w.up, static_cast<int64_t>(o), row.data());
        for (size_t k = 0; k < lr; ++k) w.up_grouped[(o / G) * lr * G + k * G + o % G] = row[k];
    }
}

void gated_hc_mix(const GatedHcShape & s, const GatedHcWeights & w, const float * R, size_t n, float * mixed,
                  float * inject, ops::ThreadPool * pool, ops::Arena * scratch) {
    const size_t E = s.E, hc = s.hc, dim = hc * E, lr = s.lr;
    const bool grouped = w.up_grouped.size() == grouped_size(dim, lr);
    ops::Arena own;
    ops::Scope scope(scratch ? *scratch : own);
    float * const xnp = scope.take<float>(n * dim).data();
    float * const lop = scope.take<float>(n * lr).data();
    float * const gp = grouped ? nullptr : scope.take<float>(n * dim).data();
    // The per-stream norms and the gated mean below are independent per stream and per element, so they are spread
    // over the pool, each value computed by one thread with the same arithmetic. The norms only with several
    // tokens (for one token the barrier costs about what it saves).
    ops::ThreadPool * const spread = n >= 2 ? pool : nullptr;
    // The gates' weights come from memory at every call (the step's other weights evict them between two
    // mixers): their fetch starts now and runs under the norms and the down projection. For one token this
    // halves the gates' time and saves about a quarter of the mixer's (bench/hc_mix.cpp).
    if (grouped) prefetch_floats(w.up_grouped.data(), w.up_grouped.size());
    ops::parallel_for(spread, n * hc, [&](size_t r0, size_t r1) {
        constexpr size_t kRows = 16;  // rows normed together (ops::rms_norm_rows interleaves their sums)
        const float * gammas[kRows];
        for (size_t r = r0; r < r1; r += kRows) {
            const size_t m = std::min(kRows, r1 - r);
            for (size_t k = 0; k < m; ++k) gammas[k] = w.norm.data() + ((r + k) % hc) * E;
            ops::rms_norm_rows(R + r * E, m, E, s.eps, gammas, xnp + r * E);
        }
    }, 2);
    // The low-rank down projection and the inject logits read the same normed streams: one parallel region.
    const int64_t tokens = static_cast<int64_t>(n);
    const ops::MatmulTask first[2] = {{w.down, xnp, tokens, lop}, {w.inject, xnp, tokens, inject}};
    ops::matmul_group(std::span<const ops::MatmulTask>(first, inject ? 2 : 1), pool);
    const float inv_hc = 1.0f / static_cast<float>(hc);
    for (size_t i = 0; i < n * lr; ++i) lop[i] = ops::silu(lop[i] * inv_hc);  // scaled before the activation
    if (!grouped) ops::matmul(w.up, lop, tokens, gp, pool);
    // Gate logits (g = up lo: with up_grouped, lr products in k order per output, computed block by block right
    // where they are used) and the gated mean over the streams, streams summed in order. Spread from two tokens:
    // one token's gates, their weights prefetched, take ~10 us on the caller; on both threads they were at best a
    // few microseconds shorter and, whenever the worker's core was busy with another process, far longer
    // (bench/hc_mix.cpp, measured on a shared machine).
    constexpr size_t kBlock = 256;  // elements of one token's output per range unit
    const size_t blocks = (E + kBlock - 1) / kBlock;
    const float * const up = w.up_grouped.data();
    ops::parallel_for(spread, n * blocks, [&](size_t b0, size_t b1) {
        float gate[kBlock], sum[kBlock];
        for (size_t b = b0; b < b1; ++b) {
            const size_t t = b / blocks, i0 = (b % blocks) * kBlock, m = std::min(E, i0 + kBlock) - i0;
            const float * x = xnp + t * dim;
            const float * l = lop + t * lr;
            for (size_t i = 0; i < m; ++i) sum[i] = 0.0f;
            for (size_t h = 0; h < hc; ++h) {
                const size_t at = h * E + i0;
                // The vector kernels round every product and sum on its own, as the plain loops do.
                if (grouped) {
                    ops::lowrank_interleaved_n(up, lr, l, at, m, gate);
                } else {
                    for (size_t i = 0; i < m; ++i) gate[i] = gp[t * dim + at + i];
                }
                ops::sigmoid_n(gate, gate, m);  // ops::sigmoid's bits, 16 lanes at a time
                ops::add_prod_n(x + at, gate, sum, m);
            }
            float * out = mixed + t * E + i0;
            for (size_t i = 0; i < m; ++i) out[i] = sum[i] * inv_hc;
        }
    }, 2);
}

size_t gated_hc_mix_bytes(const GatedHcShape & s, size_t n) {
    return 2 * ops::arena_bytes<float>(n * s.hc * s.E) + ops::arena_bytes<float>(n * s.lr);
}

void gated_hc_combine(const GatedHcShape & s, float * R, const float * y, const float * inject, size_t n) {
    const size_t E = s.E, hc = s.hc;
    const float inv_hc = 1.0f / static_cast<float>(hc);
    for (size_t t = 0; t < n; ++t) {
        for (size_t h = 0; h < hc; ++h) {
            const float w = 2.0f * ops::sigmoid(inject[t * hc + h] * inv_hc);
            float * r = R + (t * hc + h) * E;
            const float * yt = y + t * E;
            for (size_t i = 0; i < E; ++i) r[i] += w * yt[i];
        }
    }
}

void sinkhorn(float * L, size_t hc, float eps, unsigned iterations, float * col) {
    // Softmax over the destinations of each source, then + eps.
    for (size_t s = 0; s < hc; ++s) {
        for (size_t d = 0; d < hc; ++d) col[d] = L[d * hc + s];
        ops::softmax(col, hc);
        for (size_t d = 0; d < hc; ++d) L[d * hc + s] = col[d] + eps;
    }
    auto over_sources = [&] {  // each destination's weights sum to 1 (up to eps)
        for (size_t d = 0; d < hc; ++d) {
            float sum = 0.0f;
            for (size_t s = 0; s < hc; ++s) sum += L[d * hc + s];
            const float den = sum + eps;
            for (size_t s = 0; s < hc; ++s) L[d * hc + s] /= den;
        }
    };
    auto over_destinations = [&] {
        for (size_t s = 0; s < hc; ++s) {
            float sum = 0.0f;
            for (size_t d = 0; d < hc; ++d) sum += L[d * hc + s];
            const float den = sum + eps;
            for (size_t d = 0; d < hc; ++d) L[d * hc + s] /= den;
        }
    };
    over_sources();
    for (unsigned it = 1; it < iterations; ++it) {
        over_destinations();
        over_sources();
    }
}

void mhc_pre(const MhcShape & s, const MhcWeights & w, const float * R, size_t n, float * a, float * post,
             float * comb, ops::ThreadPool * pool, ops::Arena * scratch) {
    const size_t E = s.E, hc = s.hc, dim = hc * E, n_mix = (2 + hc) * hc;
    ops::Arena own;
    ops::Scope scope(scratch ? *scratch : own);
    float * const z = scope.take<float>(n * dim).data();
    float * const m = scope.take<float>(n * n_mix).data();
    float * const pre = scope.take<float>(hc).data();
    float * const col = scope.take<float>(hc).data();
    for (size_t t = 0; t < n; ++t) ops::rms_norm(R + t * dim, dim, s.rms_eps, nullptr, z + t * dim);
    ops::matmul(w.fn, z, n, m, pool);
    const float a_pre = w.scale[0], a_post = w.scale[1], a_comb = w.scale[2];
    for (size_t t = 0; t < n; ++t) {
        const float * mt = m + t * n_mix;
        for (size_t h = 0; h < hc; ++h) {
            pre[h] = ops::sigmoid(a_pre * mt[h] + w.base[h]) + s.eps;
            post[t * hc + h] = 2.0f * ops::sigmoid(a_post * mt[hc + h] + w.base[hc + h]);
        }
        float * C = comb + t * hc * hc;
        for (size_t d = 0; d < hc; ++d) {
            for (size_t src = 0; src < hc; ++src) {
                const size_t k = 2 * hc + d + hc * src;  // destination fastest in the file's layout
                C[d * hc + src] = a_comb * mt[k] + w.base[k];
            }
        }
        sinkhorn(C, hc, s.eps, s.sinkhorn_iterations, col);
        const float * X = R + t * dim;
        for (size_t i = 0; i < E; ++i) {
            float sum = 0.0f;
            for (size_t h = 0; h < hc; ++h) sum += pre[h] * X[h * E + i];
            a[t * E + i] = sum;
        }
    }
}

void mhc_post(const MhcShape & s, float * R, const float * y, const float * post, const float * comb, size_t n,
              ops::Arena * scratch) {
    const size_t E = s.E, hc = s.hc, dim = hc * E;
    ops::Arena own;
    ops::Scope scope(scratch ? *scratch : own);
    float * const old = scope.take<float>(dim).data();
    for (size_t t = 0; t < n; ++t) {
        float * X = R + t * dim;
        std::memcpy(old, X, dim * sizeof(float));
        const float * C = comb + t * hc * hc;
        for (size_t d = 0; d < hc; ++d) {
            for (size_t i = 0; i < E; ++i) {
                float v = post[t * hc + d] * y[t * E + i];
                for (size_t src = 0; src < hc; ++src) v += C[d * hc + src] * old[src * E + i];
                X[d * E + i] = v;
            }
        }
    }
}

size_t mhc_bytes(const MhcShape & s, size_t n) {
    const size_t n_mix = (2 + s.hc) * s.hc;
    return ops::arena_bytes<float>(n * s.hc * s.E) + ops::arena_bytes<float>(n * n_mix) + 2 * ops::arena_bytes<float>(s.hc);
}

}  // namespace offgrid::model::common
