// AVX2 kernels of the 8-bit-activation path (OFFGRID_QUANT_ACT=int8; kernels_quant_common.h): q4_K, q5_K and q6_K
// against q8_K activations, q5_0 and Q8_0 (its int8 variant) against q8_0, and the q8_K and q8_0 quantisers. Each
// is bit-identical to its scalar twin (kernels_quant_scalar.cpp; Q8_0's in kernels_float_scalar.cpp): the integer
// sums of a block are exact whatever the grouping, and the float part is the twin's own fold, block after block.
//  - `vpmaddubsw` multiplies unsigned weight bytes by signed activation bytes and adds neighbours into int16
//    (exact: |2 * 63 * 128| < 2^15); the int16 lanes of several sub-blocks are added pairwise while the bound
//    allows, then `vpmaddwd` applies the scales and widens to int32. 256-bit integer multiplies take one port at
//    half rate on CPUs that split 256-bit operations (Zen 1), so the kernels save multiplies: q4_K needs 11 a
//    super-block (the int16 path 32: it widens the weights, scales them, then multiplies).
//  - q6_K stores q - 32 (q in 0..63): sum(scale * (q - 32) * a) = sum(scale * q * a) - 32 * sum(scale * bsum16).
//  - q5_0's signed values v = q - 16 go in as |v| against a * sign(v) (exact: q8_0 activations lie in
//    -127..127).
// One call computes one weight row against up to 4 token rows (the row's blocks are decoded once for all of
// them); dot_tile runs its rows one after another, so each row is one sequential stream, fetched ahead, except
// the narrow rows of q5_0 and Q8_0, four at once (tile4_32).
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <utility>

#include "ops/cpu/kernels_quant_int8_avx2.h"
#include "ops/cpu/kernels_quant_int8_entries.h"

namespace offgrid::ops::cpu::quant {

namespace {

constexpr int kPrefetchBytes = 1024;  // how far ahead in the row's stream

template <size_t Bytes>
inline void prefetch(const void * p) {
    for (size_t off = 0; off < Bytes; off += 64) {
        _mm_prefetch(static_cast<const char *>(p) + kPrefetchBytes + off, _MM_HINT_T0);
    }
}

// And into L2 further on: a block's lines 16 KiB ahead (q4_K and q6_K rows, q5_0's four-row tile; scale Q4_K_M,
// int8, Zen 3: a decode step 158-160 -> 150-153 ms in three alternations; bench_quant_batch q4_K 2560 -> 16384 by
// one token from DRAM, two threads, 1264-1492 -> 1115-1168 us).
constexpr size_t kAheadL2Bytes = 16384;
template <size_t Bytes>
inline void prefetch_l2(const void * p) {
    for (size_t off = 0; off < Bytes; off += 64) {
        _mm_prefetch(static_cast<const char *>(p) + kAheadL2Bytes + off, _MM_HINT_T1);
    }
}

inline __m256i load256(const void * p) { return _mm256_loadu_si256(static_cast<const __m256i *>(p)); }

inline int32_t sum8(__m256i v) {
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
}

// The byte shuffle that gives, from 8 int16 values in each 128-bit lane, int16 lanes 0-3 value a and 4-7 value b
// of the low 128 bits, c and d of the high 128 bits.
inline __m256i pick4(int a, int b, int c, int d) {
    auto w = [](int k) { return static_cast<char>(k); };
    return _mm256_setr_epi8(w(2 * a), w(2 * a + 1), w(2 * a), w(2 * a + 1), w(2 * a), w(2 * a + 1), w(2 * a), w(2 * a + 1),
                            w(2 * b), w(2 * b + 1), w(2 * b), w(2 * b + 1), w(2 * b), w(2 * b + 1), w(2 * b), w(2 * b + 1),
                            w(2 * c), w(2 * c + 1), w(2 * c), w(2 * c + 1), w(2 * c), w(2 * c + 1), w(2 * c), w(2 * c + 1),
                            w(2 * d), w(2 * d + 1), w(2 * d), w(2 * d + 1), w(2 * d), w(2 * d + 1), w(2 * d), w(2 * d + 1));
}

// Of two vectors of 16 int16 lanes, the 64-bit halves added: [x.0 + x.1 | y.0 + y.1] per 128-bit lane, so each
// int16 lane sums two lanes of one input.
inline __m256i pair_sums(__m256i x, __m256i y) {
    return _mm256_add_epi16(_mm256_unpacklo_epi64(x, y), _mm256_unpackhi_epi64(x, y));
}

// ---- q4_K x q8_K ----------------------------------------------------------------------------------------

// Sums of sub-blocks in int16 lanes, 4 sub-blocks to a vector: from the vpmaddubsw pairs p0..p3 of 4 sub-blocks
// (16 int16 lanes each, |lane| <= 2 * 15 * 127), the vector whose 32-bit lanes k and k + 4 hold two lanes of
// sub-block k each (|lane| <= 4 * 2 * 15 * 127 < 2^15, so exact): one vpmaddwd then scales 4 sub-blocks at once.
inline __m256i sub_block_sums4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    // [p0 | p1] per 128-bit lane, each sub-block in 4 int16 lanes.
    const __m256i x01 = pair_sums(p0, p1), x23 = pair_sums(p2, p3);
    // 32-bit lanes [x01.0 x01.2 x23.0 x23.2] + [x01.1 x01.3 x23.1 x23.3]: sub-blocks 0, 1, 2, 3 in 2 int16 lanes.
    const __m256 a = _mm256_castsi256_ps(x01), b = _mm256_castsi256_ps(x23);
    return _mm256_add_epi16(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)),
                            _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xdd)));
}

// Per token, one super-block's integer sums folded halfway: hadd(s, mm) = [s01 s23 m01 m23 | s45 s67 m45 m67]
// (s: scale * quant * a by lanes, mm: min * block sums by lanes). Block is q4_K or q5_K: q5_K's quants take
// sub-block j's fifth bit from bit j of qh byte l (element l of the sub-block) as 16; at most 31, so a sub-block's
// four int16 lanes stay exact (4 * 2 * 31 * 127 < 2^15).
template <int NT, class Block>
inline void q4_k_sums(const Block & B, const void * const * act, int64_t b, __m256i * h) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    prefetch<sizeof(Block)>(&B);
    prefetch_l2<sizeof(Block)>(&B);
    uint64_t sc, mn;
    quant::k4_scales_mins_u64(B.scales, sc, mn);
    // Scales of sub-blocks 0-3 and 4-7 in the lanes sub_block_sums4 leaves them: [s0 s0 s1 s1 s2 s2 s3 s3] per
    // 128-bit lane.
    const __m128i sv = _mm_cvtsi64_si128(static_cast<long long>(sc));
    const __m128i s2 = _mm_unpacklo_epi8(sv, sv);
    const __m256i S0 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(s2));
    const __m256i S1 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_srli_si128(s2, 8)));
    // Each min twice (it weighs the two 16-sums of its sub-block), as int16.
    const __m128i mv = _mm_cvtsi64_si128(static_cast<long long>(mn));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
    // Bytes 32c..32c+31: low nibbles are sub-block 2c, high nibbles 2c + 1.
    __m256i v[8];
    for (int c = 0; c < 4; ++c) {
        const __m256i x = load256(B.qs + 32 * c);
        v[2 * c] = _mm256_and_si256(x, m4);
        v[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    }
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        // Bit j of each byte to bit 4 (a 16-bit shift moves no masked bit across bytes).
        const __m256i qh = load256(B.qh), m16 = _mm256_set1_epi8(0x10);
        for (int j = 0; j < 8; ++j) {
            const __m256i at4 = j < 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
            v[j] = _mm256_or_si256(v[j], _mm256_and_si256(at4, m16));
        }
    }
    for (int t = 0; t < NT; ++t) {
        const BlockQ8_K & A = static_cast<const BlockQ8_K *>(act[t])[b];
        __m256i p[8];
        for (int j = 0; j < 8; ++j) p[j] = _mm256_maddubs_epi16(v[j], load256(A.qs + 32 * j));
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(sub_block_sums4(p[0], p[1], p[2], p[3]), S0),
                                           _mm256_madd_epi16(sub_block_sums4(p[4], p[5], p[6], p[7]), S1));
        h[t] = _mm256_hadd_epi32(s, _mm256_madd_epi16(load256(A.bsums), mins));
    }
}

// The row in runs of up to 4 super-blocks (q4_k_row, kernels_quant_int8_avx2.h).
template <int NT>
void row_q4_k(const void * wv, const void * const * act, int64_t n, float * out) {
    q4_k_row<NT>(wv, act, n, out, [&](const BlockQ4_K & B, int64_t b, __m256i * h) { q4_k_sums<NT>(B, act, b, h); });
}

// q5_K: the same row with the fifth bits (its twin, dot_q5_k, has q4_K's sums and fold).
template <int NT>
void row_q5_k(const void * wv, const void * const * act, int64_t n, float * out) {
    q4_k_row<NT, BlockQ5_K>(wv, act, n, out,
                            [&](const BlockQ5_K & B, int64_t b, __m256i * h) { q4_k_sums<NT>(B, act, b, h); });
}

// ---- q6_K x q8_K ----------------------------------------------------------------------------------------

// Groups of 32 in pairs: the vpmaddubsw pairs of two groups (|lane| <= 2 * 63 * 127) are added two lanes to one
// (pair_sums; |lane| <= 32004 < 2^15, exact), so one vpmaddwd scales both groups' 16-element halves.
// Per token, one super-block's integer sum by lanes: scale * quant * a, less 32 * scale * block sums.
template <int NT>
inline void q6_k_sums(const BlockQ6_K & B, const void * const * act, int64_t b, __m256i * x) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x30);
    prefetch<sizeof(BlockQ6_K)>(&B);
    prefetch_l2<sizeof(BlockQ6_K)>(&B);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B.scales));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // for the correction against the 16 block sums
    // Group g of half h (elements 128h + 32g .. +31) has scales 8h + 2g (first 16) and 8h + 2g + 1; the pair of
    // groups g, g + 1 (g = 0, 2) takes [2g x4, 2g+2 x4] in the low 128 bits and [2g+1 x4, 2g+3 x4] in the high.
    __m256i u[8], S[4];
    for (int h = 0; h < 2; ++h) {
        const __m256i x0 = load256(B.ql + 64 * h), x1 = load256(B.ql + 64 * h + 32), q = load256(B.qh + 32 * h);
        u[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(x0, m4), _mm256_and_si256(_mm256_slli_epi16(q, 4), m3));
        u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(x1, m4), _mm256_and_si256(_mm256_slli_epi16(q, 2), m3));
        u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x0, 4), m4), _mm256_and_si256(q, m3));
        u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(x1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(q, 2), m3));
        const __m256i half = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h == 0 ? sc8 : _mm_srli_si128(sc8, 8)));
        S[2 * h] = _mm256_shuffle_epi8(half, pick4(0, 2, 1, 3));
        S[2 * h + 1] = _mm256_shuffle_epi8(half, pick4(4, 6, 5, 7));
    }
    for (int t = 0; t < NT; ++t) {
        const BlockQ8_K & A = static_cast<const BlockQ8_K *>(act[t])[b];
        __m256i s = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
            const __m256i p0 = _mm256_maddubs_epi16(u[2 * k], load256(A.qs + 64 * k));
            const __m256i p1 = _mm256_maddubs_epi16(u[2 * k + 1], load256(A.qs + 64 * k + 32));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(pair_sums(p0, p1), S[k]));
        }
        // |32 * lane| <= 32 * 2 * 2032 * 128 < 2^31: exact.
        x[t] = _mm256_sub_epi32(s, _mm256_slli_epi32(_mm256_madd_epi16(load256(A.bsums), sc16), 5));
    }
}

// The twin's contract (dot_q6_k): one integer sum a super-block, folded with d = a_d * w_d. As for q4_K, a run of
// M <= 4 super-blocks reduces its sums together and forms the products in a vector; the additions stay in order.
template <int NT, int M>
inline void run_q6_k(const BlockQ6_K * w, const void * const * act, int64_t b, float * acc) {
    __m256i x[4][NT];
    run_sums<NT, M>(x, [&](int i, __m256i * out) { q6_k_sums<NT>(w[b + i], act, b + i, out); });
    alignas(16) uint16_t dh[8] = {};
    for (int i = 0; i < M; ++i) dh[i] = w[b + i].d;
    const __m128 wd = _mm256_castps256_ps128(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i *>(dh))));
    for (int t = 0; t < NT; ++t) {
        const auto * A = static_cast<const BlockQ8_K *>(act[t]) + b;
        alignas(16) float ad[4] = {};
        for (int i = 0; i < M; ++i) ad[i] = A[i].d;
        // [x0 x1 x2 x3] from the four vectors' lanes: two rounds of pairwise sums, then the 128-bit halves.
        const __m256i v = _mm256_hadd_epi32(_mm256_hadd_epi32(x[0][t], x[1][t]), _mm256_hadd_epi32(x[2][t], x[3][t]));
        const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        alignas(16) float r[4];
        _mm_store_ps(r, _mm_mul_ps(_mm_mul_ps(_mm_load_ps(ad), wd), _mm_cvtepi32_ps(isum)));
        float s = acc[t];
        for (int i = 0; i < M; ++i) s = s + r[i];
        acc[t] = s;
    }
}

template <int NT>
void row_q6_k(const void * wv, const void * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const BlockQ6_K *>(wv);
    float acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    in_runs<4>(n / kQK_K, [&]<int M>(int64_t b) { run_q6_k<NT, M>(w, act, b, acc); });
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// ---- q5_0 x q8_0 ----------------------------------------------------------------------------------------

// The sums of 8 blocks' vpmaddubsw pairs (16 int16 lanes each, |lane| <= 2 * 16 * 127) as one vector of int32,
// lane i the sum of p[i]: pairs of lanes added in int16 three times (|lane| <= 32512 < 2^15, exact), then the two
// 128-bit halves in int32.
inline __m256i block_sums8(const __m256i * p) {
    const __m256i x01 = pair_sums(p[0], p[1]), x23 = pair_sums(p[2], p[3]);
    const __m256i x45 = pair_sums(p[4], p[5]), x67 = pair_sums(p[6], p[7]);
    auto quads = [](__m256i a, __m256i b) {  // [a.0 a.2 b.0 b.2] + [a.1 a.3 b.1 b.3] in 32-bit lanes
        const __m256 fa = _mm256_castsi256_ps(a), fb = _mm256_castsi256_ps(b);
        return _mm256_add_epi16(_mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0x88)),
                                _mm256_castps_si256(_mm256_shuffle_ps(fa, fb, 0xdd)));
    };
    const __m256i h = _mm256_hadd_epi16(quads(x01, x23), quads(x45, x67));  // [0 1 2 3 4 5 6 7] per 128-bit lane
    return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(h)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256(h, 1)));
}

// m <= 8 f16 scales at a byte stride, as f32 (0 after the m-th).
// Gathered in general registers (four to a 64-bit word): a byte array written and read back as one vector
// stalls on store forwarding.
inline __m256 scales8(const uint8_t * first, size_t stride, int m) {
    auto h = [&](int i) -> uint64_t {
        if (i >= m) return 0;
        uint16_t v;
        std::memcpy(&v, first + i * stride, 2);
        return v;
    };
    const uint64_t lo = h(0) | h(1) << 16 | h(2) << 32 | h(3) << 48;
    const uint64_t hi = h(4) | h(5) << 16 | h(6) << 32 | h(7) << 48;
    return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
}

// Blocks of 32 against q8_0 activations (q5_0, and Q8_0's int8 variant): a Dot says how a weight block meets a
// token's 32 bytes; the rest (the runs of 8 blocks, the four-row tile, the twin's fold) is shared.
//  - prepare(B): the block's weights as the row kernels take them; lanes(W, a): the integer dot with one token as a
//    vector whose lanes sum to it; sums8(x): the sums of 8 such vectors, in block order.
//  - tile_weights(B) / tile_token(a) / tile_lanes(W, T): the same for the four-row tile, whose rows share what a
//    token needs once per block.
//  - kEvery: a block's line is fetched every kEvery blocks; kRunL2: the row kernels also fetch into L2.

// q5_0: the signed values v = q - 16 go in as |v| against a * sign(v) in the rows (pairs at most 2 * 16 * 127, so
// 8 blocks' lanes add in int16: block_sums8); in the tile, unsigned q against a, less 16 * sum(a) once for the four
// rows (|lane| <= 2 * 31 * 127 + 2 * 16 * 127 < 2^15, exact).
struct Q50Dot {
    using Block = BlockQ5_0;
    static constexpr int kEvery = 2;  // 44 bytes a pair: a line every other block covers the stream
    static constexpr bool kRunL2 = false;
    struct W {
        __m256i mag, v;
    };
    static W prepare(const Block & B) {
        const __m256i v = q5_0_values(B);
        return {_mm256_sign_epi8(v, v), v};
    }
    static __m256i lanes(const W & w, __m256i a) { return _mm256_maddubs_epi16(w.mag, _mm256_sign_epi8(a, w.v)); }
    static __m256i sums8(const __m256i * x) { return block_sums8(x); }
    static __m256i tile_weights(const Block & B) { return q5_0_unsigned(B); }
    struct T {
        __m256i a, off;
    };
    static T tile_token(__m256i a) { return {a, _mm256_maddubs_epi16(_mm256_set1_epi8(16), a)}; }
    static __m256i tile_lanes(__m256i u, const T & t) {
        return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(u, t.a), t.off), _mm256_set1_epi16(1));
    }
};

// Q8_0's int8 variant, whose twin (kernels_float_scalar.cpp, vec_dot_q8_0) folds as q5_0's: signed weights go in
// as |w| against a * sign(w), and a `vpmaddubsw` pair (at most 2 * 128 * 127 < 2^15: activations lie in
// -127..127) is widened at once, as two pairs would not fit.
inline __m256i q8_0_lanes(__m256i w_abs, __m256i w, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a, w)), _mm256_set1_epi16(1));
}

// [sum of x0, ..., sum of x7] of eight vectors of 8 int32 lanes.
inline __m256i eight_sums(const __m256i * x) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(x[0], x[1]), _mm256_hadd_epi32(x[2], x[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(x[4], x[5]), _mm256_hadd_epi32(x[6], x[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

struct Q80Dot {
    using Block = BlockQ8_0;
    static constexpr int kEvery = 1;  // 34 bytes a block: a line each block keeps ahead of the stream
    static constexpr bool kRunL2 = true;
    struct W {
        __m256i abs, q;
    };
    static W prepare(const Block & B) {
        const __m256i q = load256(B.qs);
        return {_mm256_sign_epi8(q, q), q};
    }
    static __m256i lanes(const W & w, __m256i a) { return q8_0_lanes(w.abs, w.q, a); }
    static __m256i sums8(const __m256i * x) { return eight_sums(x); }
    static W tile_weights(const Block & B) { return prepare(B); }
    using T = __m256i;
    static T tile_token(__m256i a) { return a; }
    static __m256i tile_lanes(const W & w, const T & a) { return lanes(w, a); }
};

// A run of M <= 8 blocks from block b on: its integer sums go to one vector (Dot::sums8), and the twin's fold
// (kernels_quant_common.h, fold_q8_0) takes them in block order; the products d * isum are formed in a vector (the
// same roundings), the additions one after another. M is a template argument so that every sum stays in a register.
template <class Dot, int NT, int M>
inline void run_32(const typename Dot::Block * w, const void * const * act, int64_t b, float * acc) {
    __m256i isum[NT][8];
    for (int i = 0; i < 8; ++i) {
        if (i >= M) {
            for (int t = 0; t < NT; ++t) isum[t][i] = _mm256_setzero_si256();
            continue;
        }
        const typename Dot::Block & B = w[b + i];
        if (i % Dot::kEvery == 0) {
            prefetch<64>(&B);
            if constexpr (Dot::kRunL2) prefetch_l2<64>(&B);
        }
        const typename Dot::W wv = Dot::prepare(B);
        for (int t = 0; t < NT; ++t) {
            isum[t][i] = Dot::lanes(wv, load256(static_cast<const BlockQ8_0 *>(act[t])[b + i].qs));
        }
    }
    const __m256 wd = scales8(reinterpret_cast<const uint8_t *>(&w[b].d), sizeof(typename Dot::Block), M);
    for (int t = 0; t < NT; ++t) {
        const auto * a = static_cast<const BlockQ8_0 *>(act[t]) + b;
        const __m256 d = _mm256_mul_ps(wd, scales8(reinterpret_cast<const uint8_t *>(&a->d), sizeof(BlockQ8_0), M));
        alignas(32) float prod[8];
        _mm256_store_ps(prod, _mm256_mul_ps(d, _mm256_cvtepi32_ps(Dot::sums8(isum[t]))));
        float s = acc[t];
        for (int i = 0; i < M; ++i) s = s + prod[i];
        acc[t] = s;
    }
}

template <class Dot, int NT>
void row_32(const void * wv, const void * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const typename Dot::Block *>(wv);
    float acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    in_runs<8>(n / kQK, [&]<int M>(int64_t b) { run_32<Dot, NT, M>(w, act, b, acc); });
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

// Four narrow rows at once (on the scale shape the hyper-connection and expert-down products, 320 and 640 wide:
// four rows are one contiguous stream). A row alone is a chain of dependent folds, one per block, with two
// gathers of eight f16 scales a run; here the four rows' sums of a block reduce together and fold in the lanes of
// one vector (lane r: row r, the twin's roundings: (d_w * d_a) * isum, then the addition, block after block). The
// AVX-512 level has the same tile for q5_0 (kernels_quant_int8_avx512.cpp).
// [sum of x0, x1, x2, x3] of four vectors of 8 int32 lanes.
inline __m128i four_sums(__m256i x0, __m256i x1, __m256i x2, __m256i x3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(x0, x1), _mm256_hadd_epi32(x2, x3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

template <class Dot, int NT>
void tile4_32(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y, size_t ys) {
    __m128 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm_setzero_ps();
    for (int64_t b = 0; b < n / kQK; ++b) {
        decltype(Dot::tile_weights(std::declval<const typename Dot::Block &>())) u[4];
        uint16_t dh[4];
        for (int r = 0; r < 4; ++r) {
            const typename Dot::Block & B = reinterpret_cast<const typename Dot::Block *>(w + r * ws)[b];
            if (b % Dot::kEvery == 0) {  // each row's stream, as the row kernels; and into L2
                prefetch<64>(&B);
                prefetch_l2<64>(&B);
            }
            u[r] = Dot::tile_weights(B);
            dh[r] = B.d;
        }
        const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16(static_cast<short>(dh[0]), static_cast<short>(dh[1]),
                                                      static_cast<short>(dh[2]), static_cast<short>(dh[3]), 0, 0, 0, 0));
        for (int t = 0; t < NT; ++t) {
            const BlockQ8_0 & A = reinterpret_cast<const BlockQ8_0 *>(act + t * as)[b];
            const typename Dot::T tok = Dot::tile_token(load256(A.qs));
            auto row = [&](int r) { return Dot::tile_lanes(u[r], tok); };
            const __m128i isum = four_sums(row(0), row(1), row(2), row(3));
            const __m128 d = _mm_mul_ps(dw, _mm_set1_ps(f16_to_f32(A.d)));  // fold_q8_0: f16(w_d) * f16(a_d)
            acc[t] = _mm_add_ps(acc[t], _mm_mul_ps(d, _mm_cvtepi32_ps(isum)));
        }
    }
    for (int t = 0; t < NT; ++t) {
        alignas(16) float out[4];
        _mm_store_ps(out, acc[t]);
        for (int r = 0; r < 4; ++r) y[t * ys + r] = out[r];
    }
}

// The entries: the row kernels, and four narrow rows at once (wide rows stay one stream a row).
template <class Dot>
using Entry32 = FourRowEntry<Entry<row_32<Dot, 1>, row_32<Dot, 2>, row_32<Dot, 3>, row_32<Dot, 4>>, tile4_32<Dot, 1>,
                             tile4_32<Dot, 2>, tile4_32<Dot, 3>, tile4_32<Dot, 4>, kGemmNarrowRow>;
using Q5_0Entry = Entry32<Q50Dot>;
using Q8_0Entry = Entry32<Q80Dot>;

// ---- the q8_K activation quantiser ----------------------------------------------------------------------

// The twin's bytes (kernels_quant_scalar.cpp, quantize_row_q8_K): the first element of largest magnitude gives the
// scale (its sign kept), quants round to nearest even (the conversion's default mode, as nearbyint) and are capped
// at 127, block sums are exact.
void quantize_row_q8_k(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ8_K *>(dst);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < kQK_K; j += 8) mx = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), mx);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (!(amax > 0.0f)) {
            std::memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0;
        for (int j = 0; j < kQK_K; j += 8) {
            const int at = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (at != 0) {
                max = x[j + __builtin_ctz(static_cast<unsigned>(at))];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127);
        for (int g = 0; g < kQK_K / 16; ++g) {
            const __m256i q0 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * g))), cap);
            const __m256i q1 = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * g + 8))), cap);
            // packs works per 128-bit lane: [q0 lo, q1 lo | q0 hi, q1 hi], then the quarters back in order.
            const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
            const __m128i b8 = _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
            _mm_storeu_si128(reinterpret_cast<__m128i *>(y[b].qs + 16 * g), b8);
            y[b].bsums[g] = static_cast<int16_t>(sum8(_mm256_add_epi32(q0, q1)));
        }
        y[b].d = 1.0f / iscale;
    }
}

// ---- the q8_0 activation quantiser of q5_0 (and q4_0, iq4_nl) ----------------------------------------------

// The twin's bytes (tensor::quantize_row, ggml's reference), as the AVX-512 level's: d = max|x| / 127, its f16
// stored, and each quant lround(x * (1 / d)): the product rounded to float, then to the nearest integer with ties
// away from zero (a truncation, and one step away from zero where the exact remainder is at least one half).
void quantize_row_q8_0_ties_away(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ8_0 *>(dst);
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
        __m256 v[4];
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < 4; ++j) {
            v[j] = _mm256_loadu_ps(x + 8 * j);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[j]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float d = _mm_cvtss_f32(m4) / 127.0f;
        const float inv = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = tensor::f32_to_f16(d);
        __m256i q[4];
        for (int j = 0; j < 4; ++j) {
            const __m256 p = _mm256_mul_ps(v[j], _mm256_set1_ps(inv));
            const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 away = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(p, t)), half, _CMP_GE_OQ);
            const __m256 step = _mm256_and_ps(away, _mm256_or_ps(_mm256_and_ps(p, sign), one));
            q[j] = _mm256_cvtps_epi32(_mm256_add_ps(t, step));
        }
        // packs works per 128-bit lane; the permute restores element order (|q| <= 127: nothing saturates).
        const __m256i q8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y[b].qs),
                            _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

}  // namespace

void add_int8_entries_avx2(TypeKernels * table) {
    using Q4K = Entry<row_q4_k<1>, row_q4_k<2>, row_q4_k<3>, row_q4_k<4>>;
    using Q5K = Entry<row_q5_k<1>, row_q5_k<2>, row_q5_k<3>, row_q5_k<4>>;
    using Q6K = Entry<row_q6_k<1>, row_q6_k<2>, row_q6_k<3>, row_q6_k<4>>;
    set_entry<Q4K>(table, tensor::ElemType::Q4_K);
    set_entry<Q5K>(table, tensor::ElemType::Q5_K);
    set_entry<Q6K>(table, tensor::ElemType::Q6_K);
    set_four_row_entry<Q5_0Entry>(table, tensor::ElemType::Q5_0);
    set_q8_k_quantizer(table, quantize_row_q8_k);
    set_q8_0_quantizer(table, quantize_row_q8_0_ties_away);
    add_int8_gemm_avx2(table);
}

void add_q8_0_int8_entries_avx2(TypeKernels & k) {
    k.vec_dot = Q8_0Entry::RowEntry::vec_dot;
    k.dot_tile = Q8_0Entry::dot_tile;
    k.tile_tokens = kMaxTokens;
    k.row_tile_min_tokens = 0;
    k.rows16 = nullptr;
    add_q8_0_int8_gemm_avx2(k);
}

}  // namespace offgrid::ops::cpu::quant

#else

namespace offgrid::ops::cpu::quant {
void add_int8_entries_avx2(TypeKernels *) {}
void add_q8_0_int8_entries_avx2(TypeKernels &) {}
}  // namespace offgrid::ops::cpu::quant

#endif
