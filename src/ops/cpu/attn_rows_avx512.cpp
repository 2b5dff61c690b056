// avx512 kernels of attn_rows (compiled with the avx512 flags; reached only when active_isa() allows it): scores
// with one pool per lane, and attend over register tiles of queries (attn_impl::attend_tiles). Every entry of the
// set is this level's own, so none of attn_rows_impl.h's generic loops is instantiated here.
#include "ops/cpu/attn_rows.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// GCC 12's AVX-512 headers build results on _mm512_undefined_*(), which -Wall reports as uninitialised once
// inlined (a false positive of the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/cpu/hsum_avx512.h"
#include "ops/cpu/transpose_avx512.h"

#include "ops/cpu/attn_rows_impl.h"
#define OFFGRID_ATTN_AVX512 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_ATTN_AVX512

namespace {

constexpr size_t kW = 16;

inline __mmask16 mask(size_t c) { return static_cast<__mmask16>((1u << c) - 1); }

using avx512::hsum;  // ops/cpu/hsum_avx512.h

// The vector pieces the score and attend kernels below share.
struct Avx512 {
    // exp(x) = 2^n * e^r, n = round(x log2 e), r = x - n ln 2 (two-part ln 2), e^r by its Taylor series to r^7
    // (|r| <= 0.35: truncation below 1e-8 relative), 2^n applied by scalef (under- and overflow as the
    // hardware's). x below -200 is taken as -200 (e^-200 is 0 in float); NaN stays NaN.
    static __m512 exp(__m512 x) {
        x = _mm512_max_ps(_mm512_set1_ps(-200.0f), x);
        const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
        __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
        return _mm512_scalef_ps(p, n);
    }
    template <bool F16>
    static __m512 load_row(const uint8_t * row, size_t d) {
        if constexpr (F16) {
            return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row) + d / kW));
        } else {
            return _mm512_loadu_ps(reinterpret_cast<const float *>(row) + d);
        }
    }
    template <bool F16>
    static __m512 load_row_tail(const uint8_t * row, size_t d, __mmask16 k) {
        if constexpr (F16) {
            return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, reinterpret_cast<const uint16_t *>(row) + d));
        } else {
            return _mm512_maskz_loadu_ps(k, reinterpret_cast<const float *>(row) + d);
        }
    }
    static void scale(float a, float * y, size_t n) {
        const __m512 av = _mm512_set1_ps(a);
        size_t i = 0;
        for (; i + kW <= n; i += kW) _mm512_storeu_ps(y + i, _mm512_mul_ps(av, _mm512_loadu_ps(y + i)));
        if (i < n) {
            const __mmask16 k = mask(n - i);
            _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(k, y + i)));
        }
    }
    static void prefetch(const uint8_t * p, size_t bytes) {
        for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char *>(p + o), _MM_HINT_T1);
    }
};

// ---- Scores, one pool per lane ----
// Lane k of a register runs pool k's dots exactly as the scalar twin does: each product rounded, added in index
// order from 0 (no fused multiply-add: see product), each head's dot relu'd and the
// heads added in order. So every score has the twin's bits, whatever the ISA level. The 16 keys of a group are
// turned element-major (element e of the 16 keys in one register) 16 elements at a time by a 16 x 16 transpose
// in registers; a query element is a broadcast. A one-query decode (up to 8 heads, full groups) uses the
// transposed registers at once; anything else transposes a group once into an L1 tile that every pass reads.

constexpr size_t kLanes = 16;     // pools per group
constexpr int kHeadsPass = 8;     // query heads whose accumulators a pass keeps in registers
// Keys in order: the group this many keys ahead is requested into L2. A group reads 32 B of each of its 16 keys
// per step, not a plain stream; bench_scan (one thread, from memory): 8 KiB ahead into L2 about 10.5 GB/s,
// none 4-10, 16 KiB ahead 6-10, into L1 8.
constexpr size_t kPrefetchKeys = 32;

// The product as a rounding of its own: GCC contracts a * b + c into an fma even in ISO C++ mode, also for
// intrinsics, and the scores must be the twin's two roundings. An empty asm it cannot see through keeps the
// multiply apart (no instruction; a file-wide fp-contract pragma would also stop std::max inlining here).
inline __m512 product(__m512 a, __m512 b) {
    __m512 p = _mm512_mul_ps(a, b);
    __asm__("" : "+v"(p));
    return p;
}

template <bool F16>
inline __m512 load_chunk(const uint8_t * row, size_t c, size_t len) {
    if (row == nullptr) return _mm512_setzero_ps();
    if (len == kW) return Avx512::load_row<F16>(row, c);
    return Avx512::load_row_tail<F16>(row, c, mask(len));
}

// t[d] lane k = element c + d of key k. FULL: 16 keys and 16 elements from c; else missing keys (null) and
// elements past len read as zero.
template <bool F16, bool FULL>
inline void transposed(const uint8_t * const * key, size_t c, size_t len, __m512 (&t)[16]) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) r[k] = FULL ? Avx512::load_row<F16>(key[k], c) : load_chunk<F16>(key[k], c, len);
    avx512::transpose16(r, t);
}

template <int HN>
inline __m512 relu_sum(const __m512 (&acc)[HN], __m512 s) {
    for (int h = 0; h < HN; ++h) s = _mm512_add_ps(s, _mm512_max_ps(_mm512_setzero_ps(), acc[h]));
    return s;
}

// HN heads of one query (head h at qh + h * dim) against 16 full keys, straight from the transposed registers.
template <bool F16, int HN>
__m512 pass_keys(const float * qh, size_t dim, const uint8_t * const * key, __m512 s) {
    __m512 acc[HN];
    for (int h = 0; h < HN; ++h) acc[h] = _mm512_setzero_ps();
    for (size_t c = 0; c < dim; c += kW) {
        __m512 t[16];
        transposed<F16, true>(key, c, kW, t);
#pragma GCC unroll 16
        for (size_t d = 0; d < kW; ++d) {
#pragma GCC unroll 8
            for (int h = 0; h < HN; ++h) acc[h] = _mm512_add_ps(acc[h], product(t[d], _mm512_set1_ps(qh[h * dim + c + d])));
        }
    }
    return relu_sum<HN>(acc, s);
}

// The same from element-major memory: element e of the 16 keys at blk + e * 16 elements (an f32 tile of this
// file, or a block of memory::PoolKeyTable).
template <bool F16>
inline __m512 load_lanes(const uint8_t * blk, size_t e) {
    if constexpr (F16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk) + e));
    } else {
        return _mm512_loadu_ps(reinterpret_cast<const float *>(blk) + e * kLanes);
    }
}

template <bool F16, int HN>
__m512 pass_block(const float * qh, size_t dim, const uint8_t * blk, __m512 s) {
    __m512 acc[HN];
    for (int h = 0; h < HN; ++h) acc[h] = _mm512_setzero_ps();
    for (size_t e = 0; e < dim; ++e) {
        const __m512 t = load_lanes<F16>(blk, e);
#pragma GCC unroll 8
        for (int h = 0; h < HN; ++h) acc[h] = _mm512_add_ps(acc[h], product(t, _mm512_set1_ps(qh[h * dim + e])));
    }
    return relu_sum<HN>(acc, s);
}

template <bool F16>
__m512 pass_keys_any(int hn, const float * qh, size_t dim, const uint8_t * const * key, __m512 s) {
    switch (hn) {
        case 1: return pass_keys<F16, 1>(qh, dim, key, s);
        case 2: return pass_keys<F16, 2>(qh, dim, key, s);
        case 3: return pass_keys<F16, 3>(qh, dim, key, s);
        case 4: return pass_keys<F16, 4>(qh, dim, key, s);
        case 5: return pass_keys<F16, 5>(qh, dim, key, s);
        case 6: return pass_keys<F16, 6>(qh, dim, key, s);
        case 7: return pass_keys<F16, 7>(qh, dim, key, s);
        default: return pass_keys<F16, 8>(qh, dim, key, s);
    }
}

template <bool F16>
__m512 pass_block_any(int hn, const float * qh, size_t dim, const uint8_t * blk, __m512 s) {
    switch (hn) {
        case 1: return pass_block<F16, 1>(qh, dim, blk, s);
        case 2: return pass_block<F16, 2>(qh, dim, blk, s);
        case 3: return pass_block<F16, 3>(qh, dim, blk, s);
        case 4: return pass_block<F16, 4>(qh, dim, blk, s);
        case 5: return pass_block<F16, 5>(qh, dim, blk, s);
        case 6: return pass_block<F16, 6>(qh, dim, blk, s);
        case 7: return pass_block<F16, 7>(qh, dim, blk, s);
        default: return pass_block<F16, 8>(qh, dim, blk, s);
    }
}

// All queries and heads against the 16 element-major keys at blk; the first nk lanes stored.
template <bool F16>
inline void score_group(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * blk,
                        size_t nk, float * out, size_t out_stride) {
    for (size_t i = 0; i < n_q; ++i) {
        __m512 s = _mm512_setzero_ps();
        for (size_t h0 = 0; h0 < n_heads; h0 += kHeadsPass) {
            const int hn = static_cast<int>(std::min<size_t>(kHeadsPass, n_heads - h0));
            s = pass_block_any<F16>(hn, q + i * q_stride + h0 * dim, dim, blk, s);
        }
        _mm512_mask_storeu_ps(out + i * out_stride, mask(nk), s);
    }
}

template <bool F16>
void score_blocked(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                   size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    const size_t block = kLanes * dim * (F16 ? 2 : 4);
    for (size_t p = 0; p < n; p += kLanes) {
        score_group<F16>(q, n_q, q_stride, n_heads, dim, base + (p / kLanes) * block, std::min(kLanes, n - p), out + p,
                         out_stride);
    }
}

template <bool F16>
void score_lanes(const float * q, size_t n_q, size_t q_stride, size_t n_heads, size_t dim, const uint8_t * base,
                 size_t stride, const uint32_t * rows, size_t n, float * out, size_t out_stride) {
    if (dim > kAttnMaxDim) throw std::invalid_argument("score: indexer head wider than kAttnMaxDim");
    auto row = [&](size_t p) { return base + (rows ? static_cast<size_t>(rows[p]) : p) * stride; };
    const bool direct = n_q == 1 && n_heads <= static_cast<size_t>(kHeadsPass) && dim % kW == 0;
    alignas(64) float tile[kAttnMaxDim * kLanes];
    for (size_t p = 0; p < n; p += kLanes) {
        const size_t nk = std::min(kLanes, n - p);
        const uint8_t * key[16];
        for (size_t k = 0; k < kLanes; ++k) key[k] = k < nk ? row(p + k) : nullptr;
        if (rows) {  // scattered rows: request the next group's (keys in order are a stream the hardware follows)
            for (size_t k = p + kLanes; k < std::min(n, p + 2 * kLanes); ++k) Avx512::prefetch(row(k), attn_impl::row_bytes<F16>(dim));
        }
        if (!rows && p + kPrefetchKeys + kLanes <= n) {
            const uint8_t * ahead = row(p + kPrefetchKeys);
            for (size_t o = 0; o < kLanes * stride; o += 64) _mm_prefetch(reinterpret_cast<const char *>(ahead + o), _MM_HINT_T1);
        }
        if (direct && nk == kLanes) {
            _mm512_storeu_ps(out + p, pass_keys_any<F16>(static_cast<int>(n_heads), q, dim, key, _mm512_setzero_ps()));
            continue;
        }
        for (size_t c = 0; c < dim; c += kW) {
            const size_t len = std::min(kW, dim - c);
            __m512 t[16];
            if (nk == kLanes && len == kW) {
                transposed<F16, true>(key, c, len, t);
            } else {
                transposed<F16, false>(key, c, len, t);
            }
            for (size_t d = 0; d < len; ++d) _mm512_store_ps(tile + (c + d) * kLanes, t[d]);
        }
        score_group<false>(q, n_q, q_stride, n_heads, dim, reinterpret_cast<const uint8_t *>(tile), nk, out + p, out_stride);
    }
}

// ---- Attention, queries in register tiles ----
// attend() for this level is attn_impl::attend_tiles over the tile set below. The loop of attn_impl::attend spent
// most of its time outside its multiply-adds (a horizontal sum per query and key, each K row widened into a buffer
// and read back, each V row widened once per four queries, the softmax in scalar steps). Here a tile of queries
// shares every vector of a row in registers:
//  - scores: kScoreTileQ queries against four keys at a time (24 accumulators, each K vector converted once per
//    tile, each query vector loaded once for the four), one 16-lane accumulator per (query, key), element e in
//    lane e % 16, added in element order; the 16 accumulators of a query over 16 keys reduce together to one
//    vector of 16 scores (reduce16);
//  - the weighted V rows: kTileQ queries by 32 elements (24 accumulators), each V vector converted once per tile,
//    acc = fma(w_ij, v_jd, acc) over j in order for each (i, d), as attn_impl::attend does.
constexpr int kTileQ = 12;      // queries of a weighted-V tile (12 x 32 elements)
constexpr int kScoreTileQ = 6;  // queries of a score tile (6 x 4 keys)

// Slot s of a 16-key group holds key kSlotKey[s]: reduce16's lanes then come out in key order.
constexpr int kSlotKey[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

// Lane l of the result: the sum of the 16 lanes of v[kSlotKey^-1(l)], in a fixed tree (halves of 128-bit lanes,
// then pairs) that never mixes two inputs' lanes.
inline __m512 reduce16(const __m512 * v) {
    __m512 w[8], u[4], r[2];
    for (int k = 0; k < 8; ++k) {
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    }
    for (int k = 0; k < 4; ++k) {
        u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    }
    // 128-bit lane L of u[k]: the four partial sums of slot 4k + L.
    for (int k = 0; k < 2; ++k) {
        r[k] = _mm512_add_ps(_mm512_unpacklo_ps(u[2 * k], u[2 * k + 1]), _mm512_unpackhi_ps(u[2 * k], u[2 * k + 1]));
    }
    const __m512d r0 = _mm512_castps_pd(r[0]), r1 = _mm512_castps_pd(r[1]);
    // Lane L, position m: slot 4m + L.
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(r0, r1)), _mm512_castpd_ps(_mm512_unpackhi_pd(r0, r1)));
}

// The tile's M queries (q + i * qs) against the four keys k[0..3]: per query and key one accumulator, into
// d[i * 16 + c] for key c.
template <bool F16, int M>
inline void tile_scores(const float * q, size_t qs, const uint8_t * const * k, size_t dim, __m512 * d) {
    __m512 a[M][4];
    for (int i = 0; i < M; ++i)
        for (int c = 0; c < 4; ++c) a[i][c] = _mm512_setzero_ps();
    size_t e = 0;
    for (; e + kW <= dim; e += kW) {
        __m512 x[4];
        for (int c = 0; c < 4; ++c) x[c] = Avx512::load_row<F16>(k[c], e);
        for (int i = 0; i < M; ++i) {
            __m512 qv = _mm512_loadu_ps(q + i * qs + e);
            __asm__("" : "+v"(qv));  // one load for the four keys (GCC would fold a load into each multiply-add)
            for (int c = 0; c < 4; ++c) a[i][c] = _mm512_fmadd_ps(qv, x[c], a[i][c]);
        }
    }
    if (e < dim) {
        const __mmask16 km = mask(dim - e);
        __m512 x[4];
        for (int c = 0; c < 4; ++c) x[c] = Avx512::load_row_tail<F16>(k[c], e, km);
        for (int i = 0; i < M; ++i) {
            const __m512 qv = _mm512_maskz_loadu_ps(km, q + i * qs + e);
            for (int c = 0; c < 4; ++c) a[i][c] = _mm512_fmadd_ps(qv, x[c], a[i][c]);
        }
    }
    for (int i = 0; i < M; ++i)
        for (int c = 0; c < 4; ++c) d[i * 16 + c] = a[i][c];
}

// out_i[d .. d + 32) += sum over j < nb in order of p[i * kTileKeys + j] V_j (the tile's M queries; k0 and k1
// mask the two vectors of a chunk at the end of a row).
template <bool F16, int M>
inline void tile_values(const float * p, const uint8_t * vb, size_t vs, const uint32_t * cells, size_t nb, float * out,
                        size_t os, size_t d, __mmask16 k0, __mmask16 k1) {
    __m512 a0[M], a1[M];
    for (int i = 0; i < M; ++i) {
        a0[i] = _mm512_maskz_loadu_ps(k0, out + i * os + d);
        a1[i] = _mm512_maskz_loadu_ps(k1, out + i * os + d + kW);
    }
    for (size_t j = 0; j < nb; ++j) {
        const uint8_t * row = vb + static_cast<size_t>(cells[j]) * vs;
        const __m512 v0 = k0 == 0xffff ? Avx512::load_row<F16>(row, d) : Avx512::load_row_tail<F16>(row, d, k0);
        const __m512 v1 = k1 == 0xffff ? Avx512::load_row<F16>(row, d + kW) : Avx512::load_row_tail<F16>(row, d + kW, k1);
        for (int i = 0; i < M; ++i) {
            const __m512 w = _mm512_set1_ps(p[i * attn_impl::kTileKeys + j]);
            a0[i] = _mm512_fmadd_ps(w, v0, a0[i]);
            a1[i] = _mm512_fmadd_ps(w, v1, a1[i]);
        }
    }
    for (int i = 0; i < M; ++i) {
        _mm512_mask_storeu_ps(out + i * os + d, k0, a0[i]);
        _mm512_mask_storeu_ps(out + i * os + d + kW, k1, a1[i]);
    }
}

template <bool F16, int M>
void tile_scores_keys(const float * q, size_t qs, const uint8_t * kb, size_t ks, const uint32_t * cells, size_t cnt,
                      size_t dim, __m512 * dots) {
    for (size_t j = 0; j < cnt; j += 4) {
        const uint8_t * k[4];
        for (size_t c = 0; c < 4; ++c) k[c] = kb + static_cast<size_t>(cells[std::min(j + c, cnt - 1)]) * ks;
        tile_scores<F16, M>(q, qs, k, dim, dots + j);  // a last group short of four repeats its last key
    }
}

// The tile set of attn_impl::attend_tiles for this level.
struct Tiles {
    using V = __m512;
    static constexpr size_t kLanes = 16;
    static constexpr size_t kChunk = 32;  // elements of a V tile: two vectors

    template <bool F16>
    static void scores(size_t m, const float * q, size_t qs, const uint8_t * kb, size_t ks, const uint32_t * cells,
                       size_t cnt, size_t dim, __m512 * dots) {
        attn_impl::for_each_tile<kScoreTileQ>(m, [&](auto M, size_t t0) {
            tile_scores_keys<F16, M()>(q + t0 * qs, qs, kb, ks, cells, cnt, dim, dots + t0 * kLanes);
        });
    }
    static __m512 score_vector(const __m512 * dots, size_t cnt, float scale) {
        const __m512 minus_inf = _mm512_set1_ps(-INFINITY);
        if (cnt == 0) return minus_inf;
        __m512 v[16];
        for (int slot = 0; slot < 16; ++slot) {
            const size_t key = static_cast<size_t>(kSlotKey[slot]);
            v[slot] = key < cnt ? dots[key] : _mm512_setzero_ps();
        }
        return _mm512_mask_mov_ps(minus_inf, mask(cnt), _mm512_mul_ps(_mm512_set1_ps(scale), reduce16(v)));
    }
    static float block_max(const __m512 * s, size_t n) {
        __m512 mx = s[0];
        for (size_t g = 1; g < n; ++g) mx = _mm512_max_ps(mx, s[g]);
        return _mm512_reduce_max_ps(mx);
    }
    static float weights(const __m512 * s, size_t n, float mx, float * p) {
        const __m512 vm = _mm512_set1_ps(mx);
        __m512 total = _mm512_setzero_ps();
        for (size_t g = 0; g < n; ++g) {
            const __m512 e = Avx512::exp(_mm512_sub_ps(s[g], vm));
            _mm512_store_ps(p + kLanes * g, e);
            total = _mm512_add_ps(total, e);
        }
        return hsum(total);
    }
    template <bool F16>
    static void values(size_t m, const float * p, const uint8_t * vb, size_t vs, const uint32_t * cells, size_t nb,
                       float * out, size_t os, size_t d, size_t dim) {
        const __mmask16 k0 = d + kW <= dim ? __mmask16{0xffff} : mask(dim - d);
        const __mmask16 k1 = d + 2 * kW <= dim ? __mmask16{0xffff} : d + kW < dim ? mask(dim - d - kW) : __mmask16{0};
        attn_impl::for_each_tile<kTileQ>(m, [&](auto M, size_t t0) {
            tile_values<F16, M()>(p + t0 * attn_impl::kTileKeys, vb, vs, cells, nb, out + t0 * os, os, d, k0, k1);
        });
    }
    static void scale(float a, float * y, size_t n) { Avx512::scale(a, y, n); }
    static void prefetch(const uint8_t * p, size_t bytes) { Avx512::prefetch(p, bytes); }
};

}  // namespace

void add_attn_row_kernels_avx512(AttnRowKernels & k) {
    k.attend_f32 = attn_impl::attend_tiles<Tiles, false>;
    k.attend_f16 = attn_impl::attend_tiles<Tiles, true>;
    k.score_f32 = score_lanes<false>;
    k.score_f16 = score_lanes<true>;
    k.score_blocked_f32 = score_blocked<false>;
    k.score_blocked_f16 = score_blocked<true>;
}

#else

void add_attn_row_kernels_avx512(AttnRowKernels &) {}

#endif

}  // namespace offgrid::ops::cpu
