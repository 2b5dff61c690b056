// AVX-512 (F BW VL DQ VNNI) float and Q8_0 kernels, compiled with the AVX-512 flags and reached only through
// the dispatch when active_isa() allows it.
//
// Reduction order (the same in vec_dot and dot_tile, which makes the tile bit-identical):
//  - F32 / F16 / BF16: one 16-lane accumulator, lane j sums the elements i = j (mod 16) in index order (the
//    last partial vector zero-padded), then a fixed horizontal sum.
//  - Q8_0 against f32 activations: like the float types (lane j sums elements j mod 16), each weight widened to
//    d * q in registers (the same float product as dequantize_row), walked block by block.
//  - Q8_0 against Q8_0 activations (the int8 variant): the scalar twin's order, bit for bit: each block's exact
//    integer dot (vpdpbusd, two blocks per register) folded in block order, s + (d_w * d_x) * isum.
#include <cstring>

#include "ops/cpu/kernels_float.h"
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)
// GCC 12's AVX-512 headers build results on _mm512_undefined_*(), which -Wall reports as uninitialised
// once inlined (a false positive of the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/cpu/hsum_avx512.h"
#include "ops/cpu/tile_fetch_avx512.h"

#define OFFGRID_KERNELS_AVX512 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_KERNELS_AVX512

namespace {

using tensor::ElemType;

constexpr int kLanes = 16;
constexpr int kQ8Block = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;

// Loaders of 16 weights starting at element i, as floats; `count` < 16 loads a zero-padded tail.
struct LoadF32 {
    static constexpr int kBytes = 4;
    static __m512 full(const void * w, int64_t i) { return _mm512_loadu_ps(static_cast<const float *>(w) + i); }
    static __m512 tail(const void * w, int64_t i, int count) {
        return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), static_cast<const float *>(w) + i);
    }
};
struct LoadF16 {
    static constexpr int kBytes = 2;
    static __m512 full(const void * w, int64_t i) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(w) + i)));
    }
    static __m512 tail(const void * w, int64_t i, int count) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << count) - 1),
                                                        static_cast<const uint16_t *>(w) + i));
    }
};
struct LoadBF16 {
    static constexpr int kBytes = 2;
    static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
    static __m512 full(const void * w, int64_t i) {
        return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(w) + i)));
    }
    static __m512 tail(const void * w, int64_t i, int count) {
        return widen(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << count) - 1),
                                              static_cast<const uint16_t *>(w) + i));
    }
};

using avx512::hsum;  // ops/cpu/hsum_avx512.h

// Sixteen horizontal sums at once, each with exactly hsum's additions in hsum's order (halves of 256, then 128,
// then pairs, then the last two lanes), the vectors transposed by shuffles between the levels: lane 4 * b + q of
// the result is hsum(v[b + 4 * q]). 15 adds and 30 shuffles instead of 16 x 8 operations.
[[gnu::always_inline]] inline __m512 hsum16(const __m512 * v) {
    __m512 s1[8], s2[4], s3[2];
    for (int k = 0; k < 8; ++k) {
        const __m512 lo = _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi = _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2));
        s1[k] = _mm512_add_ps(lo, hi);  // [s8 of v[2k] | s8 of v[2k+1]]
    }
    for (int m = 0; m < 4; ++m) {
        const __m512 lo = _mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 hi = _mm512_shuffle_f32x4(s1[2 * m], s1[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1));
        s2[m] = _mm512_add_ps(lo, hi);  // block b: s4 of v[4m + b]
    }
    for (int u = 0; u < 2; ++u) {
        const __m512 lo = _mm512_shuffle_ps(s2[2 * u], s2[2 * u + 1], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512 hi = _mm512_shuffle_ps(s2[2 * u], s2[2 * u + 1], _MM_SHUFFLE(3, 2, 3, 2));
        s3[u] = _mm512_add_ps(lo, hi);  // block b: s2 of v[8u + b], then s2 of v[8u + 4 + b]
    }
    const __m512 lo = _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_ps(s3[0], s3[1], _MM_SHUFFLE(3, 1, 3, 1));
    return _mm512_add_ps(lo, hi);
}

// 128-bit block b of s (a token's four rows after hsum16) to y[0..3].
[[gnu::always_inline]] inline void store_block(float * y, __m512 s, int b) {
    switch (b) {
        case 0: _mm_storeu_ps(y, _mm512_castps512_ps128(s)); return;
        case 1: _mm_storeu_ps(y, _mm512_extractf32x4_ps(s, 1)); return;
        case 2: _mm_storeu_ps(y, _mm512_extractf32x4_ps(s, 2)); return;
        default: _mm_storeu_ps(y, _mm512_extractf32x4_ps(s, 3)); return;
    }
}

// Four rows by four tokens of parked accumulators (acc(r, t) at park + (r * park_row + t) * 16) into
// y[t * y_stride + r]: one hsum16, each token's four rows stored as one 128-bit block.
[[gnu::always_inline]] inline void reduce_4x4(const float * park, int park_row, int t0, float * y, size_t y_stride) {
    __m512 v[16];
    for (int r = 0; r < 4; ++r)
        for (int t = 0; t < 4; ++t) v[r * 4 + t] = _mm512_load_ps(park + (r * park_row + t0 + t) * kLanes);
    const __m512 s = hsum16(v);
    for (int t = 0; t < 4; ++t) store_block(y + (t0 + t) * y_stride, s, t);
}

// A Q8_0 block's scale d (f16) as a float.
inline float q8_scale_of(const uint8_t * block) {
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    return _cvtsh_ss(bits);
}

inline __m512 load_x(const float * x, int64_t i) { return _mm512_loadu_ps(x + i); }
inline __m512 load_x_tail(const float * x, int64_t i, int count) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), x + i);
}

template <typename L>
float vec_dot_float(const void * w, const void * xv, int64_t n) {
    const auto * x = static_cast<const float *>(xv);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) acc = _mm512_fmadd_ps(L::full(w, i), load_x(x, i), acc);
    if (i < n) {
        const int c = static_cast<int>(n - i);
        acc = _mm512_fmadd_ps(L::tail(w, i, c), load_x_tail(x, i, c), acc);
    }
    return hsum(acc);
}

// Software prefetch for the 2-3 token tiles (the experts and products of a step of a few sequences), memory-bound:
// the rows of a matrix are contiguous, so the tile two tiles ahead starts at w + 8 * w_stride, and each step of
// the loop below prefetches as many lines of it as the step reads of this tile (four rows of 16 weights). The
// hardware prefetcher alone keeps one core at about 65 % of the bus with 4 KB rows and 35 % with 1 KB rows (the
// experts' down products), where four short interleaved streams never train it (bench_stream; a probe with the
// prefetch reached 85-90 % on one core for both). Prefetches never fault and change no arithmetic.
constexpr int kPrefetchTiles = 2;
template <int ElemBytes>
inline void prefetch_ahead(const uint8_t * w, size_t w_stride, int64_t i) {
    const uint8_t * p = w + kPrefetchTiles * 4 * w_stride + static_cast<size_t>(i) * 4 * ElemBytes;
    for (int line = 0; line < ElemBytes; ++line) _mm_prefetch(reinterpret_cast<const char *>(p + 64 * line), _MM_HINT_T0);
}

// The lines of the tile kPrefetchTiles ahead that correspond to step i of this one, into L2.
template <int ElemBytes>
inline void prefetch_ahead_l2(const uint8_t * w, size_t w_stride, int64_t i) {
    const uint8_t * p = w + kPrefetchTiles * 4 * w_stride + static_cast<size_t>(i) * 4 * ElemBytes;
    for (int line = 0; line < ElemBytes; ++line) _mm_prefetch(reinterpret_cast<const char *>(p + 64 * line), _MM_HINT_T1);
}

// Half h (0 or 1) of the tile kPrefetchTiles ahead, into L2, spread over the steps of a pass over this tile's
// n columns (two passes over a tile that each prefetch a half keep the memory busy through both).
template <int ElemBytes, int Half>
inline void prefetch_half_l2(const uint8_t * w, size_t w_stride, int64_t i, int64_t n) {
    const uint8_t * p = w + kPrefetchTiles * 4 * w_stride + static_cast<size_t>(Half * n + i) * 2 * ElemBytes;
    for (int line = 0; line < ElemBytes / 2; ++line) _mm_prefetch(reinterpret_cast<const char *>(p + 64 * line), _MM_HINT_T1);
}

// Four weight rows by NT tokens; every accumulator follows vec_dot_float's order exactly. HalfL2: the tile two
// ahead into L2 instead of the 2-3 token L1 prefetch, 1 its first half, 2 its second half (the two passes of an
// 8-token tile), 3 all of it (4 tokens on short rows).
template <typename L, int NT, int HalfL2 = 0>
void tile4_float(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * y,
                 size_t y_stride) {
    __m512 acc[4][NT];
    for (int r = 0; r < 4; ++r)
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
    const float * x[NT];
    for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float *>(act + t * act_stride);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        if constexpr (HalfL2 == 3) {
            prefetch_ahead_l2<L::kBytes>(w, w_stride, i);
        } else if constexpr (HalfL2 > 0) {
            prefetch_half_l2<L::kBytes, HalfL2 - 1>(w, w_stride, i, n);
        } else if constexpr (NT > 1 && NT < 4) {
            prefetch_ahead<L::kBytes>(w, w_stride, i);
        }
        __m512 xv[NT];
        for (int t = 0; t < NT; ++t) xv[t] = load_x(x[t], i);
        for (int r = 0; r < 4; ++r) {
            const __m512 wv = L::full(w + r * w_stride, i);
            for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (i < n) {
        const int c = static_cast<int>(n - i);
        for (int r = 0; r < 4; ++r) {
            const __m512 wv = L::tail(w + r * w_stride, i, c);
            for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, load_x_tail(x[t], i, c), acc[r][t]);
        }
    }
    if constexpr (NT == 4) {
        __m512 v[16];
        for (int r = 0; r < 4; ++r)
            for (int t = 0; t < 4; ++t) v[r * 4 + t] = acc[r][t];
        const __m512 s = hsum16(v);
        for (int t = 0; t < 4; ++t) store_block(y + t * y_stride, s, t);
    } else {
        for (int t = 0; t < NT; ++t)
            for (int r = 0; r < 4; ++r) y[t * y_stride + r] = hsum(acc[r][t]);
    }
}

// One token (decode): the four rows one after another, each vec_dot_float itself, so a thread reads one
// sequential stream, the pattern the hardware prefetcher follows best, and needs no software prefetch. In one
// process, interleaved (bench, load 2-2.6), against the four interleaved rows with the prefetch: products of
// 4 MiB at 2 threads, median GB/s 11.9 -> 13.2 (2 MiB pages), 7.5 -> 9.5 (4 KiB pages), 8.7 -> 11.9 (rows of
// 256, the experts' down products); in the model (F32 bench file, alternated, load 2.4-3.4) decode 16.4-18.6 ->
// 20.0-22.7 t/s on 4 KiB pages, 21.0-21.5 -> 22.7-28.1 on 2 MiB pages. (bench_bandwidth: with 2 MiB pages one
// or two streams per thread read fastest, 45-50 GB/s at best, four 38, eight 34.)
template <typename L>
void rows_in_turn_float(const uint8_t * w, size_t w_stride, const uint8_t * act, int64_t n, float * y) {
    for (int r = 0; r < 4; ++r) y[r] = vec_dot_float<L>(w + r * w_stride, act, n);
}

// ---- Several tokens (a decode step of several sequences, prompts): four rows by 2-8 tokens ----
// The weights stream from memory once per tile whatever the token count (the driver gives up to kTileTokens
// tokens per call). Measured per shape and token count by bench_float_tiles (128 MiB in 2 MiB pages, one thread,
// CPU time, load 2.7-3.6; GB/s, the 4x4 tiles before -> these): 1024 x 1024 products 2 tokens 19.6 -> 23.4,
// 3 14.7 -> 22.3, 4 13.1 -> 17.5, 5 11.7 -> 18.0, 6 9.5 -> 17.0, 7 8.9 -> 15.6, 8 12.0 -> 14.0; rows of 256 (the
// experts' down products) 4 tokens 6.3 -> 16.7, 6 8.1 -> 20.2, 8 6.8 -> 19.3.
// What made most of the difference is the prefetch hint: the tile two tiles ahead prefetched into L2
// (prefetcht1) rather than L1, where the prefetched lines evicted the tokens' activations (at 8 tokens and 1024
// columns, 32 KB: all of L1). Without any software prefetch the four interleaved rows of a tile left the hardware
// prefetcher behind (1 KB rows: 6-9 GB/s at 2-8 tokens). Prefetch distances of 1, 4 or 8 tiles and chunks of 512
// columns or whole rows measured the same within noise. Over whole rows, one or two rows at a time by all tokens
// was slower from 4 tokens on (8 tokens: 5.8 and 6.9): the tokens' activations then come from L2 (8 x 4 KB), at 9
// loads per 8 FMAs or 10 per 16 (and GCC loaded each activation vector once per row until told not to).
//
// Per chunk of kChunkCols columns a tile keeps its accumulators in registers and parks them in memory between
// chunks, so the chunk's activations (8 KB at most) and weights (4 KB) are read from L1 by its second pass. Each
// accumulator still sees its row's vectors in index order, then the masked tail: vec_dot_float's order, bit for
// bit.
constexpr int64_t kChunkCols = 256;

// Columns [i0, i1) (whole vectors) of four rows by NT (<= 4) tokens, accumulators parked in `park` between
// chunks, the tile two ahead prefetched into L2.
template <typename L, int NT>
inline void tile4_group(const uint8_t * w, size_t w_stride, const float * const * x, int64_t i0, int64_t i1,
                        float * park, bool first) {
    __m512 acc[4][NT];
    for (int r = 0; r < 4; ++r)
        for (int t = 0; t < NT; ++t) acc[r][t] = first ? _mm512_setzero_ps() : _mm512_load_ps(park + (r * 8 + t) * kLanes);
    for (int64_t i = i0; i < i1; i += kLanes) {
        prefetch_ahead_l2<L::kBytes>(w, w_stride, i);
        __m512 xv[NT];
        for (int t = 0; t < NT; ++t) xv[t] = load_x(x[t], i);
        for (int r = 0; r < 4; ++r) {
            const __m512 wv = L::full(w + r * w_stride, i);
            for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    for (int r = 0; r < 4; ++r)
        for (int t = 0; t < NT; ++t) _mm512_store_ps(park + (r * 8 + t) * kLanes, acc[r][t]);
}

// The masked last vector (c < 16 elements at i) of four rows by NT tokens.
template <typename L, int NT>
inline void tile4_group_tail(const uint8_t * w, size_t w_stride, const float * const * x, int64_t i, int c,
                             float * park) {
    for (int r = 0; r < 4; ++r) {
        const __m512 wv = L::tail(w + r * w_stride, i, c);
        for (int t = 0; t < NT; ++t) {
            float * a = park + (r * 8 + t) * kLanes;
            _mm512_store_ps(a, _mm512_fmadd_ps(wv, load_x_tail(x[t], i, c), _mm512_load_ps(a)));
        }
    }
}

template <typename L, int NT>
void tile4_tokens(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * y,
                  size_t y_stride) {
    static_assert(NT <= 4);
    if (n <= kChunkCols) {
        // One chunk (the experts' down products, rows of 256): nothing to park. 2-3 tokens keep the L1 prefetch
        // of before (rows of 256, 2 tokens: 24.9 GB/s with it, 18.9 parked with the L2 prefetch), 4 take L2.
        tile4_float<L, NT, NT == 4 ? 3 : 0>(w, w_stride, act, act_stride, n, y, y_stride);
        return;
    }
    alignas(64) float park[4 * 8 * kLanes];  // written by the first chunk (n > kChunkCols: it is whole)
    const float * x[NT];
    for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float *>(act + t * act_stride);
    const int64_t full = n / kLanes * kLanes;
    for (int64_t c0 = 0; c0 < full; c0 += kChunkCols) {
        const int64_t c1 = std::min(full, c0 + kChunkCols);
        tile4_group<L, NT>(w, w_stride, x, c0, c1, park, c0 == 0);
    }
    if (full < n) tile4_group_tail<L, NT>(w, w_stride, x, full, static_cast<int>(n - full), park);
    if constexpr (NT == 4) {
        reduce_4x4(park, 8, 0, y, y_stride);
    } else {
        for (int t = 0; t < NT; ++t)
            for (int r = 0; r < 4; ++r) y[t * y_stride + r] = hsum(_mm512_load_ps(park + (r * 8 + t) * kLanes));
    }
}

// Four rows by NT (3-7) tokens as two pairs of rows by all tokens, per chunk of kChunkCols columns: 2 x NT
// accumulators in registers (2 + NT loads per 2 NT FMAs), parked between chunks; the chunk's activations (8 KB at
// most) stay in L1 for the second pair. Each pass of a pair prefetches its half of the tile two ahead into L2.
template <typename L, int NT>
void tile2x_pairs(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * y,
                  size_t y_stride) {
    alignas(64) float park[2][2 * 8 * kLanes];  // written by each pair's first pass
    const float * x[NT];
    for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float *>(act + t * act_stride);
    const int64_t full = n / kLanes * kLanes;
    auto pair_pass = [&](int p, int64_t i0, int64_t i1, int tail, bool first) {
        const uint8_t * w0 = w + 2 * p * w_stride;
        const uint8_t * w1 = w0 + w_stride;
        __m512 acc[2][NT];
        for (int r = 0; r < 2; ++r)
            for (int t = 0; t < NT; ++t)
                acc[r][t] = first ? _mm512_setzero_ps() : _mm512_load_ps(park[p] + (r * 8 + t) * kLanes);
        if (tail == 0) {
            for (int64_t i = i0; i < i1; i += kLanes) {
                if (p == 0) {
                    prefetch_half_l2<L::kBytes, 0>(w, w_stride, i, n);
                } else {
                    prefetch_half_l2<L::kBytes, 1>(w, w_stride, i, n);
                }
                const __m512 a0 = L::full(w0, i), a1 = L::full(w1, i);
                for (int t = 0; t < NT; ++t) {
                    __m512 xv = load_x(x[t], i);
                    asm("" : "+v"(xv));  // one load per token (GCC would fold it into both FMAs)
                    acc[0][t] = _mm512_fmadd_ps(a0, xv, acc[0][t]);
                    acc[1][t] = _mm512_fmadd_ps(a1, xv, acc[1][t]);
                }
            }
        } else {
            const __m512 a0 = L::tail(w0, i0, tail), a1 = L::tail(w1, i0, tail);
            for (int t = 0; t < NT; ++t) {
                const __m512 xv = load_x_tail(x[t], i0, tail);
                acc[0][t] = _mm512_fmadd_ps(a0, xv, acc[0][t]);
                acc[1][t] = _mm512_fmadd_ps(a1, xv, acc[1][t]);
            }
        }
        for (int r = 0; r < 2; ++r)
            for (int t = 0; t < NT; ++t) _mm512_store_ps(park[p] + (r * 8 + t) * kLanes, acc[r][t]);
    };
    for (int64_t c0 = 0; c0 < full; c0 += kChunkCols) {
        const int64_t c1 = std::min(full, c0 + kChunkCols);
        pair_pass(0, c0, c1, 0, c0 == 0);
        pair_pass(1, c0, c1, 0, c0 == 0);
    }
    if (full < n) {
        pair_pass(0, full, n, static_cast<int>(n - full), full == 0);
        pair_pass(1, full, n, static_cast<int>(n - full), full == 0);
    }
    // park[p] + ((r % 2) * 8 + t) * 16 is &park[0][0] + (r * 8 + t) * 16: reduce_4x4's layout.
    int t0 = 0;
    if constexpr (NT >= 4) {
        reduce_4x4(&park[0][0], 8, 0, y, y_stride);
        t0 = 4;
    }
    for (int t = t0; t < NT; ++t)
        for (int r = 0; r < 4; ++r) y[t * y_stride + r] = hsum(_mm512_load_ps(park[r / 2] + ((r % 2) * 8 + t) * kLanes));
}

// Four rows by eight tokens in one pass over the weights: per chunk of kChunkCols8 columns, tokens 0-3 then tokens
// 4-7 over the same four rows (4 x 4 accumulators in registers, 4 weight and 4 activation loads per 16 FMAs), so
// the second group reads the chunk's weights (8 KB) from L1 instead of the whole tile (16 KB) from L2, and the
// chunk's activations (16 KB) stay in L1 from one tile to the next; the accumulators are parked between chunks
// and the 32 sums reduced by two hsum16. Each accumulator sees its row's vectors in index order, then the masked
// tail: vec_dot_float's order. Both groups prefetch the tile two ahead into L2 (the same lines twice: 16.2 GB/s
// against 13.3 with the first group's prefetch alone). One thread, CPU time, weights from DRAM (128-256 MiB,
// 2 MiB pages), 1024 columns, load ~3: 12.5-13.9 GB/s for two whole-row 4 x 4 passes, 14.9 with chunks of 256,
// 15.1-16.2 of 512; rows 0-1 then 2-3 by all eight tokens (2 + 8 loads per 16 FMAs) 13.2-13.8, one row at a time
// by eight tokens 5.9-6.6. From L2 (the compute alone): 22.5 for the whole-row passes, 20.0-21.9 for chunks of 512.
constexpr int64_t kChunkCols8 = 512;

// NT (5-8) tokens: the second group takes tokens 4 to NT - 1.
template <typename L, int NT>
void tile8_quads(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * y,
                 size_t y_stride) {
    static_assert(NT > 4 && NT <= 8);
    constexpr int NT2 = NT - 4;
    alignas(64) float park[2][4 * 8 * kLanes];  // per token group, acc(r, t) at (r * 8 + t) * 16
    const float * x[NT];
    for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float *>(act + t * act_stride);
    const int64_t full = n / kLanes * kLanes;
    for (int64_t c0 = 0; c0 < full; c0 += kChunkCols8) {
        const int64_t c1 = std::min(full, c0 + kChunkCols8);
        tile4_group<L, 4>(w, w_stride, x, c0, c1, park[0], c0 == 0);
        tile4_group<L, NT2>(w, w_stride, x + 4, c0, c1, park[1], c0 == 0);
    }
    if (full < n) {
        if (full == 0) std::memset(park, 0, sizeof(park));  // a row shorter than one vector: nothing parked yet
        tile4_group_tail<L, 4>(w, w_stride, x, full, static_cast<int>(n - full), park[0]);
        tile4_group_tail<L, NT2>(w, w_stride, x + 4, full, static_cast<int>(n - full), park[1]);
    }
    reduce_4x4(park[0], 8, 0, y, y_stride);
    if constexpr (NT2 == 4) {
        reduce_4x4(park[1], 8, 0, y + 4 * y_stride, y_stride);
    } else {
        for (int t = 0; t < NT2; ++t)
            for (int r = 0; r < 4; ++r) y[(4 + t) * y_stride + r] = hsum(_mm512_load_ps(park[1] + (r * 8 + t) * kLanes));
    }
}

// The table's float tile: up to 4 rows by up to kTileTokens tokens. One token: the rows in turn (above); a tile
// of fewer than 4 rows (the end of a matrix whose height is not a multiple of 4): vec_dot per output.
constexpr int kTileTokens = 8;

static_assert(kTileTokens <= kTileTokensMax);

// 5-7 tokens: the table's tile8_quads (Gen 1), or two pairs of rows (Gen 0, for bench_float_tiles).
template <typename L, int NT, int Gen>
inline void five_to_seven(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n,
                          float * y, size_t y_stride) {
    if constexpr (Gen == 0) {
        tile2x_pairs<L, NT>(w, w_stride, act, act_stride, n, y, y_stride);
    } else {
        tile8_quads<L, NT>(w, w_stride, act, act_stride, n, y, y_stride);
    }
}

// Gen 0: the alternative tiles (3-4 tokens four rows at a time, 5-7 as two pairs of rows, 8 as two 4 x 4 passes
// over whole rows; their 4 x 4 sums through hsum16, the same bits), kept for bench_float_tiles; Gen 1: the
// table's.
template <typename L, int Gen = 1>
void dot_tile_tokens(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                     int n_tok, float * y, size_t y_stride) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    if (n_rows == 4) {
        switch (n_tok) {
            case 1: rows_in_turn_float<L>(wb, w_stride, ab, n, y); return;
            case 2: tile4_tokens<L, 2>(wb, w_stride, ab, act_stride, n, y, y_stride); return;
            case 3:
                // Rows longer than a chunk as two pairs of rows (see case 4); shorter ones keep the 4 x 3 tile
                // with its L1 prefetch (rows of 256: 25.8-26.0 GB/s against 22.9-23.0 as pairs).
                if (Gen == 0 || n <= kChunkCols) {
                    tile4_tokens<L, 3>(wb, w_stride, ab, act_stride, n, y, y_stride);
                } else {
                    tile2x_pairs<L, 3>(wb, w_stride, ab, act_stride, n, y, y_stride);
                }
                return;
            case 4:
                // Two pairs of rows by four tokens per chunk read two rows at a time, which the memory serves
                // faster than four interleaved rows (one thread, CPU time, DRAM, load 2-3: 1024 columns 21.1-21.5
                // -> 22.3-22.6 GB/s, rows of 256 17.2-17.6 -> 22.4-23.5; one token in the same runs 22-28).
                if (Gen == 0) {
                    tile4_tokens<L, 4>(wb, w_stride, ab, act_stride, n, y, y_stride);
                } else {
                    tile2x_pairs<L, 4>(wb, w_stride, ab, act_stride, n, y, y_stride);
                }
                return;
            case 5: five_to_seven<L, 5, Gen>(wb, w_stride, ab, act_stride, n, y, y_stride); return;
            case 6: five_to_seven<L, 6, Gen>(wb, w_stride, ab, act_stride, n, y, y_stride); return;
            case 7: five_to_seven<L, 7, Gen>(wb, w_stride, ab, act_stride, n, y, y_stride); return;
            case 8: {
                // A tile's first visit (decode: the only one) streams it from DRAM once, through tile8_quads. Prompts
                // come in groups of 8 tokens, several groups per tile in a row, and are compute-bound: the later
                // groups find the tile in L1/L2 and the tile ahead fetched, and run two 4 x 4 passes over whole rows
                // without prefetch (from L2: 21.5-22.9 GB/s against 21.2-21.7 for tile8_quads; prefetching in every
                // group cost pp512 15-30 %). Gen 0's first visit: the same two passes, each prefetching half
                // of the tile two ahead into L2.
                thread_local const void * last_tile = nullptr;
                const bool first_visit = w != last_tile;
                last_tile = w;
                const uint8_t * ab2 = ab + 4 * act_stride;
                float * y2 = y + 4 * y_stride;
                if (!first_visit) {
                    tile4_float<L, 4>(wb, w_stride, ab, act_stride, n, y, y_stride);
                    tile4_float<L, 4>(wb, w_stride, ab2, act_stride, n, y2, y_stride);
                } else if constexpr (Gen == 1) {
                    tile8_quads<L, 8>(wb, w_stride, ab, act_stride, n, y, y_stride);
                } else {
                    tile4_float<L, 4, 1>(wb, w_stride, ab, act_stride, n, y, y_stride);
                    tile4_float<L, 4, 2>(wb, w_stride, ab2, act_stride, n, y2, y_stride);
                }
                return;
            }
        }
    }
    for (int t = 0; t < n_tok; ++t)
        for (int r = 0; r < n_rows; ++r) y[t * y_stride + r] = vec_dot_float<L>(wb + r * w_stride, ab + t * act_stride, n);
}

template <float (*Dot)(const void *, const void *, int64_t), typename Tile4>
void tile_dispatch(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                   int n_tok, float * y, size_t y_stride, Tile4 tile4) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    if (n_rows == 4 && tile4(wb, w_stride, ab, act_stride, n, n_tok, y, y_stride)) return;
    for (int t = 0; t < n_tok; ++t)
        for (int r = 0; r < n_rows; ++r) y[t * y_stride + r] = Dot(wb + r * w_stride, ab + t * act_stride, n);
}

template <typename L>
void dot_tile_float(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                    int n_tok, float * y, size_t y_stride) {
    tile_dispatch<vec_dot_float<L>>(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride,
                                    [](const uint8_t * wb, size_t ws, const uint8_t * ab, size_t as, int64_t nn,
                                       int nt, float * yy, size_t ys) {
                                        switch (nt) {
                                            case 1: rows_in_turn_float<L>(wb, ws, ab, nn, yy); return true;
                                            case 2: tile4_float<L, 2>(wb, ws, ab, as, nn, yy, ys); return true;
                                            case 3: tile4_float<L, 3>(wb, ws, ab, as, nn, yy, ys); return true;
                                            case 4: tile4_float<L, 4>(wb, ws, ab, as, nn, yy, ys); return true;
                                        }
                                        return false;
                                    });
}

// ---- Q8_0 x f32, block by block ----
// The order of the float types (lane j sums elements i = j mod 16 in index order), walked one block
// at a time so each row's scale is converted once per block rather than once per 16 weights.

inline void q8_widen(const uint8_t * blk, __m512 & lo, __m512 & hi) {
    const __m512 d = _mm512_set1_ps(q8_scale_of(blk));
    const auto * q = reinterpret_cast<const __m128i *>(blk + 2);
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d);
}

float vec_dot_q8_0_f32(const void * w, const void * xv, int64_t n) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * x = static_cast<const float *>(xv);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / kQ8Block; ++b) {
        __m512 lo, hi;
        q8_widen(wb + b * kQ8BlockBytes, lo, hi);
        acc = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + b * kQ8Block), acc);
        acc = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + b * kQ8Block + kLanes), acc);
    }
    return hsum(acc);
}

template <int NT>
void tile4_q8_0_f32(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * y,
                    size_t y_stride) {
    __m512 acc[4][NT];
    for (int r = 0; r < 4; ++r)
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
    const float * x[NT];
    for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float *>(act + t * act_stride);
    for (int64_t b = 0; b < n / kQ8Block; ++b) {
        if constexpr (NT < 4) {
            // As prefetch_ahead: a block step reads 4 x 34 bytes of the tile, about two lines.
            const uint8_t * p = w + kPrefetchTiles * 4 * w_stride + static_cast<size_t>(b) * 4 * kQ8BlockBytes;
            _mm_prefetch(reinterpret_cast<const char *>(p), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char *>(p + 64), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char *>(p + 128), _MM_HINT_T0);
        }
        for (int r = 0; r < 4; ++r) {
            __m512 lo, hi;
            q8_widen(w + r * w_stride + b * kQ8BlockBytes, lo, hi);
            for (int t = 0; t < NT; ++t) {
                acc[r][t] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x[t] + b * kQ8Block), acc[r][t]);
                acc[r][t] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x[t] + b * kQ8Block + kLanes), acc[r][t]);
            }
        }
    }
    for (int t = 0; t < NT; ++t)
        for (int r = 0; r < 4; ++r) y[t * y_stride + r] = hsum(acc[r][t]);
}

void dot_tile_q8_0_f32(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                       int n_tok, float * y, size_t y_stride) {
    tile_dispatch<vec_dot_q8_0_f32>(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride,
                                    [](const uint8_t * wb, size_t ws, const uint8_t * ab, size_t as, int64_t nn,
                                       int nt, float * yy, size_t ys) {
                                        switch (nt) {
                                            case 1: tile4_q8_0_f32<1>(wb, ws, ab, as, nn, yy, ys); return true;
                                            case 2: tile4_q8_0_f32<2>(wb, ws, ab, as, nn, yy, ys); return true;
                                            case 3: tile4_q8_0_f32<3>(wb, ws, ab, as, nn, yy, ys); return true;
                                            case 4: tile4_q8_0_f32<4>(wb, ws, ab, as, nn, yy, ys); return true;
                                        }
                                        return false;
                                    });
}

// ---- Q8_0 x Q8_0 ----

inline float q8_scale(const uint8_t * block) {
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    return _cvtsh_ss(bits);
}

// The quants of blocks b and b + 1 (b + 1 absent: zeros) in one register, and their scales per half.
inline __m512i q8_pair(const uint8_t * blk, bool second) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + 2));
    const __m256i hi = second ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(blk + kQ8BlockBytes + 2))
                              : _mm256_setzero_si256();
    return _mm512_inserti64x4(_mm512_inserti64x4(_mm512_setzero_si512(), lo, 0), hi, 1);
}
// Exact integer dots of a pair of blocks: |w| (unsigned) times x with w's sign (signed), four products per
// lane. x is never -128 (the activation quantiser keeps |q| <= 127), so the sign flip cannot overflow.
inline __m512i q8_pair_dot(__m512i w_abs, __mmask64 w_neg, __m512i x) {
    const __m512i x_signed = _mm512_mask_sub_epi8(x, w_neg, _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), w_abs, x_signed);
}

// The twin's fold of one block (kernels_float_scalar.cpp, vec_dot_q8_0): s + (d_w * d_x) * isum, each step
// rounded (scalar intrinsics, which the compiler does not contract).
inline __m128 fold_q8(__m128 s, float dw, float dx, int32_t isum) {
    const __m128 d = _mm_mul_ss(_mm_set_ss(dw), _mm_set_ss(dx));
    return _mm_add_ss(s, _mm_mul_ss(d, _mm_cvtsi32_ss(_mm_setzero_ps(), isum)));
}

// The exact integer dots of a pair of blocks (the halves of a pair product).
inline void pair_sums(__m512i isum, int32_t & first, int32_t & second) {
    const __m256i lo = _mm512_castsi512_si256(isum), hi = _mm512_extracti64x4_epi64(isum, 1);
    const __m256i h = _mm256_hadd_epi32(lo, hi);  // pairs of lo in lanes 0,1,4,5; of hi in 2,3,6,7
    const __m256i q = _mm256_hadd_epi32(h, h);    // lo's quarter sums in lanes 0, 4; hi's in 1, 5
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    first = _mm_cvtsi128_si32(s);
    second = _mm_extract_epi32(s, 1);
}

// The f16 scales of 8 consecutive blocks (34 bytes apart) as f32.
inline __m256 eight_scales(const uint8_t * blk) {
    uint16_t h[8];
    for (int j = 0; j < 8; ++j) std::memcpy(&h[j], blk + j * kQ8BlockBytes, 2);
    __m128i v;
    std::memcpy(&v, h, 16);
    return _mm256_cvtph_ps(v);
}

// One row against NT token rows: 8 blocks a step, their exact sums reduced together (four pair products through
// four_row_sums: lanes 0-3 the even blocks, 4-7 the odd ones) and their products (d_w * d_x) * isum as one vector,
// then added to the token's sum one block after another in order, as the twin does (kernels_float_scalar.cpp,
// vec_dot_q8_0); the row's blocks are prepared once for all tokens. Per block this is about half the instructions
// of a pair at a time with its own horizontal sum (one core from DRAM, one token: 17 against 14.5 GB/s).
template <int NT>
void row_q8_0(const uint8_t * wb, const uint8_t * const * xb, int64_t n, float * out) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const int64_t nb = n / kQ8Block;
    __m128 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm_setzero_ps();
    int64_t b = 0;
    // Lane of block j (0..7) in four_row_sums' order: block 2r in lane r, 2r + 1 in lane 4 + r.
    const __m256i in_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (; b + 8 <= nb; b += 8) {
        const size_t off = static_cast<size_t>(b) * kQ8BlockBytes;
        const uint8_t * wp = wb + off;
        for (int l = 0; l < 5; ++l) _mm_prefetch(reinterpret_cast<const char *>(wp) + 1024 + 64 * l, _MM_HINT_T0);
        __m512i w_abs[4];
        __mmask64 w_neg[4];
        for (int r = 0; r < 4; ++r) {
            const __m512i wq = q8_pair(wp + 2 * r * kQ8BlockBytes, true);
            w_abs[r] = _mm512_abs_epi8(wq);
            w_neg[r] = _mm512_movepi8_mask(wq);
        }
        const __m512 dw = _mm512_zextps256_ps512(eight_scales(wp));
        for (int t = 0; t < NT; ++t) {
            const uint8_t * xp = xb[t] + off;
            __m512i pair[4];
            for (int r = 0; r < 4; ++r) pair[r] = q8_pair_dot(w_abs[r], w_neg[r], q8_pair(xp + 2 * r * kQ8BlockBytes, true));
            const __m256i sums = _mm256_permutevar8x32_epi32(avx512::four_row_sums(pair[0], pair[1], pair[2], pair[3]), in_order);
            const __m512 d = _mm512_mul_round_ps(dw, _mm512_zextps256_ps512(eight_scales(xp)), kRound);
            const __m512 prod = _mm512_mul_round_ps(d, _mm512_cvtepi32_ps(_mm512_zextsi256_si512(sums)), kRound);
            const __m128 lo = _mm512_castps512_ps128(prod), hi = _mm512_extractf32x4_ps(prod, 1);
            __m128 a = acc[t];
            a = _mm_add_ss(a, lo);
            a = _mm_add_ss(a, _mm_shuffle_ps(lo, lo, 1));
            a = _mm_add_ss(a, _mm_shuffle_ps(lo, lo, 2));
            a = _mm_add_ss(a, _mm_shuffle_ps(lo, lo, 3));
            a = _mm_add_ss(a, hi);
            a = _mm_add_ss(a, _mm_shuffle_ps(hi, hi, 1));
            a = _mm_add_ss(a, _mm_shuffle_ps(hi, hi, 2));
            acc[t] = _mm_add_ss(a, _mm_shuffle_ps(hi, hi, 3));
        }
    }
    for (; b < nb; b += 2) {
        const bool second = b + 1 < nb;
        const size_t off = static_cast<size_t>(b) * kQ8BlockBytes;
        const uint8_t * wp = wb + off;
        const __m512i wq = q8_pair(wp, second);
        const __m512i w_abs = _mm512_abs_epi8(wq);
        const __mmask64 w_neg = _mm512_movepi8_mask(wq);
        for (int t = 0; t < NT; ++t) {
            const uint8_t * xp = xb[t] + off;
            int32_t s0, s1;
            pair_sums(q8_pair_dot(w_abs, w_neg, q8_pair(xp, second)), s0, s1);
            acc[t] = fold_q8(acc[t], q8_scale(wp), q8_scale(xp), s0);
            if (second) acc[t] = fold_q8(acc[t], q8_scale(wp + kQ8BlockBytes), q8_scale(xp + kQ8BlockBytes), s1);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = _mm_cvtss_f32(acc[t]);
}

float vec_dot_q8_0(const void * w, const void * x, int64_t n) {
    const auto * xb = static_cast<const uint8_t *>(x);
    float y;
    row_q8_0<1>(static_cast<const uint8_t *>(w), &xb, n, &y);
    return y;
}

// The f16 scales of blocks b and b + 1 of four rows in four_row_sums' lanes, converted: lanes 0-3 rows 0-3 of block
// b, lanes 4-7 of block b + 1 (zeros without the second); `w` is block b of row 0, rows `ws` bytes apart. The words
// are joined by shifts in general registers and cross to the vector unit once: the tile is bound by the vector
// pipes, which two two-source word permutations of four masked row loads kept busy (one core, `bench_kernels`
// matvec from cache, six alternations: 28.4 -> 33.7 GB/s).
inline __m256 four_row_scales(const uint8_t * w, size_t ws, bool second) {
    uint64_t even = 0, odd = 0;
    for (int r = 0; r < 4; ++r) {
        uint16_t h0, h1 = 0;
        std::memcpy(&h0, w + r * ws, 2);
        if (second) std::memcpy(&h1, w + r * ws + kQ8BlockBytes, 2);
        even |= uint64_t{h0} << (16 * r);
        odd |= uint64_t{h1} << (16 * r);
    }
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<long long>(even)),
                                              _mm_cvtsi64_si128(static_cast<long long>(odd))));
}

// Four rows at once (a decode step's 4-row tiles). The weights go in as unsigned bytes (q + 128, corrected by 128 *
// the activations' sums, one vpdpbusd a pair of blocks for all rows), four_row_sums gives the rows' sums of a pair
// of blocks, and the fold runs in the lanes of one vector (lane r: row r; s + (d_w * d_x) * isum, each step
// rounded, block after block: the twin's bits). The activations' side of a block is read once for the four rows.
// The rows are read block by block in turn, so the tile's stream is fetched ahead as one: the next tile's bytes
// into L1 and the one after's into L2, an even share each pair of blocks (rows one after another, each fetched
// ahead on its own, read 14.3 GB/s from DRAM on one core against 9.7 for four rows in turn without it).
template <int NT>
void tile4_q8_0(const uint8_t * w, size_t ws, const uint8_t * const * xs, int64_t n, float * y, size_t ys) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const int64_t nb = n / kQ8Block;
    const size_t ahead = (8 * ws / static_cast<size_t>(nb) + 63) / 64 * 64;  // a pair of blocks' share
    const __m512i k80 = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const bool second = b + 1 < nb;
        const size_t off = static_cast<size_t>(b) * kQ8BlockBytes;
        // The next tile into L1, the one after it into L2.
        avx512::fetch_tile_share(w + 4 * ws + static_cast<size_t>(b / 2) * ahead, ahead, 4 * ws);
        __m512i wu[4];
        for (int r = 0; r < 4; ++r) {
            const uint8_t * wp = w + r * ws + off;
            wu[r] = _mm512_xor_si512(q8_pair(wp, second), k80);  // an absent second block: 128s against zeros
        }
        const __m512 dw = _mm512_zextps256_ps512(four_row_scales(w + off, ws, second));
        for (int t = 0; t < NT; ++t) {
            const uint8_t * xp = xs[t] + off;
            const __m512i x = q8_pair(xp, second);
            const __m512i z = _mm512_setzero_si512();
            // Each row's sums start from -128 * x, four to a lane: sum((w + 128) * x) - 128 * sum(x) with no
            // subtraction a row.
            const __m512i neg = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, k80, x));
            const __m256i sums = avx512::four_row_sums(_mm512_dpbusd_epi32(neg, wu[0], x), _mm512_dpbusd_epi32(neg, wu[1], x),
                                                       _mm512_dpbusd_epi32(neg, wu[2], x), _mm512_dpbusd_epi32(neg, wu[3], x));
            short xh0, xh1 = 0;
            std::memcpy(&xh0, xp, 2);
            if (second) std::memcpy(&xh1, xp + kQ8BlockBytes, 2);
            const __m256 dx = _mm256_cvtph_ps(_mm_unpacklo_epi64(_mm_set1_epi16(xh0), _mm_set1_epi16(xh1)));
            const __m512 d = _mm512_mul_round_ps(dw, _mm512_zextps256_ps512(dx), kRound);
            const __m512 prod = _mm512_mul_round_ps(d, _mm512_cvtepi32_ps(_mm512_zextsi256_si512(sums)), kRound);
            acc[t] = _mm512_add_round_ps(acc[t], _mm512_zextps128_ps512(_mm512_castps512_ps128(prod)), kRound);
            if (second) acc[t] = _mm512_add_round_ps(acc[t], _mm512_zextps128_ps512(_mm512_extractf32x4_ps(prod, 1)), kRound);
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(16) float out[4];
        _mm_store_ps(out, _mm512_castps512_ps128(acc[t]));
        for (int r = 0; r < 4; ++r) y[t * ys + r] = out[r];
    }
}

void dot_tile_q8_0(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                   int n_tok, float * y, size_t y_stride) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const uint8_t * xs[kTileMax];
    for (int t = 0; t < n_tok; ++t) xs[t] = static_cast<const uint8_t *>(act) + t * act_stride;
    if (n_rows == 4) {
        switch (n_tok) {
            case 1: return tile4_q8_0<1>(wb, w_stride, xs, n, y, y_stride);
            case 2: return tile4_q8_0<2>(wb, w_stride, xs, n, y, y_stride);
            case 3: return tile4_q8_0<3>(wb, w_stride, xs, n, y, y_stride);
            case 4: return tile4_q8_0<4>(wb, w_stride, xs, n, y, y_stride);
        }
    }
    // Other shapes: rows one after another, each prepared once for all tokens (one stream). From DRAM, one thread,
    // 2 tokens: 2560 -> 640 140 us against 202 with four rows at a time (before the tiles above), 640 -> 2560 164
    // against 211, 2560 -> 4096 891 against 1285 (3 tokens and more: the lanes, kernels_quant_int8_lanes_avx512.cpp).
    for (int r = 0; r < n_rows; ++r) {
        float out[kTileMax];
        const uint8_t * row = wb + r * w_stride;
        switch (n_tok) {
            case 1: row_q8_0<1>(row, xs, n, out); break;
            case 2: row_q8_0<2>(row, xs, n, out); break;
            case 3: row_q8_0<3>(row, xs, n, out); break;
            default: row_q8_0<4>(row, xs, n, out); break;
        }
        for (int t = 0; t < n_tok; ++t) y[t * y_stride + r] = out[t];
    }
}

}  // namespace

void add_float_kernels_avx512(TypeKernels * table) {
    auto set = [&](ElemType type, auto vec_dot, auto dot_tile) {
        TypeKernels & k = table[static_cast<uint32_t>(type)];
        k.vec_dot = vec_dot;
        k.dot_tile = dot_tile;
    };
    set(ElemType::F32, vec_dot_float<LoadF32>, dot_tile_tokens<LoadF32>);
    set(ElemType::F16, vec_dot_float<LoadF16>, dot_tile_tokens<LoadF16>);
    set(ElemType::BF16, vec_dot_float<LoadBF16>, dot_tile_tokens<LoadBF16>);
    for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) table[static_cast<uint32_t>(type)].tile_tokens = kTileTokens;
    // Q8_0's exact entry is set whole: the base level's table may hold its int16 entry (LevelFills::q8_0_int16),
    // whose activation format must not stay under these f32 kernels.
    table[static_cast<uint32_t>(ElemType::Q8_0)] = TypeKernels{};
    set(ElemType::Q8_0, vec_dot_q8_0_f32, dot_tile_q8_0_f32);
}

std::vector<FloatTileVariant> f32_tile_variants_avx512() {
    return {
        {"4x4, L1 prefetch", dot_tile_float<LoadF32>, 4},  // the table's tile before bench_float_tiles
        {"Gen 0 token tiles", dot_tile_tokens<LoadF32, 0>, kTileTokens},  // Gen 0, the alternative tiles
        {"table", dot_tile_tokens<LoadF32, 1>, kTileTokens},  // the table's tiles
    };
}

void add_q8_0_int8_kernels_avx512(TypeKernels & k) {
    // quantize_act: the AVX2 quantiser (from the Avx2 level) gives the same bytes and is cheap.
    k.act_type = ElemType::Q8_0;
    k.vec_dot = vec_dot_q8_0;
    k.dot_tile = dot_tile_q8_0;
    quant::add_q8_0_int8_gemm_avx512(k);
}

#else

void add_float_kernels_avx512(TypeKernels * /*table*/) {}
void add_q8_0_int8_kernels_avx512(TypeKernels & /*k*/) {}
std::vector<FloatTileVariant> f32_tile_variants_avx512() { return {}; }

#endif

}  // namespace offgrid::ops::cpu
