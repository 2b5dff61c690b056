// The loop structure of the attn_rows kernels (attn_rows.h), shared by every ISA level: each level supplies a
// primitive set P and instantiates these templates with it:
//   dots(q, q_stride, m, key, dim, out)  out[i] = q_i . key for i < m, each with the level's one dot order (the
//                                        same bits whatever m: several dots run interleaved, never merged)
//   dots_pair(q, q_stride, m, k0, k1, dim, o0, o1)  dots(.., k0, .., o0) and dots(.., k1, .., o1), same bits
//   exp_shift(s, n, mx)                  s[j] = exp(s[j] - mx) (the level's exp; the scalar twin's is std::exp)
//   accumulate<F16>(w, w_stride, m, v_base, v_stride, cells, nb, out, out_stride, dim)
//                                        out_i[d] += sum over j < nb in order of w[i * w_stride + j] V_j[d], one
//                                        running sum per (i, d) (the same bits whatever m)
//   scale, widen_f16, prefetch P is a type
// local to its file (anonymous namespace), so every instantiation has internal linkage and the levels never
// mix under the one-definition rule. Include only from attn_rows_*.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "ops/cpu/attn_rows.h"

namespace offgrid::ops::cpu::attn_impl {

// Rows ahead of the one in use whose cache lines are requested (into L2: measured in bench_sparse_step, an L1
// hint or more rows ahead were slower): the rows of a selection are scattered, so the hardware prefetcher
// cannot guess them.
inline constexpr size_t kAhead = 6;

template <class P, bool F16>
inline const float * widened(const uint8_t * row, float * buf, size_t dim) {
    if constexpr (F16) {
        P::widen_f16(reinterpret_cast<const uint16_t *>(row), buf, dim);
        return buf;
    } else {
        (void)buf;
        (void)dim;
        return reinterpret_cast<const float *>(row);
    }
}

template <bool F16>
constexpr size_t row_bytes(size_t dim) {
    return dim * (F16 ? 2 : 4);
}

template <class P, bool F16>
void score(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
           size_t stride, const uint32_t * rows, size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    alignas(64) float buf0[kAttnMaxDim], buf1[kAttnMaxDim];
    const size_t bytes = row_bytes<F16>(dim);
    auto row = [&](size_t p) { return base + (rows ? static_cast<size_t>(rows[p]) : p) * stride; };
    // Two pools at a time: each query head vector is loaded once for both keys (dots_pair); a lone last pool
    // goes through dots. Every (query, pool) value is still one relu-sum of the level's dots.
    size_t p = 0;
    for (; p + 2 <= n; p += 2) {
        if (rows && p + kAhead + 1 < n) {  // keys in order are a stream: the hardware prefetcher follows it
            P::prefetch(row(p + kAhead), bytes);
            P::prefetch(row(p + kAhead + 1), bytes);
        }
        const float * k0 = widened<P, F16>(row(p), buf0, dim);
        const float * k1 = widened<P, F16>(row(p + 1), buf1, dim);
        for (size_t i = 0; i < n_q; ++i) {
            float d0[64], d1[64];
            float s0 = 0.0f, s1 = 0.0f;
            for (size_t h0 = 0; h0 < n_heads; h0 += 64) {
                const size_t hn = std::min<size_t>(64, n_heads - h0);
                P::dots_pair(q + i * q_stride + h0 * dim, dim, hn, k0, k1, dim, d0, d1);
                for (size_t h = 0; h < hn; ++h) s0 += std::max(d0[h], 0.0f);
                for (size_t h = 0; h < hn; ++h) s1 += std::max(d1[h], 0.0f);
            }
            out[i * out_stride + p] = s0;
            out[i * out_stride + p + 1] = s1;
        }
    }
    for (; p < n; ++p) {
        const float * key = widened<P, F16>(row(p), buf0, dim);
        for (size_t i = 0; i < n_q; ++i) {
            float d[64];
            float s = 0.0f;
            for (size_t h0 = 0; h0 < n_heads; h0 += 64) {
                const size_t hn = std::min<size_t>(64, n_heads - h0);
                P::dots(q + i * q_stride + h0 * dim, dim, hn, key, dim, d);
                for (size_t h = 0; h < hn; ++h) s += std::max(d[h], 0.0f);
            }
            out[i * out_stride + p] = s;
        }
    }
}

template <class P, bool F16>
void attend(const float * q, size_t n_q, size_t q_stride, size_t dim, const uint8_t * k_base, size_t k_stride,
            const uint8_t * v_base, size_t v_stride, const uint32_t * cells, size_t n, float scale, float * out,
            size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("attend: head wider than kAttnMaxDim");
    alignas(64) float buf[kAttnMaxDim], buf1[kAttnMaxDim];
    const size_t bytes = row_bytes<F16>(dim);
    for (size_t i0 = 0; i0 < n_q; i0 += kAttnMaxQueries) {
        const size_t m = std::min(kAttnMaxQueries, n_q - i0);
        float mx[kAttnMaxQueries], sum[kAttnMaxQueries];
        float s[kAttnMaxQueries][kAttnBlock], d[kAttnMaxQueries], d1[kAttnMaxQueries];
        for (size_t i = 0; i < m; ++i) {
            mx[i] = -INFINITY;
            sum[i] = 0.0f;
            std::fill(out + (i0 + i) * out_stride, out + (i0 + i) * out_stride + dim, 0.0f);
        }
        for (size_t j0 = 0; j0 < n; j0 += kAttnBlock) {
            const size_t j1 = std::min(n, j0 + kAttnBlock);
            // Scores of the block: each K row widened once for all queries, two rows at a time (each query's
            // vector then loaded once for both: dots_pair, the bits of dots).
            auto ahead = [&](size_t j) {
                if (j + kAhead < n) {
                    P::prefetch(k_base + static_cast<size_t>(cells[j + kAhead]) * k_stride, bytes);
                    P::prefetch(v_base + static_cast<size_t>(cells[j + kAhead]) * v_stride, bytes);
                }
            };
            size_t j = j0;
            for (; j + 2 <= j1; j += 2) {
                ahead(j);
                ahead(j + 1);
                const float * k0 = widened<P, F16>(k_base + static_cast<size_t>(cells[j]) * k_stride, buf, dim);
                const float * k1 = widened<P, F16>(k_base + static_cast<size_t>(cells[j + 1]) * k_stride, buf1, dim);
                P::dots_pair(q + i0 * q_stride, q_stride, m, k0, k1, dim, d, d1);
                for (size_t i = 0; i < m; ++i) {
                    s[i][j - j0] = scale * d[i];
                    s[i][j + 1 - j0] = scale * d1[i];
                }
            }
            if (j < j1) {
                ahead(j);
                const float * key = widened<P, F16>(k_base + static_cast<size_t>(cells[j]) * k_stride, buf, dim);
                P::dots(q + i0 * q_stride, q_stride, m, key, dim, d);
                for (size_t i = 0; i < m; ++i) s[i][j - j0] = scale * d[i];
            }
            // Running maximum, rescale, weights.
            for (size_t i = 0; i < m; ++i) {
                float bm = -INFINITY;
                for (size_t j = j0; j < j1; ++j) bm = std::max(bm, s[i][j - j0]);
                if (bm > mx[i]) {
                    if (sum[i] != 0.0f) {
                        const float f = std::exp(mx[i] - bm);
                        sum[i] *= f;
                        P::scale(f, out + (i0 + i) * out_stride, dim);
                    }
                    mx[i] = bm;
                }
                P::exp_shift(s[i], j1 - j0, mx[i]);
                for (size_t j = j0; j < j1; ++j) sum[i] += s[i][j - j0];
            }
            // Weighted V rows.
            P::template accumulate<F16>(&s[0][0], kAttnBlock, m, v_base, v_stride, cells + j0, j1 - j0,
                                        out + i0 * out_stride, out_stride, dim);
        }
        if (n == 0) continue;
        for (size_t i = 0; i < m; ++i) P::scale(1.0f / sum[i], out + (i0 + i) * out_stride, dim);
    }
}

// attend with the queries in register tiles (the avx2 and avx512 levels): per block of kTileKeys keys, every
// query's scores as vectors of T::kLanes keys, the online softmax on those vectors, then the weighted V rows. The
// tile set T (a type local to the level's file) supplies, for vectors T::V of T::kLanes floats:
//   scores(m, q, qs, kb, ks, cells, cnt, dim, dots)  dots[i * kLanes + j]: query i's accumulator against key j of
//                                      a group of cnt <= kLanes keys (queries in register tiles)
//   score_vector(dots_i, cnt, scale)   query i's kLanes scores (scale times the reduced accumulators; lanes from
//                                      cnt on at -inf)
//   block_max(s, n)                    the largest lane of n vectors
//   weights(s, n, mx, p)               p[j] = exp(s_j - mx) over the n vectors' lanes; returns their sum
//   values(m, p, vb, vs, cells, nb, out, os, d, dim)  out_i[d .. d + kChunk) += sum over j < nb in order of
//                                      p[i * kTileKeys + j] V_j (one fused multiply-add chain per (i, d))
//   scale(f, y, n), prefetch(p, bytes)
// Each query's arithmetic is the same whatever tile or call it is in, so the bits never depend on n_q.
inline constexpr size_t kTileKeys = 32;

// f(std::integral_constant<int, M>{}) for M = min(m, Max), m >= 1: a level's tile of M queries is a template, and
// this picks the instantiation for a call's count.
template <int Max, int M = 1, class F>
inline void with_tile_size(size_t m, F && f) {
    if constexpr (M == Max) {
        f(std::integral_constant<int, M>{});
    } else if (m == static_cast<size_t>(M)) {
        f(std::integral_constant<int, M>{});
    } else {
        with_tile_size<Max, M + 1>(m, f);
    }
}

// Queries [0, m) in tiles of Max and a last one of the rest: f(std::integral_constant<int, M>{}, first query) for
// each, M its size.
template <int Max, class F>
inline void for_each_tile(size_t m, F && f) {
    for (size_t t0 = 0; t0 < m; t0 += Max) with_tile_size<Max>(m - t0, [&](auto M) { f(M, t0); });
}

template <class T, bool F16>
void attend_tiles(const float * q, size_t n_q, size_t q_stride, size_t dim, const uint8_t * k_base, size_t k_stride,
                  const uint8_t * v_base, size_t v_stride, const uint32_t * cells, size_t n, float scale, float * out,
                  size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("attend: head wider than kAttnMaxDim");
    using V = typename T::V;
    constexpr size_t kQ = kAttnMaxQueries, kL = T::kLanes, kGroups = kTileKeys / T::kLanes;
    const size_t bytes = row_bytes<F16>(dim);
    V dots[kQ * kL];
    alignas(64) float p[kQ * kTileKeys];  // query i's weight of key j of the block at [i * kTileKeys + j]
    for (size_t i0 = 0; i0 < n_q; i0 += kQ) {
        const size_t m = std::min(kQ, n_q - i0);
        const float * qc = q + i0 * q_stride;
        float * oc = out + i0 * out_stride;
        float mx[kQ], sum[kQ];
        for (size_t i = 0; i < m; ++i) {
            mx[i] = -INFINITY;
            sum[i] = 0.0f;
            std::fill(oc + i * out_stride, oc + i * out_stride + dim, 0.0f);
        }
        for (size_t j0 = 0; j0 < n; j0 += kTileKeys) {
            const size_t nb = std::min(kTileKeys, n - j0);
            // The next block's rows, into L2 (scattered rows: the hardware prefetcher cannot guess them).
            for (size_t j = j0 + kTileKeys; j < std::min(n, j0 + 2 * kTileKeys); ++j) {
                T::prefetch(k_base + static_cast<size_t>(cells[j]) * k_stride, bytes);
                T::prefetch(v_base + static_cast<size_t>(cells[j]) * v_stride, bytes);
            }
            V sc[kQ][kGroups];  // query i's scores, kL keys a vector
            for (size_t g = 0; g < kGroups; ++g) {
                const size_t first = kL * g, cnt = nb > first ? std::min(kL, nb - first) : 0;
                if (cnt > 0) T::template scores<F16>(m, qc, q_stride, k_base, k_stride, cells + j0 + first, cnt, dim, dots);
                for (size_t i = 0; i < m; ++i) sc[i][g] = T::score_vector(dots + i * kL, cnt, scale);
            }
            // The online softmax, a query at a time: block maximum, rescale, weights.
            for (size_t i = 0; i < m; ++i) {
                const float bm = T::block_max(sc[i], kGroups);
                if (bm > mx[i]) {
                    if (sum[i] != 0.0f) {
                        const float f = std::exp(mx[i] - bm);
                        sum[i] *= f;
                        T::scale(f, oc + i * out_stride, dim);
                    }
                    mx[i] = bm;
                }
                sum[i] += T::weights(sc[i], kGroups, mx[i], p + i * kTileKeys);
            }
            for (size_t d = 0; d < dim; d += T::kChunk) {
                T::template values<F16>(m, p, v_base, v_stride, cells + j0, nb, oc, out_stride, d, dim);
            }
        }
        if (n == 0) continue;
        for (size_t i = 0; i < m; ++i) T::scale(1.0f / sum[i], oc + i * out_stride, dim);
    }
}

template <class P>
void fill(AttnRowKernels & k) {
    k.score_f32 = score<P, false>;
    k.score_f16 = score<P, true>;
    k.attend_f32 = attend<P, false>;
    k.attend_f16 = attend<P, true>;
}

}  // namespace offgrid::ops::cpu::attn_impl
