// AVX-512 VNNI kernels of the 8-bit-activation path (OFFGRID_QUANT_ACT=int8; kernels_quant_common.h): q4_K and
// q6_K against q8_K activations, q5_0 against q8_0. Each is bit-identical to its scalar twin
// (kernels_quant_scalar.cpp): the integer sums of a block are exact whatever the grouping, so `vpdpbusd` (64
// multiply-adds of unsigned weight bytes by signed activation bytes) computes them, and the float part is the
// twin's own fold, block after block.
//  - Signed weights are made unsigned for vpdpbusd and corrected with the activations' block sums: q6_K stores
//    q - 32 (q in 0..63), so sum(scale * (q - 32) * a) = sum(scale * q * a) - 32 * sum(scale * bsum16); q5_0
//    stores q - 16, corrected with 16 * sum(a) (one more vpdpbusd against a vector of 16s).
//  - A chunk's int32 lanes fit int16 (q4_K: 4 products of 0..15 by -127..127; q6_K: of 0..63), so two chunks pack
//    into one register and one vpdpwssd applies their sub-blocks' scales.
//  - The fold's scalar chain and the horizontal sums of one block are what a lone row waits on (a q4_K row that
//    reduced each super-block alone streamed at 14.2 GB/s from cache on Zen 4, against 19.3 for the AVX2 rows,
//    docs/kernels.md). So the q4_K rows reduce runs of 4 super-blocks together, and the 4-row tiles of q4_K and
//    q6_K (a decode step's tiles) reduce the four rows' block together and fold in the lanes of one vector.
// A row kernel computes one weight row against up to 4 token rows (the row's blocks are decoded once for all of
// them); the other tiles run their rows one after another, each row one sequential stream, fetched ahead.
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
// GCC's intrinsics headers trip these under the sanitizers (the undefined upper halves of a cast are never read).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/kernels_quant_int8_avx2.h"
#include "ops/cpu/kernels_quant_int8_entries.h"
#include "ops/cpu/hsum_avx512.h"
#include "ops/cpu/tile_fetch_avx512.h"
#include "tensor/half.h"

namespace offgrid::ops::cpu::quant {

namespace {

constexpr int kPrefetchBytes = 2048;  // how far ahead in the row's stream (scale Q4_K_M decode: 4 % faster than 1 KiB)

// Every cache line of a block, kPrefetchBytes ahead of it.
template <size_t Bytes>
inline void prefetch(const void * p) {
    for (size_t off = 0; off < Bytes; off += 64) {
        _mm_prefetch(static_cast<const char *>(p) + kPrefetchBytes + off, _MM_HINT_T0);
    }
}

// f16 to f32 with F16C (exact, as tensor::f16_to_f32).
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline int32_t sum8(__m256i v) {
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
}

// ---- q4_K x q8_K ----------------------------------------------------------------------------------------

// vpshufb controls that spread the 8 int16 scales [s0..s7] of every 128-bit lane over the words of a
// _mm512_packs_epi32(P, Q) of two chunks' sums (below): words 0-3 of lanes 0-1 take scale a, words 4-7 scale c,
// and in lanes 2-3 b and d.
struct ScalePick {
    alignas(64) uint8_t bytes[64];
    constexpr ScalePick(int a, int b, int c, int d) : bytes{} {
        for (int lane = 0; lane < 4; ++lane) {
            for (int word = 0; word < 8; ++word) {
                const int s = word < 4 ? (lane < 2 ? a : b) : (lane < 2 ? c : d);
                bytes[16 * lane + 2 * word] = static_cast<uint8_t>(2 * s);
                bytes[16 * lane + 2 * word + 1] = static_cast<uint8_t>(2 * s + 1);
            }
        }
    }
};
constexpr ScalePick kScales0123(0, 1, 2, 3), kScales4567(4, 5, 6, 7);
constexpr ScalePick kTileScales0213(0, 2, 1, 3), kTileScales4657(4, 6, 5, 7);  // q4_k_isums_tile's chunks

// A super-block's 8 scales spread for two packed pairs of chunks (S01: the first, by pick01; S23 by pick23);
// returns the 8 mins.
inline uint64_t q4_k_scale_vectors(const BlockQ4_K & B, const ScalePick & pick01, const ScalePick & pick23, __m512i & S01,
                                   __m512i & S23) {
    uint64_t sc, mn;
    quant::k4_scales_mins_u64(B.scales, sc, mn);
    const __m512i s16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
    S01 = _mm512_shuffle_epi8(s16, _mm512_load_si512(pick01.bytes));
    S23 = _mm512_shuffle_epi8(s16, _mm512_load_si512(pick23.bytes));
    return mn;
}

// Per token, one super-block's sum of scale * quant * a as 8 int32 lanes (s8[t]); returns the 8 mins.
//  - Chunk c (elements 64c .. 64c + 63, sub-blocks 2c and 2c + 1) is the low and the high nibbles of qs bytes
//    32c .. 32c + 31: the 32 bytes broadcast to both halves of a register, the upper half shifted by 4, so its
//    elements line up with the activations' 64 contiguous bytes and one vpdpbusd sums them (dword lanes 0-7:
//    sub-block 2c, 8-15: 2c + 1; |lane| <= 4 * 15 * 127).
//  - Two chunks' lanes fit in int16 (packs saturates nothing) and one vpdpwssd multiplies them by their
//    sub-blocks' scales and adds pairs of the same sub-block.
template <int NT, bool Fetch = true>
inline uint64_t q4_k_isums_vnni(const BlockQ4_K & B, const void * const * act, int64_t b, __m256i * s8) {
    if (Fetch) prefetch<sizeof(BlockQ4_K)>(&B);
    __m512i S01, S23;
    const uint64_t mn = q4_k_scale_vectors(B, kScales0123, kScales4567, S01, S23);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i W[4];
    for (int c = 0; c < 4; ++c) {
        const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qs + 32 * c)));
        W[c] = _mm512_and_si512(_mm512_mask_srli_epi16(x, 0xffff0000u, x, 4), m4);
    }
    const __m512i z = _mm512_setzero_si512();
    for (int t = 0; t < NT; ++t) {
        const BlockQ8_K & A = static_cast<const BlockQ8_K *>(act[t])[b];
        __m512i P[4];
        for (int c = 0; c < 4; ++c) P[c] = _mm512_dpbusd_epi32(z, W[c], _mm512_loadu_si512(A.qs + 64 * c));
        const __m512i s = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(z, _mm512_packs_epi32(P[0], P[1]), S01),
                                              _mm512_packs_epi32(P[2], P[3]), S23);
        s8[t] = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    }
    return mn;
}

// The tiles' form of q4_k_isums_vnni, for activations read once for four rows. A 64-byte run of qs gives two
// chunks with no shift of half a register: its low nibbles are sub-blocks 2c and 2c + 2 (elements 64c .. +31 and
// 64c + 64 .. +31), its high nibbles 2c + 1 and 2c + 3, against the activations' 32-byte halves in that order
// (tile_activations).
template <int NT>
inline uint64_t q4_k_isums_tile(const BlockQ4_K & B, const __m512i (*x)[4], __m256i * s8) {
    __m512i S01, S23;
    const uint64_t mn = q4_k_scale_vectors(B, kTileScales0213, kTileScales4657, S01, S23);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i q0 = _mm512_loadu_si512(B.qs), q1 = _mm512_loadu_si512(B.qs + 64);
    const __m512i W[4] = {_mm512_and_si512(q0, m4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4),
                          _mm512_and_si512(q1, m4), _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4)};
    const __m512i z = _mm512_setzero_si512();
    for (int t = 0; t < NT; ++t) {
        __m512i P[4];
        for (int c = 0; c < 4; ++c) P[c] = _mm512_dpbusd_epi32(z, W[c], x[t][c]);
        const __m512i s = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(z, _mm512_packs_epi32(P[0], P[1]), S01),
                                              _mm512_packs_epi32(P[2], P[3]), S23);
        s8[t] = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    }
    return mn;
}

// A token's block in q4_k_isums_tile's order: elements [0, 32) and [64, 96), [32, 64) and [96, 128), then the same
// for the second half.
inline void tile_activations(const BlockQ8_K & A, __m512i * x) {
    for (int h = 0; h < 2; ++h) {
        const __m512i a = _mm512_loadu_si512(A.qs + 128 * h), b = _mm512_loadu_si512(A.qs + 128 * h + 64);
        x[2 * h] = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(1, 0, 1, 0));
        x[2 * h + 1] = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    }
}

// Per token, one super-block's integer sums by lanes, halfway reduced as fold_q4_k_run takes them.
template <int NT>
inline void q4_k_sums_vnni(const BlockQ4_K & B, const void * const * act, int64_t b, __m256i * h) {
    __m256i s8[NT];
    const uint64_t mn = q4_k_isums_vnni<NT>(B, act, b, s8);
    // Each min twice (it weighs the two 16-sums of its sub-block), as int16.
    const __m128i mv = _mm_cvtsi64_si128(static_cast<long long>(mn));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
    for (int t = 0; t < NT; ++t) {
        const BlockQ8_K & A = static_cast<const BlockQ8_K *>(act[t])[b];
        h[t] = _mm256_hadd_epi32(s8[t], _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(A.bsums)), mins));
    }
}

template <int NT>
void row_q4_k(const void * wv, const void * const * act, int64_t n, float * out) {
    q4_k_row<NT>(wv, act, n, out, [&](const BlockQ4_K & B, int64_t b, __m256i * h) { q4_k_sums_vnni<NT>(B, act, b, h); });
}

// The L2 fetch ahead of the 4-row tiles (below: q4_K, q6_K): besides the next tile into L1, the tile this many
// tiles past it into L2, about 16 KiB beyond the reads on the scale shape's 2560-wide rows (q4_K 5.6 KiB a tile,
// q6_K 8.2). From DRAM with two threads (the weights in 2 MiB pages, each variant in turn in one process, medians
// of 12 sweeps) q4_K 2560 -> 4096 by one token took 189-207 us without it, 167-181 with it; q6_K 292 -> 241.
constexpr size_t kQ4KTilesAheadL2 = 2;
constexpr size_t kQ6KTilesAheadL2 = 1;

// Four rows at once (a decode step's 4-row tiles). Their block b's sums reduce together, as a run's four blocks
// do, and the fold runs in the lanes of one vector, lane r row r: acc_r + (d_r * isum_r - dmin_r * imin_r), the
// twin's roundings, block after block, with no scalar chain. The mins' sums of the four rows are one vpmaddwd: the
// rows' 8 mins a 128-bit lane each, against the token's 8 sub-block sums (pairs of its 16-element sums) in every
// lane (|pair| <= 2 * 16 * 127, int16).
template <int NT>
void tile4_q4_k(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y, size_t ys) {
    const int64_t nb = n / kQK_K;
    // The rows are read block by block in turn, so the tile's stream is fetched ahead as one: the next tile's
    // bytes (rows 4-7), an even share each block, a tile ahead of the reads (and a later tile's into L2).
    const size_t ahead = (4 * ws / static_cast<size_t>(nb) + 63) / 64 * 64;
    const void * rows[NT];
    for (int t = 0; t < NT; ++t) rows[t] = act + t * as;
    const __m512i lane0 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    __m128 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm_setzero_ps();
    // Block b's integer sums of the four rows (interleaved with the next block's by the loop below).
    struct Sums {
        __m256i s8[4][NT];
        long long mn[4];
        int dd[4];  // in registers: a vector read back from stores of its parts stalls on store forwarding
    };
    auto sums = [&](int64_t b, Sums & S) {
        avx512::fetch_tile_share(w + 4 * ws + static_cast<size_t>(b) * ahead, ahead, kQ4KTilesAheadL2 * 4 * ws);
        __m512i x[NT][4];
        for (int t = 0; t < NT; ++t) tile_activations(static_cast<const BlockQ8_K *>(rows[t])[b], x[t]);
        for (int r = 0; r < 4; ++r) {
            const BlockQ4_K & B = reinterpret_cast<const BlockQ4_K *>(w + r * ws)[b];
            S.mn[r] = static_cast<long long>(q4_k_isums_tile<NT>(B, x, S.s8[r]));
            std::memcpy(&S.dd[r], &B.d, 4);
        }
    };
    auto fold = [&](int64_t b, const Sums & S) {
        const __m512i mins = _mm512_cvtepu8_epi16(_mm256_setr_epi64x(S.mn[0], S.mn[1], S.mn[2], S.mn[3]));
        // [d0 dmin0 d1 dmin1 d2 dmin2 d3 dmin3] (each block starts with its two f16 scales), then split.
        const __m256 wp = _mm256_cvtph_ps(_mm_setr_epi32(S.dd[0], S.dd[1], S.dd[2], S.dd[3]));
        const __m128 wd = _mm_shuffle_ps(_mm256_castps256_ps128(wp), _mm256_extractf128_ps(wp, 1), 0x88);
        const __m128 wmin = _mm_shuffle_ps(_mm256_castps256_ps128(wp), _mm256_extractf128_ps(wp, 1), 0xdd);
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_K & A = static_cast<const BlockQ8_K *>(rows[t])[b];
            // [isum0 isum1 isum2 isum3]: two rounds of pairwise sums, then the 128-bit halves.
            const __m256i v = _mm256_hadd_epi32(_mm256_hadd_epi32(S.s8[0][t], S.s8[1][t]), _mm256_hadd_epi32(S.s8[2][t], S.s8[3][t]));
            const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            const __m256i pairs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(A.bsums)),
                                                    _mm256_set1_epi16(1));
            __m512i m = _mm512_madd_epi16(mins, _mm512_broadcast_i32x4(_mm256_cvtepi32_epi16(pairs)));
            m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_BADC));
            m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_CDAB));  // lane r: imin_r in every dword
            const __m128i imin = _mm512_castsi512_si128(_mm512_permutexvar_epi32(lane0, m));
            const __m128 ad = _mm_set1_ps(A.d);
            const __m128 d = _mm_mul_ps(ad, wd), dmin = _mm_mul_ps(ad, wmin);
            acc[t] = _mm_add_ps(acc[t], _mm_sub_ps(_mm_mul_ps(d, _mm_cvtepi32_ps(isum)), _mm_mul_ps(dmin, _mm_cvtepi32_ps(imin))));
        }
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        Sums S0, S1;
        sums(b, S0);
        sums(b + 1, S1);
        fold(b, S0);
        fold(b + 1, S1);
    }
    if (b < nb) {
        Sums S0;
        sums(b, S0);
        fold(b, S0);
    }
    for (int t = 0; t < NT; ++t) {
        alignas(16) float out[4];
        _mm_store_ps(out, acc[t]);
        for (int r = 0; r < 4; ++r) y[t * ys + r] = out[r];
    }
}

// ---- q6_K x q8_K ----------------------------------------------------------------------------------------

// vpermw indices that spread q6_K's 16 int16 scales over the words of a _mm512_packs_epi32(P, Q) of two chunks'
// sums (P: elements 128h + 0..63, Q: 128h + 64..127 of half h; a dword lane covers 4 elements, a scale 16): in
// 128-bit lane L, words 0-3 take scale 8h + L and words 4-7 scale 8h + 4 + L.
struct Q6ScalePick {
    alignas(64) uint16_t words[32];
    constexpr explicit Q6ScalePick(int h) : words{} {
        for (int lane = 0; lane < 4; ++lane) {
            for (int w = 0; w < 8; ++w) words[8 * lane + w] = static_cast<uint16_t>(8 * h + lane + (w < 4 ? 0 : 4));
        }
    }
};
constexpr Q6ScalePick kQ6Scales0(0), kQ6Scales1(1);

// Per token, one super-block's integer sum as 8 int32 lanes (x[t]; their sum is the block's isum): scale * quant
// * a, less 32 * scale * block sums. A chunk's dword lanes (4 products of 0..63 by -127..127) fit int16, so two
// chunks' lanes pack into one register and one vpdpwssd applies their scales.
//  - Half h's 128 quants: ql's 64 bytes give the low 4 bits (low nibbles: elements 0..63, high: 64..127), qh's 32
//    bytes the high 2 (bit pairs 0-1, 2-3, 4-5, 6-7: elements 0..31, 32..63, 64..95, 96..127). qh is broadcast
//    to both halves of a register and each half masked to its pair and shifted to bits 4-5 by its own count (a
//    pair masked first cannot leak into the next byte), so one ternary-logic op joins it to the nibbles.
template <int NT, bool Fetch = true>
inline void q6_k_sums_vnni(const BlockQ6_K & B, const void * const * act, int64_t b, __m256i * x) {
    if (Fetch) prefetch<sizeof(BlockQ6_K)>(&B);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    // Pairs 0-1 | 2-3 to bits 4-5 (left by 4 | 2); pairs 4-5 | 6-7 (right by 0 | 2).
    const __m512i mask01 = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0c), 1);
    const __m512i mask23 = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8(static_cast<char>(0xc0)), 1);
    const __m512i left01 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i right23 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(B.scales)));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    const __m512i S[2] = {_mm512_permutexvar_epi16(_mm512_load_si512(kQ6Scales0.words), sc),
                          _mm512_permutexvar_epi16(_mm512_load_si512(kQ6Scales1.words), sc)};
    // -32 * scale, for the correction's one vpdpwssd a token (|32 * scale| <= 4096, int16).
    const __m256i neg_sc32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5));
    __m512i u[4];
    for (int h = 0; h < 2; ++h) {
        const __m512i X = _mm512_loadu_si512(B.ql + 64 * h);
        const __m512i Q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qh + 32 * h)));
        const __m512i H01 = _mm512_sllv_epi16(_mm512_and_si512(Q, mask01), left01);
        const __m512i H23 = _mm512_srlv_epi16(_mm512_and_si512(Q, mask23), right23);
        // (A & B) | C: ternary-logic table 0xEA.
        u[2 * h] = _mm512_ternarylogic_epi32(X, m4, H01, 0xEA);                            // elements 128h + 0..63
        u[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(X, 4), m4, H23, 0xEA);  // 128h + 64..127
    }
    const __m512i z = _mm512_setzero_si512();
    for (int t = 0; t < NT; ++t) {
        const BlockQ8_K & A = static_cast<const BlockQ8_K *>(act[t])[b];
        __m512i P[4];
        for (int k = 0; k < 4; ++k) P[k] = _mm512_dpbusd_epi32(z, u[k], _mm512_loadu_si512(A.qs + 64 * k));
        const __m512i s = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(z, _mm512_packs_epi32(P[0], P[1]), S[0]),
                                              _mm512_packs_epi32(P[2], P[3]), S[1]);
        // Less 32 * scale * the 16-element sums, pairwise into the lanes (|lane| < 2^31: exact).
        x[t] = _mm256_dpwssd_epi32(_mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)),
                                   _mm256_loadu_si256(reinterpret_cast<const __m256i *>(A.bsums)), neg_sc32);
    }
}

template <int NT>
void row_q6_k(const void * wv, const void * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const BlockQ6_K *>(wv);
    float acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        __m256i x[NT];
        q6_k_sums_vnni<NT>(w[b], act, b, x);
        const float wd = h2f(w[b].d);
        for (int t = 0; t < NT; ++t) acc[t] = fold_k(acc[t], wd, static_cast<const BlockQ8_K *>(act[t])[b].d, sum8(x[t]));
    }
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// Four rows at once, as tile4_q4_k: block b's sums of the four rows reduce together and fold in the lanes of one
// vector (lane r: row r, acc_r + (a_d * w_d_r) * isum_r, the twin's roundings).
template <int NT>
void tile4_q6_k(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y, size_t ys) {
    const int64_t nb = n / kQK_K;
    const size_t ahead = (4 * ws / static_cast<size_t>(nb) + 63) / 64 * 64;  // as tile4_q4_k
    const void * rows[NT];
    for (int t = 0; t < NT; ++t) rows[t] = act + t * as;
    __m128 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        avx512::fetch_tile_share(w + 4 * ws + static_cast<size_t>(b) * ahead, ahead, kQ6KTilesAheadL2 * 4 * ws);
        __m256i x[4][NT];
        short dh[4];  // in registers, as in tile4_q4_k
        for (int r = 0; r < 4; ++r) {
            const BlockQ6_K & B = reinterpret_cast<const BlockQ6_K *>(w + r * ws)[b];
            q6_k_sums_vnni<NT, false>(B, rows, b, x[r]);
            dh[r] = static_cast<short>(B.d);
        }
        const __m128 wd = _mm_cvtph_ps(_mm_setr_epi16(dh[0], dh[1], dh[2], dh[3], 0, 0, 0, 0));
        for (int t = 0; t < NT; ++t) {
            const float ad = static_cast<const BlockQ8_K *>(rows[t])[b].d;
            // [isum0 isum1 isum2 isum3]: two rounds of pairwise sums, then the 128-bit halves.
            const __m256i v = _mm256_hadd_epi32(_mm256_hadd_epi32(x[0][t], x[1][t]), _mm256_hadd_epi32(x[2][t], x[3][t]));
            const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(ad), wd), _mm_cvtepi32_ps(isum)));
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(16) float out[4];
        _mm_store_ps(out, acc[t]);
        for (int r = 0; r < 4; ++r) y[t * ys + r] = out[r];
    }
}

using Q4KEntry = FourRowEntry<Entry<row_q4_k<1>, row_q4_k<2>, row_q4_k<3>, row_q4_k<4>>, tile4_q4_k<1>, tile4_q4_k<2>,
                              tile4_q4_k<3>, tile4_q4_k<4>>;
using Q6KEntry = FourRowEntry<Entry<row_q6_k<1>, row_q6_k<2>, row_q6_k<3>, row_q6_k<4>>, tile4_q6_k<1>, tile4_q6_k<2>,
                              tile4_q6_k<3>, tile4_q6_k<4>>;

// ---- q5_0 x q8_0 ----------------------------------------------------------------------------------------

template <int NT>
void row_q5_0(const void * wv, const void * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const BlockQ5_0 *>(wv);
    float acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i sixteen = _mm256_set1_epi8(16);
    for (int64_t b = 0; b < n / kQK; ++b) {
        const BlockQ5_0 & B = w[b];
        if ((b & 1) == 0) prefetch<64>(&B);  // 44 bytes a pair: a line every other block covers the stream
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B.qs));
        const __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m4)),
                                                    _mm_and_si128(_mm_srli_epi16(qs, 4), m4), 1);
        uint32_t qh;
        std::memcpy(&qh, B.qh, 4);
        const float wd = h2f(B.d);
        const __m256i u = _mm256_or_si256(nib, _mm256_maskz_mov_epi8(qh, sixteen));  // q in 0..31
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_0 & A = static_cast<const BlockQ8_0 *>(act[t])[b];
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(A.qs));
            const __m256i z = _mm256_setzero_si256();
            const __m256i d = _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, a), _mm256_dpbusd_epi32(z, sixteen, a));
            acc[t] = fold_0(acc[t], wd, h2f(A.d), sum8(d));
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// The unsigned quants q (0..31) of a row's blocks b and b + 1 (Second false: b + 1 absent, zeros), in one register:
// each block's 16 bytes broadcast to two 128-bit lanes, the high nibbles taken in the second, and the fifth bits of
// both blocks joined into one mask that adds 16 where they are set.
template <bool Second>
inline __m512i q5_0_pair(const BlockQ5_0 * w) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w[0].qs));
    const __m128i q1 = Second ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(w[1].qs)) : _mm_setzero_si128();
    const __m512i q = _mm512_shuffle_i64x2(_mm512_castsi128_si512(q0), _mm512_castsi128_si512(q1), 0x00);
    const __m512i nib = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xff00ff00u, q, 4), _mm512_set1_epi8(0x0f));
    uint32_t h0, h1 = 0;
    std::memcpy(&h0, w[0].qh, 4);
    if (Second) std::memcpy(&h1, w[1].qh, 4);
    const __mmask64 fifth = _cvtu64_mask64(static_cast<uint64_t>(h0) | (static_cast<uint64_t>(h1) << 32));
    return _mm512_mask_add_epi8(nib, fifth, nib, _mm512_set1_epi8(16));
}

// Two activation blocks' quants side by side (Second false: the second absent, zeros).
template <bool Second>
inline __m512i q8_0_pair(const BlockQ8_0 * a) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a[0].qs));
    if (!Second) return _mm512_zextsi256_si512(lo);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256(reinterpret_cast<const __m256i *>(a[1].qs)), 1);
}

// The f16 scales of four rows' blocks b and b + 1 (Second false: zeros), as f32: lanes 0-3 block b, 4-7 block b + 1.
// A row's pair starts with block b's scale (word 0) and holds block b + 1's at byte 22 (word 11): one 32-byte load
// a row (of the last block alone, its 22 bytes), then the words picked by two two-source permutations and joined
// by one unpack (eight scalar loads inserted one by one took about a fifth of the tile's instructions).
template <bool Second>
inline __m256 four_row_scales(const uint8_t * w, size_t ws, int64_t b) {
    __m256i Y[4];
    for (int r = 0; r < 4; ++r) {
        const auto * p = reinterpret_cast<const BlockQ5_0 *>(w + r * ws) + b;
        Y[r] = Second ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)) : _mm256_maskz_loadu_epi8(0x3fffff, p);
    }
    const __m256i pick = _mm256_setr_epi16(0, 16, 11, 27, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i d01 = _mm256_permutex2var_epi16(Y[0], pick, Y[1]);  // words: row 0 and 1 of block b, of b + 1
    const __m256i d23 = _mm256_permutex2var_epi16(Y[2], pick, Y[3]);
    return _mm256_cvtph_ps(_mm_unpacklo_epi32(_mm256_castsi256_si128(d01), _mm256_castsi256_si128(d23)));
}

// Four rows at once (on the scale shape the hyper-connection and expert-down products, 320 and 640 wide: four rows
// are one contiguous stream; tile4_q5_0 below fetches wide rows otherwise). A row alone is a chain of dependent
// folds, one per block; four rows in the lanes of one vector fold together (lane r: row r, the twin's roundings:
// (d_w * d_a) * isum for both blocks of a pair in one 256-bit vector, then the two additions in block order), and
// each pair of blocks is decoded once per row for every token.
constexpr int64_t kNarrowRow = kGemmNarrowRow;
// The narrow tile's stream is also fetched this far ahead into L2 (from DRAM, two threads, 2 MiB pages, variants in
// turn in one process: 640 -> 2560 by one token 51-57 us without, 44-48 with 16 KiB, 42-49 with 8 KiB; 320 ->
// 10240 85-101 either way).
constexpr size_t kNarrowAheadL2 = 16384;

// One pair of blocks (Second false: the last block alone). Always inlined: GCC made it a call per pair for one
// token, 10-15 % slower than the loop written out.
template <int NT, bool Second, bool Wide>
[[gnu::always_inline]] inline void tile4_q5_0_pair(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t b,
                                                   size_t ahead, __m128 * acc) {
    const __m512i sixteen = _mm512_set1_epi8(16);
    if (Wide) {  // the next tile's rows (one stream), an even share each pair, a tile ahead of the reads
        const uint8_t * next = w + 4 * ws + static_cast<size_t>(b / 2) * ahead;
        for (size_t off = 0; off < ahead; off += 64) _mm_prefetch(reinterpret_cast<const char *>(next + off), _MM_HINT_T0);
    }
    __m512i u[4];
    for (int r = 0; r < 4; ++r) {
        const auto * row = reinterpret_cast<const BlockQ5_0 *>(w + r * ws) + b;
        if (!Wide) {  // a pair: 44 bytes; and into L2 further on, as the wide tiles' later tile
            _mm_prefetch(reinterpret_cast<const char *>(row) + kPrefetchBytes, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char *>(row) + kNarrowAheadL2, _MM_HINT_T1);
        }
        u[r] = q5_0_pair<Second>(row);
    }
    const __m256 dw = four_row_scales<Second>(w, ws, b);
    for (int t = 0; t < NT; ++t) {
        const BlockQ8_0 * a = reinterpret_cast<const BlockQ8_0 *>(act + t * as) + b;
        const __m512i x = q8_0_pair<Second>(a);
        const __m512i z = _mm512_setzero_si512();
        // Each row's sums start from -16 * sum(a), lane by lane: sum((q - 16) * a) with no subtraction a row.
        const __m512i neg = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, sixteen, x));
        const __m256i sums = avx512::four_row_sums(_mm512_dpbusd_epi32(neg, u[0], x), _mm512_dpbusd_epi32(neg, u[1], x),
                                                   _mm512_dpbusd_epi32(neg, u[2], x), _mm512_dpbusd_epi32(neg, u[3], x));
        // [a_d of block b x 4, of b + 1 x 4] (zeros without the second), converted in one step.
        const __m128i ah = _mm_unpacklo_epi64(_mm_set1_epi16(static_cast<short>(a[0].d)),
                                              Second ? _mm_set1_epi16(static_cast<short>(a[1].d)) : _mm_setzero_si128());
        const __m256 da = _mm256_cvtph_ps(ah);
        const __m256 prod = _mm256_mul_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(sums));
        acc[t] = _mm_add_ps(acc[t], _mm256_castps256_ps128(prod));
        if (Second) acc[t] = _mm_add_ps(acc[t], _mm256_extractf128_ps(prod, 1));
    }
}

template <int NT, bool Wide>
void tile4_q5_0_rows(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y, size_t ys) {
    const int64_t nb = n / kQK;
    const size_t ahead = (4 * ws / static_cast<size_t>((nb + 1) / 2) + 63) / 64 * 64;  // as tile4_q4_k
    __m128 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) tile4_q5_0_pair<NT, true, Wide>(w, ws, act, as, b, ahead, acc);
    if (b < nb) tile4_q5_0_pair<NT, false, Wide>(w, ws, act, as, b, ahead, acc);
    for (int t = 0; t < NT; ++t) {
        alignas(16) float out[4];
        _mm_store_ps(out, acc[t]);
        for (int r = 0; r < 4; ++r) y[t * ys + r] = out[r];
    }
}

// Narrow rows: four rows are one contiguous stream, each row fetched ahead of itself. Wide rows: four streams,
// read block by block in turn, which the prefetchers follow badly, so the next tile is fetched as one stream (as
// tile4_q4_k does).
template <int NT>
void tile4_q5_0(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y, size_t ys) {
    if (n <= kNarrowRow) return tile4_q5_0_rows<NT, false>(w, ws, act, as, n, y, ys);
    tile4_q5_0_rows<NT, true>(w, ws, act, as, n, y, ys);
}

// q5_0's entry: the row kernels, and four rows at once.
using Q5_0Entry = FourRowEntry<Entry<row_q5_0<1>, row_q5_0<2>, row_q5_0<3>, row_q5_0<4>>, tile4_q5_0<1>, tile4_q5_0<2>,
                               tile4_q5_0<3>, tile4_q5_0<4>>;

// ---- the q8_K activation quantiser ----------------------------------------------------------------------

// The twin's bytes (kernels_quant_scalar.cpp, quantize_row_q8_K): the first element of largest magnitude gives the
// scale (its sign kept), quants round to nearest even (the conversion's default mode, as nearbyint) and are capped
// at 127, block sums are exact.
void quantize_row_q8_k(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ8_K *>(dst);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
        __m512 amax16 = _mm512_setzero_ps();
        for (int j = 0; j < kQK_K; j += 16) amax16 = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)), amax16);
        const float amax = _mm512_reduce_max_ps(amax16);
        if (!(amax > 0.0f)) {
            std::memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0;
        for (int j = 0; j < kQK_K; j += 16) {
            const __mmask16 at = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (at != 0) {
                max = x[j + __builtin_ctz(at)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int g = 0; g < kQK_K / 16; ++g) {
            const __m512i v = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * g))),
                                               _mm512_set1_epi32(127));
            _mm_storeu_si128(reinterpret_cast<__m128i *>(y[b].qs + 16 * g), _mm512_cvtepi32_epi8(v));
            y[b].bsums[g] = static_cast<int16_t>(_mm512_reduce_add_epi32(v));
        }
        y[b].d = 1.0f / iscale;
    }
}

// ---- the q8_0 activation quantiser of q5_0 (and q4_0, iq4_nl) ----------------------------------------------

// The twin's bytes (tensor::quantize_row, ggml's reference): d = max|x| / 127, its f16 stored, and each quant
// lround(x * (1 / d)): the product rounded to float, then to the nearest integer with ties away from zero (a
// truncation, and one step away from zero where the exact remainder is at least one half).
void quantize_row_q8_0_ties_away(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ8_0 *>(dst);
    const __m512 sign = _mm512_set1_ps(-0.0f), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
        const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v[0]), _mm512_andnot_ps(sign, v[1])));
        const float d = amax / 127.0f;
        const float inv = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = tensor::f32_to_f16(d);
        for (int h = 0; h < 2; ++h) {
            const __m512 p = _mm512_mul_ps(v[h], _mm512_set1_ps(inv));
            const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 away = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_sub_ps(p, t)), half, _CMP_GE_OQ);
            const __m512 r = _mm512_mask_add_ps(t, away, t, _mm512_or_ps(_mm512_and_ps(p, sign), one));
            _mm_storeu_si128(reinterpret_cast<__m128i *>(y[b].qs + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
        }
    }
}

}  // namespace

void add_int8_entries_avx512(TypeKernels * table) {
    set_four_row_entry<Q4KEntry>(table, tensor::ElemType::Q4_K);
    set_four_row_entry<Q6KEntry>(table, tensor::ElemType::Q6_K);
    set_four_row_entry<Q5_0Entry>(table, tensor::ElemType::Q5_0);
    set_q8_k_quantizer(table, quantize_row_q8_k);
    set_q8_0_quantizer(table, quantize_row_q8_0_ties_away);
    add_int8_gemm_avx512(table);
    add_int8_rows16_avx512(table);
}

}  // namespace offgrid::ops::cpu::quant

#else

namespace offgrid::ops::cpu::quant {
void add_int8_entries_avx512(TypeKernels *) {}
}  // namespace offgrid::ops::cpu::quant

#endif
