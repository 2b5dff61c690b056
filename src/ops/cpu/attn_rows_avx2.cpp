// avx2 primitives of the attn_rows kernels (compiled with the avx2 flags; reached only when active_isa() allows
// it). Dots: two 8-lane accumulators, element i to accumulator (i / 8) % 2 lane i % 8, the last n % 8 elements
// summed in order after a fixed horizontal sum; updates fuse multiply and add (8 elements of a V row at a time).
#include "ops/cpu/attn_rows.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "ops/cpu/attn_rows_impl.h"
#include "ops/cpu/vec.h"
#include "ops/half.h"

#include <cmath>
#include <cstring>
#define OFFGRID_ATTN_AVX2 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_ATTN_AVX2

namespace {

constexpr size_t kW = 8;

struct Avx2 {
    static float dot(const float * a, const float * b, size_t n) {
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        size_t i = 0;
        for (; i + 2 * kW <= n; i += 2 * kW) {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + kW), _mm256_loadu_ps(b + i + kW), acc1);
        }
        if (i + kW <= n) {
            acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
            i += kW;
        }
        const __m256 v = _mm256_add_ps(acc0, acc1);
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        float s = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
        for (; i < n; ++i) s += a[i] * b[i];
        return s;
    }
    static float finish(__m256 acc0, __m256 acc1) {
        const __m256 v = _mm256_add_ps(acc0, acc1);
        const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
    // Four queries at a time when the head is a whole number of 16-element steps: each query's dot keeps dot()'s
    // accumulators and order exactly (interleaved, never merged), and the key is loaded once for the four.
    static void dots(const float * q, size_t q_stride, size_t m, const float * key, size_t dim, float * out) {
        size_t i = 0;
        if (dim % (2 * kW) == 0) {
            for (; i + 4 <= m; i += 4) {
                __m256 a0[4], a1[4];
                for (int r = 0; r < 4; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
                for (size_t e = 0; e < dim; e += 2 * kW) {
                    const __m256 k0 = _mm256_loadu_ps(key + e), k1 = _mm256_loadu_ps(key + e + kW);
                    for (int r = 0; r < 4; ++r) {
                        const float * qr = q + (i + r) * q_stride + e;
                        a0[r] = _mm256_fmadd_ps(_mm256_loadu_ps(qr), k0, a0[r]);
                        a1[r] = _mm256_fmadd_ps(_mm256_loadu_ps(qr + kW), k1, a1[r]);
                    }
                }
                for (int r = 0; r < 4; ++r) out[i + r] = finish(a0[r], a1[r]);
            }
        }
        for (; i < m; ++i) out[i] = dot(q + i * q_stride, key, dim);
    }
    static void dots_pair(const float * q, size_t q_stride, size_t m, const float * k0, const float * k1, size_t dim,
                          float * o0, float * o1) {
        dots(q, q_stride, m, k0, dim, o0);
        dots(q, q_stride, m, k1, dim, o1);
    }
    // exp(s - mx) with libm's bits (the level's vector exp, vec_avx2.cpp), as the scalar twin's std::exp.
    static void exp_shift(float * s, size_t n, float mx) {
        static const auto exp8 = vec_kernels(Isa::Avx2).exp_f32;
        const __m256 m = _mm256_set1_ps(mx);
        size_t j = 0;
        for (; j + kW <= n; j += kW) _mm256_storeu_ps(s + j, _mm256_sub_ps(_mm256_loadu_ps(s + j), m));
        for (; j < n; ++j) s[j] -= mx;
        exp8(s, s, n);
    }
    static void axpy(float a, const float * x, float * y, size_t n) {
        const __m256 av = _mm256_set1_ps(a);
        size_t i = 0;
        for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        for (; i < n; ++i) y[i] += a * x[i];
    }
    template <bool F16>
    static __m256 load_v(const uint8_t * row, size_t d) {
        if constexpr (F16) {
            return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(reinterpret_cast<const uint16_t *>(row) + d)));
        } else {
            return _mm256_loadu_ps(reinterpret_cast<const float *>(row) + d);
        }
    }
    // Each (query, element) is one fused multiply-add chain over the rows in order, whether its query runs in a
    // group of four (each V chunk loaded once for the four) or alone, so the bits never depend on m.
    template <bool F16>
    static void accumulate(const float * w, size_t ws, size_t m, const uint8_t * vb, size_t vs, const uint32_t * cells,
                           size_t nb, float * out, size_t os, size_t dim) {
        size_t i0 = 0;
        for (; i0 + 4 <= m && dim % (2 * kW) == 0; i0 += 4) {
            for (size_t d0 = 0; d0 < dim; d0 += 2 * kW) {
                __m256 acc[4][2];
                for (int i = 0; i < 4; ++i)
                    for (int v = 0; v < 2; ++v) acc[i][v] = _mm256_loadu_ps(out + (i0 + i) * os + d0 + v * kW);
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    const __m256 v0 = load_v<F16>(row, d0), v1 = load_v<F16>(row, d0 + kW);
                    for (int i = 0; i < 4; ++i) {
                        const __m256 wi = _mm256_broadcast_ss(w + (i0 + i) * ws + j);
                        acc[i][0] = _mm256_fmadd_ps(wi, v0, acc[i][0]);
                        acc[i][1] = _mm256_fmadd_ps(wi, v1, acc[i][1]);
                    }
                }
                for (int i = 0; i < 4; ++i)
                    for (int v = 0; v < 2; ++v) _mm256_storeu_ps(out + (i0 + i) * os + d0 + v * kW, acc[i][v]);
            }
        }
        for (size_t i = i0; i < m; ++i) {
            size_t d = 0;
            for (; d + kW <= dim; d += kW) {
                __m256 acc = _mm256_loadu_ps(out + i * os + d);
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    acc = _mm256_fmadd_ps(_mm256_broadcast_ss(w + i * ws + j), load_v<F16>(row, d), acc);
                }
                _mm256_storeu_ps(out + i * os + d, acc);
            }
            for (; d < dim; ++d) {
                float acc = out[i * os + d];
                for (size_t j = 0; j < nb; ++j) {
                    const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
                    const float v = F16 ? half_to_float(reinterpret_cast<const uint16_t *>(row)[d])
                                        : reinterpret_cast<const float *>(row)[d];
                    acc = std::fma(w[i * ws + j], v, acc);
                }
                out[i * os + d] = acc;
            }
        }
    }
    static void scale(float a, float * y, size_t n) {
        const __m256 av = _mm256_set1_ps(a);
        size_t i = 0;
        for (; i + kW <= n; i += kW) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
        for (; i < n; ++i) y[i] *= a;
    }
    static void widen_f16(const uint16_t * x, float * y, size_t n) {
        size_t i = 0;
        for (; i + kW <= n; i += kW) {
            _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
        }
        for (; i < n; ++i) y[i] = half_to_float(x[i]);
    }
    static void prefetch(const uint8_t * p, size_t bytes) {
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char *>(p + o), _MM_HINT_T1);
    }
};

// ---- Scores, one pool per lane (as the avx512 level, attn_rows_avx512.cpp, with 8 lanes) ----
// Lane k runs pool k's dots as the scalar twin does (products rounded, added in index order, no fused
// multiply-add (product); relu'd heads added in order), so every score has the twin's bits. 8 keys are turned element-major
// 8 elements at a time by an 8 x 8 transpose in registers; a one-query decode (up to 4 heads, full groups) uses
// the registers at once, anything else goes through an L1 tile transposed once per group.

constexpr size_t kLanes = 8;
constexpr int kHeadsPass = 4;

// The product as a rounding of its own: GCC contracts a * b + c into an fma even in ISO C++ mode, also for
// intrinsics, and the scores must be the twin's two roundings. An empty asm it cannot see through keeps the
// multiply apart (no instruction; a file-wide fp-contract pragma would also stop std::max inlining here).
inline __m256 product(__m256 a, __m256 b) {
    __m256 p = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(p));
    return p;
}

template <bool F16>
inline __m256 load_chunk(const uint8_t * row, size_t c, size_t len) {
    if (row == nullptr) return _mm256_setzero_ps();
    if constexpr (F16) {
        const uint16_t * x = reinterpret_cast<const uint16_t *>(row) + c;
        if (len == kW) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x)));
        uint16_t buf[kW] = {};
        std::memcpy(buf, x, len * 2);
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(buf)));
    } else {
        const float * x = reinterpret_cast<const float *>(row) + c;
        if (len == kW) return _mm256_loadu_ps(x);
        float buf[kW] = {};
        std::memcpy(buf, x, len * 4);
        return _mm256_loadu_ps(buf);
    }
}

// t[d] lane k = element c + d of key k (missing keys and elements past len are zero).
template <bool F16>
inline void transposed(const uint8_t * const * key, size_t c, size_t len, __m256 (&t)[8]) {
    __m256 r[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) r[k] = load_chunk<F16>(key[k], c, len);
    // Within each 128-bit lane L: u[4 g + j] = element 4 L + j of keys 4 g .. 4 g + 3.
    __m256 u[8];
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {
        const __m256 a = _mm256_unpacklo_ps(r[4 * g], r[4 * g + 1]), b = _mm256_unpackhi_ps(r[4 * g], r[4 * g + 1]);
        const __m256 e = _mm256_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]), f = _mm256_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
        u[4 * g + 0] = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a), _mm256_castps_pd(e)));
        u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a), _mm256_castps_pd(e)));
        u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(b), _mm256_castps_pd(f)));
        u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(b), _mm256_castps_pd(f)));
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        t[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
        t[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
    }
}

template <int HN>
inline __m256 relu_sum(const __m256 (&acc)[HN], __m256 s) {
    for (int h = 0; h < HN; ++h) s = _mm256_add_ps(s, _mm256_max_ps(_mm256_setzero_ps(), acc[h]));
    return s;
}

template <bool F16, int HN>
__m256 pass_keys(const float * qh, size_t dim, const uint8_t * const * key, __m256 s) {
    __m256 acc[HN];
    for (int h = 0; h < HN; ++h) acc[h] = _mm256_setzero_ps();
    for (size_t c = 0; c < dim; c += kW) {
        __m256 t[8];
        transposed<F16>(key, c, kW, t);
#pragma GCC unroll 8
        for (size_t d = 0; d < kW; ++d) {
#pragma GCC unroll 4
            for (int h = 0; h < HN; ++h) acc[h] = _mm256_add_ps(acc[h], product(t[d], _mm256_set1_ps(qh[h * dim + c + d])));
        }
    }
    return relu_sum<HN>(acc, s);
}

// The same from element-major memory: element e of the 8 keys at blk + e * row elements (row 8: this file's f32
// tile; row 16: half of a memory::PoolKeyTable block).
template <bool F16, int HN>
__m256 pass_block(const float * qh, size_t dim, const uint8_t * blk, size_t row, __m256 s) {
    __m256 acc[HN];
    for (int h = 0; h < HN; ++h) acc[h] = _mm256_setzero_ps();
    for (size_t e = 0; e < dim; ++e) {
        __m256 t;
        if constexpr (F16) {
            t = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(reinterpret_cast<const uint16_t *>(blk) + e * row)));
        } else {
            t = _mm256_loadu_ps(reinterpret_cast<const float *>(blk) + e * row);
        }
#pragma GCC unroll 4
        for (int h = 0; h < HN; ++h) acc[h] = _mm256_add_ps(acc[h], product(t, _mm256_set1_ps(qh[h * dim + e])));
    }
    return relu_sum<HN>(acc, s);
}

template <bool F16>
__m256 pass_keys_any(int hn, const float * qh, size_t dim, const uint8_t * const * key, __m256 s) {
    switch (hn) {
        case 1: return pass_keys<F16, 1>(qh, dim, key, s);
        case 2: return pass_keys<F16, 2>(qh, dim, key, s);
        case 3: return pass_keys<F16, 3>(qh, dim, key, s);
        default: return pass_keys<F16, 4>(qh, dim, key, s);
    }
}

template <bool F16>
__m256 pass_block_any(int hn, const float * qh, size_t dim, const uint8_t * blk, size_t row, __m256 s) {
    switch (hn) {
        case 1: return pass_block<F16, 1>(qh, dim, blk, row, s);
        case 2: return pass_block<F16, 2>(qh, dim, blk, row, s);
        case 3: return pass_block<F16, 3>(qh, dim, blk, row, s);
        default: return pass_block<F16, 4>(qh, dim, blk, row, s);
    }
}

inline void store_lanes(__m256 s, size_t nk, float * out) {
    alignas(32) float v[kLanes];
    _mm256_store_ps(v, s);
    std::memcpy(out, v, nk * sizeof(float));
}

// All queries and heads against the 8 element-major keys at blk (element e at + e * row elements); nk lanes stored.
template <bool F16>
inline void score_group(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * blk,
                        size_t row, size_t nk, float * out, size_t out_stride) {
    for (size_t i = 0; i < n_q; ++i) {
        __m256 s = _mm256_setzero_ps();
        for (size_t h0 = 0; h0 < n_heads; h0 += kHeadsPass) {
            const int hn = static_cast<int>(std::min<size_t>(kHeadsPass, n_heads - h0));
            s = pass_block_any<F16>(hn, q + i * q_stride + h0 * dim, dim, blk, row, s);
        }
        store_lanes(s, nk, out + i * out_stride);
    }
}

// Blocks of kScoreBlock (16) keys, as two halves of 8 lanes.
template <bool F16>
void score_blocked(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                   size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    const size_t es = F16 ? 2 : 4, block = kScoreBlock * dim * es;
    for (size_t p = 0; p < n; p += kLanes) {
        const uint8_t * half = base + (p / kScoreBlock) * block + (p % kScoreBlock) * es;
        score_group<F16>(q, n_q, q_stride, n_heads, dim, half, kScoreBlock, std::min(kLanes, n - p), out + p, out_stride);
    }
}

template <bool F16>
void score_lanes(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                 size_t stride, const uint32_t * rows, size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    auto row = [&](size_t p) { return base + (rows ? static_cast<size_t>(rows[p]) : p) * stride; };
    const bool direct = n_q == 1 && n_heads <= static_cast<size_t>(kHeadsPass) && dim % kW == 0;
    alignas(32) float tile[kAttnMaxDim * kLanes];
    for (size_t p = 0; p < n; p += kLanes) {
        const size_t nk = std::min(kLanes, n - p);
        const uint8_t * key[8];
        for (size_t k = 0; k < kLanes; ++k) key[k] = k < nk ? row(p + k) : nullptr;
        if (rows) {
            for (size_t k = p + kLanes; k < std::min(n, p + 2 * kLanes); ++k) Avx2::prefetch(row(k), attn_impl::row_bytes<F16>(dim));
        }
        if (direct) {
            store_lanes(pass_keys_any<F16>(static_cast<int>(n_heads), q, dim, key, _mm256_setzero_ps()), nk, out + p);
            continue;
        }
        for (size_t c = 0; c < dim; c += kW) {
            const size_t len = std::min(kW, dim - c);
            __m256 t[8];
            transposed<F16>(key, c, len, t);
            for (size_t d = 0; d < len; ++d) _mm256_store_ps(tile + (c + d) * kLanes, t[d]);
        }
        score_group<false>(q, n_q, q_stride, n_heads, dim, reinterpret_cast<const uint8_t *>(tile), kLanes, nk, out + p,
                           out_stride);
    }
}

// ---- Attention, queries in register tiles (attn_impl::attend_tiles, as at avx512 with 8 lanes) ----
// Scores of 4 queries by 2 keys (8 accumulators, each K vector converted once per tile, each query vector loaded
// once for both keys), one 8-lane accumulator per (query, key) in element order, a query's 8 accumulators over 8
// keys reduced together into one vector of 8 scores; the weighted V rows by tiles of 6 queries by 16 elements with
// the running sums of `accumulate` (acc = fma(w_ij, v_jd, acc) over the rows in order). Heads whose width is not a
// multiple of 16 take attn_impl::attend.
constexpr int kScoreTileQ = 4;
constexpr int kValueTileQ = 6;

// Lane l: the sum of the 8 lanes of v[l] (pairs added, then the 128-bit halves).
inline __m256 reduce8(const __m256 * v) {
    const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

template <bool F16, int M>
inline void tile_scores(const float * q, size_t qs, const uint8_t * k0, const uint8_t * k1, size_t dim, __m256 * d0,
                        __m256 * d1) {
    __m256 a0[M], a1[M];
    for (int i = 0; i < M; ++i) a0[i] = a1[i] = _mm256_setzero_ps();
    for (size_t e = 0; e < dim; e += kW) {
        const __m256 x0 = Avx2::load_v<F16>(k0, e), x1 = Avx2::load_v<F16>(k1, e);
        for (int i = 0; i < M; ++i) {
            __m256 qv = _mm256_loadu_ps(q + i * qs + e);
            __asm__("" : "+x"(qv));  // one load for both keys
            a0[i] = _mm256_fmadd_ps(qv, x0, a0[i]);
            a1[i] = _mm256_fmadd_ps(qv, x1, a1[i]);
        }
    }
    for (int i = 0; i < M; ++i) {
        d0[i * 8] = a0[i];
        d1[i * 8] = a1[i];
    }
}

template <bool F16, int M>
void tile_scores_keys(const float * q, size_t qs, const uint8_t * kb, size_t ks, const uint32_t * cells, size_t cnt,
                      size_t dim, __m256 * dots) {
    for (size_t j = 0; j < cnt; j += 2) {
        const uint8_t * k0 = kb + static_cast<size_t>(cells[j]) * ks;
        const uint8_t * k1 = j + 1 < cnt ? kb + static_cast<size_t>(cells[j + 1]) * ks : k0;
        tile_scores<F16, M>(q, qs, k0, k1, dim, dots + j, dots + j + 1);  // a lone last key fills slot j + 1 too
    }
}

// out_i[d .. d + 16) += sum over j < nb in order of p[i * kTileKeys + j] V_j for the tile's M queries.
template <bool F16, int M>
inline void tile_values(const float * p, const uint8_t * vb, size_t vs, const uint32_t * cells, size_t nb, float * out,
                        size_t os, size_t d) {
    __m256 a0[M], a1[M];
    for (int i = 0; i < M; ++i) {
        a0[i] = _mm256_loadu_ps(out + i * os + d);
        a1[i] = _mm256_loadu_ps(out + i * os + d + kW);
    }
    for (size_t j = 0; j < nb; ++j) {
        const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
        const __m256 v0 = Avx2::load_v<F16>(row, d), v1 = Avx2::load_v<F16>(row, d + kW);
        for (int i = 0; i < M; ++i) {
            const __m256 w = _mm256_broadcast_ss(p + i * attn_impl::kTileKeys + j);
            a0[i] = _mm256_fmadd_ps(w, v0, a0[i]);
            a1[i] = _mm256_fmadd_ps(w, v1, a1[i]);
        }
    }
    for (int i = 0; i < M; ++i) {
        _mm256_storeu_ps(out + i * os + d, a0[i]);
        _mm256_storeu_ps(out + i * os + d + kW, a1[i]);
    }
}

inline float hmax8(__m256 v) {
    const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    return _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
}

inline float hsum8(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// The tile set of attn_impl::attend_tiles for this level (heads a multiple of 16 wide).
struct Tiles {
    using V = __m256;
    static constexpr size_t kLanes = 8;
    static constexpr size_t kChunk = 16;  // elements of a V tile: two vectors

    template <bool F16>
    static void scores(size_t m, const float * q, size_t qs, const uint8_t * kb, size_t ks, const uint32_t * cells,
                       size_t cnt, size_t dim, __m256 * dots) {
        attn_impl::for_each_tile<kScoreTileQ>(m, [&](auto M, size_t t0) {
            tile_scores_keys<F16, M()>(q + t0 * qs, qs, kb, ks, cells, cnt, dim, dots + t0 * kLanes);
        });
    }
    static __m256 score_vector(const __m256 * dots, size_t cnt, float scale) {
        const __m256 minus_inf = _mm256_set1_ps(-INFINITY);
        if (cnt == 0) return minus_inf;
        __m256 v[8];
        for (size_t k = 0; k < 8; ++k) v[k] = k < cnt ? dots[k] : _mm256_setzero_ps();
        const __m256 live = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(cnt)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
        return _mm256_blendv_ps(minus_inf, _mm256_mul_ps(_mm256_set1_ps(scale), reduce8(v)), live);
    }
    static float block_max(const __m256 * s, size_t n) {
        __m256 mx = s[0];
        for (size_t g = 1; g < n; ++g) mx = _mm256_max_ps(mx, s[g]);
        return hmax8(mx);
    }
    // The level's exp (libm's bits, vec_avx2.cpp) over the block's lanes.
    static float weights(const __m256 * s, size_t n, float mx, float * p) {
        static const auto exp8 = vec_kernels(Isa::Avx2).exp_f32;
        const __m256 vm = _mm256_set1_ps(mx);
        for (size_t g = 0; g < n; ++g) _mm256_storeu_ps(p + kLanes * g, _mm256_sub_ps(s[g], vm));
        exp8(p, p, n * kLanes);
        __m256 total = _mm256_setzero_ps();
        for (size_t g = 0; g < n; ++g) total = _mm256_add_ps(total, _mm256_loadu_ps(p + kLanes * g));
        return hsum8(total);
    }
    template <bool F16>
    static void values(size_t m, const float * p, const uint8_t * vb, size_t vs, const uint32_t * cells, size_t nb,
                       float * out, size_t os, size_t d, size_t /*dim*/) {
        attn_impl::for_each_tile<kValueTileQ>(m, [&](auto M, size_t t0) {
            tile_values<F16, M()>(p + t0 * attn_impl::kTileKeys, vb, vs, cells, nb, out + t0 * os, os, d);
        });
    }
    static void scale(float a, float * y, size_t n) { Avx2::scale(a, y, n); }
    static void prefetch(const uint8_t * p, size_t bytes) { Avx2::prefetch(p, bytes); }
};

template <bool F16>
void attend_level(const float * q, size_t n_q, size_t q_stride, size_t dim, const uint8_t * k_base, size_t k_stride,
                  const uint8_t * v_base, size_t v_stride, const uint32_t * cells, size_t n, float scale, float * out,
                  size_t out_stride) {
    if (dim % Tiles::kChunk != 0) {
        return attn_impl::attend<Avx2, F16>(q, n_q, q_stride, dim, k_base, k_stride, v_base, v_stride, cells, n, scale,
                                            out, out_stride);
    }
    attn_impl::attend_tiles<Tiles, F16>(q, n_q, q_stride, dim, k_base, k_stride, v_base, v_stride, cells, n, scale, out,
                                        out_stride);
}

}  // namespace

void add_attn_row_kernels_avx2(AttnRowKernels & k) {
    attn_impl::fill<Avx2>(k);
    k.attend_f32 = attend_level<false>;
    k.attend_f16 = attend_level<true>;
    k.score_f32 = score_lanes<false>;
    k.score_f16 = score_lanes<true>;
    k.score_blocked_f32 = score_blocked<false>;
    k.score_blocked_f16 = score_blocked<true>;
}

#else

void add_attn_row_kernels_avx2(AttnRowKernels &) {}

#endif

}  // namespace offgrid::ops::cpu
