// Few-token products of the 8-bit-activation path at AVX-512 VNNI: up to kInt8LanesMaxTokens tokens (a decode step
// of several sequences, an expert's share of a batch), in groups of 8 (of 4 in 256-bit registers when the product
// has at most 4), against q4_K, q6_K, q5_0 and Q8_0 rows.
// Reached through the entries' gemm (kernels_quant_int8_gemm_avx512.cpp hands these products here, from a per-type
// number of tokens).
//
// The 16-lane gemm puts 16 tokens in a register's int32 lanes; with 8 tokens half of every `vpdpbusd` is wasted,
// and the row kernels pay a horizontal sum and a float fold per token and block. Here the lanes hold two weight
// rows by eight tokens, lane 2t + i = (row i, token t):
//  - the weight side is one 8-byte broadcast of the two rows' 4-byte words, from rows decoded once per product
//    with their words interleaved (row 0's word k, then row 1's);
//  - the token side is the 8 tokens' word k, each already in its two lanes (packed so: one load, shared by kGroups
//    register groups of two rows; a permute of 8 packed words cost 6 % more from cache).
// The weights are the unsigned side of `vpdpbusd` (q4_K's 0..15, q6_K's 0..63, q5_0's 0..31, Q8_0's byte + 128)
// and the activations the signed side, so q4_K needs no correction and the others subtract a number of the
// token alone times a constant: 32 * sum(scale * 16-element sum) for q6_K, 16 or 128 * the block's sum for q5_0
// and Q8_0 (sums taken when the tokens are packed). The integer sums are exact (a 32-element block at most
// 32 * 255 * 127 < 2^21; with 6- or 8-bit scales over a super-block < 2^31), so they equal the twins'; the float
// fold is the twin's, lane for lane, block after block (no contraction: kernels_quant_common.h).
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/kernels_quant_int8_avx2.h"
#include "ops/cpu/kernels_quant_int8_entries.h"
#include "ops/workspace.h"

namespace offgrid::ops::cpu::quant {

namespace {

constexpr int kGroups = 4;  // register groups of two rows sharing each token vector

// The registers of a token group: 8 tokens in 512 bits (Zmm) or 4 in 256 (Ymm), lane 2t + i = (token t, row i of
// a pair) in both. With at most 4 tokens the 512-bit lanes would be half idle; the 256-bit products take the same
// decoded rows. (Four tokens in 512 bits as two halves of each block, the weight side a 16-byte broadcast, were
// no faster on Zen 4: that broadcast costs more than the 8-byte one.)
struct Zmm {
    using I = __m512i;
    using F = __m512;
    static constexpr int kLanes = 16;
    static I zero() { return _mm512_setzero_si512(); }
    static F zero_f() { return _mm512_setzero_ps(); }
    // Two rows' words (8 bytes) in every lane pair.
    static I pair(const void * p) {
        int64_t v;
        std::memcpy(&v, p, 8);
        return _mm512_set1_epi64(v);
    }
    static F pair_f(const float * p) { return _mm512_castsi512_ps(pair(p)); }
    // The group's tokens' word k, each in its lane pair.
    static I load(const void * p) { return _mm512_load_si512(p); }
    static F load_f(const float * p) { return _mm512_load_ps(p); }
    static void store_f(float * p, F v) { _mm512_store_ps(p, v); }
    static I dpbusd(I s, I w, I a) { return _mm512_dpbusd_epi32(s, w, a); }
    static I dpwssd(I s, I a, I b) { return _mm512_dpwssd_epi32(s, a, b); }
    static I add(I a, I b) { return _mm512_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
    template <int N>
    static I shl(I a) { return _mm512_slli_epi32(a, N); }
    static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
    static F add_f(F a, F b) { return _mm512_add_ps(a, b); }
    static F sub_f(F a, F b) { return _mm512_sub_ps(a, b); }
    static F mul_f(F a, F b) { return _mm512_mul_ps(a, b); }
};
struct Ymm {
    using I = __m256i;
    using F = __m256;
    static constexpr int kLanes = 8;
    static I zero() { return _mm256_setzero_si256(); }
    static F zero_f() { return _mm256_setzero_ps(); }
    static I pair(const void * p) {
        int64_t v;
        std::memcpy(&v, p, 8);
        return _mm256_set1_epi64x(v);
    }
    static F pair_f(const float * p) { return _mm256_castsi256_ps(pair(p)); }
    static I load(const void * p) { return _mm256_load_si256(static_cast<const __m256i *>(p)); }
    static F load_f(const float * p) { return _mm256_load_ps(p); }
    static void store_f(float * p, F v) { _mm256_store_ps(p, v); }
    static I dpbusd(I s, I w, I a) { return _mm256_dpbusd_epi32(s, w, a); }
    static I dpwssd(I s, I a, I b) { return _mm256_dpwssd_epi32(s, a, b); }
    static I add(I a, I b) { return _mm256_add_epi32(a, b); }
    static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
    static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
    template <int N>
    static I shl(I a) { return _mm256_slli_epi32(a, N); }
    static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
    static F add_f(F a, F b) { return _mm256_add_ps(a, b); }
    static F sub_f(F a, F b) { return _mm256_sub_ps(a, b); }
    static F mul_f(F a, F b) { return _mm256_mul_ps(a, b); }
};

// Two rows' vectors of 16 words interleaved: lo = words 0-7 of a and b in turn (a0 b0 a1 b1 ...), hi = words 8-15.
inline __m512i interleave_lo(__m512i a, __m512i b) {
    return _mm512_permutex2var_epi32(a, _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0), b);
}
inline __m512i interleave_hi(__m512i a, __m512i b) {
    return _mm512_permutex2var_epi32(a, _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8), b);
}

// The 8 bytes at a and b in turn (a0 b0 a1 b1 ...: 16 bytes), and the same in pairs of bytes (a0 a1 b0 b1 a2 ...).
inline __m128i bytes_in_turn(uint64_t a, uint64_t b) {
    return _mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<long long>(a)), _mm_cvtsi64_si128(static_cast<long long>(b)));
}
inline __m128i byte_pairs_in_turn(uint64_t a, uint64_t b) {
    return _mm_unpacklo_epi16(_mm_cvtsi64_si128(static_cast<long long>(a)), _mm_cvtsi64_si128(static_cast<long long>(b)));
}

// f16 to f32 with F16C (exact, as tensor::f16_to_f32).
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// The weight rows are streams read once. A pass's decoding fetches this far ahead of itself into L1 (mostly from
// L2: the rows kPassesAhead passes on are fetched into L2 while the passes before them compute, in product()).
constexpr int kAheadBytes = 3072;
constexpr int kPassesAhead = 2;
inline void prefetch_ahead(const void * block, size_t bytes) {
    const char * ahead = static_cast<const char *>(block) + kAheadBytes;
    for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
}

// ---- the tokens ------------------------------------------------------------------------------------------

// A super-block of V's tokens (8 or 4): word k of token t at q[k][2t] and q[k][2t + 1]; per lane pair t, token
// t's 16-element sums (bs16, pairs 2p and 2p + 1 as two int16), its 32-element sums (bs32, the same) and its scale.
template <class V>
struct alignas(64) TokensK {
    static constexpr int kLanes = V::kLanes;
    static constexpr int kTokens = kLanes / 2;
    static constexpr uint64_t kLayout = kLanes == 16 ? 5 : 12;  // names the layout (the 16-lane gemm's are 10-11)
    using Act = BlockQ8_K;
    int32_t q[64][kLanes];
    int16_t bs16[8][kLanes][2];
    int16_t bs32[4][kLanes][2];
    float d[kLanes];

    void set(int t, const BlockQ8_K * A) {
        for (int k = 0; k < 64; ++k) {
            int32_t v = 0;
            if (A != nullptr) std::memcpy(&v, A->qs + 4 * k, 4);
            q[k][2 * t] = q[k][2 * t + 1] = v;
        }
        for (int i = 0; i < 2; ++i) {
            const int lane = 2 * t + i;
            for (int p = 0; p < 8; ++p) {
                for (int h = 0; h < 2; ++h) bs16[p][lane][h] = A != nullptr ? A->bsums[2 * p + h] : int16_t{0};
            }
            for (int p = 0; p < 4; ++p) {
                for (int h = 0; h < 2; ++h) {
                    const int j = 2 * p + h;  // 32-element sub-block j: the 16-sums 2j and 2j + 1
                    bs32[p][lane][h] = A != nullptr ? static_cast<int16_t>(A->bsums[2 * j] + A->bsums[2 * j + 1]) : int16_t{0};
                }
            }
            d[lane] = A != nullptr ? A->d : 0.0f;
        }
    }
};

// A 32-element block of V's tokens: word k of token t at q[k][2t] and q[k][2t + 1]; per lane pair t, token t's
// block sum and scale.
template <class V>
struct alignas(64) Tokens0 {
    static constexpr int kLanes = V::kLanes;
    static constexpr int kTokens = kLanes / 2;
    static constexpr uint64_t kLayout = kLanes == 16 ? 6 : 13;
    using Act = BlockQ8_0;
    int32_t q[8][kLanes];
    int32_t sum[kLanes];
    float d[kLanes];

    void set(int t, const BlockQ8_0 * A) {
        int32_t s = 0;
        for (int k = 0; k < 8; ++k) {
            int32_t v = 0;
            if (A != nullptr) std::memcpy(&v, A->qs + 4 * k, 4);
            q[k][2 * t] = q[k][2 * t + 1] = v;
        }
        if (A != nullptr) {
            for (int e = 0; e < 32; ++e) s += A->qs[e];
        }
        for (int i = 0; i < 2; ++i) {
            sum[2 * t + i] = s;
            d[2 * t + i] = A != nullptr ? f16_to_f32(A->d) : 0.0f;
        }
    }
};

// The product's tokens, Tok::kTokens to a group: group g's block b at [g * nb + b]. Packed once per product per
// thread (act_key), as the 16-lane gemm's.
template <class Tok>
const Tok * pack_tokens(const void * act, size_t act_stride, int64_t nb, int64_t n_tok, uint64_t key) {
    constexpr int kTokens = Tok::kTokens;
    const int64_t groups = (n_tok + kTokens - 1) / kTokens;
    bool fill;
    auto * p = reinterpret_cast<Tok *>(Workspace::scratch().kernel_block_for(
        KernelBlock::packed_tokens, static_cast<size_t>(groups * nb) * sizeof(Tok), packed_tokens_tag(key, Tok::kLayout), fill));
    if (!fill) return p;
    for (int64_t g = 0; g < groups; ++g) {
        for (int t = 0; t < kTokens; ++t) {
            const int64_t tok = g * kTokens + t;
            const auto * A = tok < n_tok ? reinterpret_cast<const typename Tok::Act *>(static_cast<const uint8_t *>(act) + tok * act_stride)
                                         : nullptr;
            for (int64_t b = 0; b < nb; ++b) p[g * nb + b].set(t, A != nullptr ? A + b : nullptr);
        }
    }
    return p;
}

// ---- the weights -----------------------------------------------------------------------------------------

// isum[g] += scale j * (sub-block j of group g's rows against the tokens) for the Blocks sub-blocks of Words
// 4-byte words of a super-block (q4_K: 8 of 8, q6_K: 16 of 4), one sum chain a group.
template <int Blocks, int Words, class V, class X>
inline void add_scaled_sub_blocks(const X * const * W, const TokensK<V> & A, typename V::I * isum) {
    for (int j = 0; j < Blocks; ++j) {
        typename V::I s[kGroups];
        for (int g = 0; g < kGroups; ++g) s[g] = V::zero();
        for (int k = 0; k < Words; ++k) {
            const auto a = V::load(A.q[Words * j + k]);
            for (int g = 0; g < kGroups; ++g) s[g] = V::dpbusd(s[g], V::pair(W[g]->q[Words * j + k]), a);
        }
        for (int g = 0; g < kGroups; ++g) isum[g] = V::add(isum[g], V::mullo(s[g], V::pair(W[g]->sc[j])));
    }
}

// q4_K, two rows' super-block: word k of row i at q[k][i] (quants 0..15 in element order); scale j of row i,
// min pairs (2p, 2p + 1) of row i, and the f16 scales converted.
struct alignas(64) Q4K {
    using Weight = BlockQ4_K;
    template <class V>
    using Tokens = TokensK<V>;
    static constexpr int kBlock = 256;
    uint32_t q[64][2];
    int32_t sc[8][2];
    int16_t mn[4][2][2];
    float d[2], dmin[2];

    void decode(const BlockQ4_K & B0, const BlockQ4_K & B1) {
        prefetch_ahead(&B0, sizeof(BlockQ4_K));
        prefetch_ahead(&B1, sizeof(BlockQ4_K));
        const __m512i m4 = _mm512_set1_epi8(0x0f);
        for (int h = 0; h < 2; ++h) {
            // Bytes 64h..64h+63 hold elements 128h + 0..127: per 32 bytes, 32 elements in the low nibbles and the
            // next 32 in the high ones. lo: words 32h + 0..7 and 32h + 16..23; hi: 32h + 8..15 and 32h + 24..31.
            const __m512i x0 = _mm512_loadu_si512(B0.qs + 64 * h), x1 = _mm512_loadu_si512(B1.qs + 64 * h);
            const __m512i lo0 = _mm512_and_si512(x0, m4), lo1 = _mm512_and_si512(x1, m4);
            const __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(x0, 4), m4), hi1 = _mm512_and_si512(_mm512_srli_epi16(x1, 4), m4);
            _mm512_store_si512(q[32 * h], interleave_lo(lo0, lo1));
            _mm512_store_si512(q[32 * h + 16], interleave_hi(lo0, lo1));
            _mm512_store_si512(q[32 * h + 8], interleave_lo(hi0, hi1));
            _mm512_store_si512(q[32 * h + 24], interleave_hi(hi0, hi1));
        }
        uint64_t s0, m0, s1, m1;
        k4_scales_mins_u64(B0.scales, s0, m0);
        k4_scales_mins_u64(B1.scales, s1, m1);
        _mm512_store_si512(sc, _mm512_cvtepu8_epi32(bytes_in_turn(s0, s1)));
        _mm256_store_si256(reinterpret_cast<__m256i *>(mn), _mm256_cvtepu8_epi16(byte_pairs_in_turn(m0, m1)));
        d[0] = h2f(B0.d);
        d[1] = h2f(B1.d);
        dmin[0] = h2f(B0.dmin);
        dmin[1] = h2f(B1.dmin);
    }

    // acc[g] += the super-block of kGroups register groups (W[g]) against the tokens.
    template <class V>
    static void block(const Q4K * const * W, const TokensK<V> & A, typename V::F * acc) {
        typename V::I isum[kGroups], imin[kGroups];
        for (int g = 0; g < kGroups; ++g) isum[g] = imin[g] = V::zero();
        add_scaled_sub_blocks<8, 8, V>(W, A, isum);  // 32-element sub-blocks
        for (int p = 0; p < 4; ++p) {
            const auto bs = V::load(A.bs32[p]);
            for (int g = 0; g < kGroups; ++g) imin[g] = V::dpwssd(imin[g], bs, V::pair(W[g]->mn[p]));
        }
        const auto ad = V::load_f(A.d);
        for (int g = 0; g < kGroups; ++g) {  // fold_q8_k_min
            const auto d = V::mul_f(ad, V::pair_f(W[g]->d));
            const auto dmin = V::mul_f(ad, V::pair_f(W[g]->dmin));
            acc[g] = V::add_f(acc[g], V::sub_f(V::mul_f(d, V::cvt(isum[g])), V::mul_f(dmin, V::cvt(imin[g]))));
        }
    }
};

// q6_K, two rows' super-block: word k of row i at q[k][i] (the unsigned values 0..63 in element order); scale j
// of row i as int32 (sc) and in int16 pairs (2p, 2p + 1) for the correction (sc2).
struct alignas(64) Q6K {
    using Weight = BlockQ6_K;
    template <class V>
    using Tokens = TokensK<V>;
    static constexpr int kBlock = 256;
    uint32_t q[64][2];
    int32_t sc[16][2];
    int16_t sc2[8][2][2];
    float d[2];

    // Elements 128h .. 128h + 127 of a row: words 32h + 0..15 (v01) and 32h + 16..31 (v23). Element 128h + 32g + l
    // takes ql byte 64h + l (its high nibble for g >= 2, byte 32 further for odd g) and bits 2g of qh byte 32h + l.
    static void values(const BlockQ6_K & B, int h, __m512i & v01, __m512i & v23) {
        const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
        const __m512i l = _mm512_loadu_si512(B.ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qh + 32 * h)));
        const __m512i up01 = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4);     // g = 0: qh << 4, g = 1: qh << 2
        const __m512i down23 = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);   // g = 2: qh,      g = 3: qh >> 2
        v01 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi64(qh, up01), m30));
        v23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(_mm512_srlv_epi64(qh, down23), m30));
    }

    void decode(const BlockQ6_K & B0, const BlockQ6_K & B1) {
        prefetch_ahead(&B0, sizeof(BlockQ6_K));
        prefetch_ahead(&B1, sizeof(BlockQ6_K));
        for (int h = 0; h < 2; ++h) {
            __m512i a01, a23, b01, b23;
            values(B0, h, a01, a23);
            values(B1, h, b01, b23);
            _mm512_store_si512(q[32 * h], interleave_lo(a01, b01));
            _mm512_store_si512(q[32 * h + 8], interleave_hi(a01, b01));
            _mm512_store_si512(q[32 * h + 16], interleave_lo(a23, b23));
            _mm512_store_si512(q[32 * h + 24], interleave_hi(a23, b23));
        }
        const __m128i s0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B0.scales));
        const __m128i s1 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B1.scales));
        _mm512_store_si512(sc[0], _mm512_cvtepi8_epi32(_mm_unpacklo_epi8(s0, s1)));
        _mm512_store_si512(sc[8], _mm512_cvtepi8_epi32(_mm_unpackhi_epi8(s0, s1)));
        _mm256_store_si256(reinterpret_cast<__m256i *>(sc2[0]), _mm256_cvtepi8_epi16(_mm_unpacklo_epi16(s0, s1)));
        _mm256_store_si256(reinterpret_cast<__m256i *>(sc2[4]), _mm256_cvtepi8_epi16(_mm_unpackhi_epi16(s0, s1)));
        d[0] = h2f(B0.d);
        d[1] = h2f(B1.d);
    }

    template <class V>
    static void block(const Q6K * const * W, const TokensK<V> & A, typename V::F * acc) {
        typename V::I isum[kGroups], corr[kGroups];
        for (int g = 0; g < kGroups; ++g) isum[g] = corr[g] = V::zero();
        add_scaled_sub_blocks<16, 4, V>(W, A, isum);  // 16-element sub-blocks
        for (int p = 0; p < 8; ++p) {  // sum of scale * 16-element sum: the values' 32 taken off below
            const auto bs = V::load(A.bs16[p]);
            for (int g = 0; g < kGroups; ++g) corr[g] = V::dpwssd(corr[g], bs, V::pair(W[g]->sc2[p]));
        }
        const auto ad = V::load_f(A.d);
        for (int g = 0; g < kGroups; ++g) {  // fold_q8_k
            const auto total = V::sub(isum[g], V::template shl<5>(corr[g]));
            const auto d = V::mul_f(ad, V::pair_f(W[g]->d));
            acc[g] = V::add_f(acc[g], V::mul_f(d, V::cvt(total)));
        }
    }
};

// A 32-element block of two rows with one f16 scale: q5_0 (its values + 16: 0..31) and Q8_0 (its bytes + 128);
// Shift: the correction's log2 (16 or 128 times the token's block sum).
template <class W, int Shift>
struct alignas(64) Rows32 {
    using Weight = W;
    template <class V>
    using Tokens = Tokens0<V>;
    static constexpr int kBlock = 32;
    uint32_t q[8][2];
    float d[2];

    static __m256i values(const W & B) {
        if constexpr (Shift == 4) {
            return q5_0_unsigned(B);
        } else {
            return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qs)), _mm256_set1_epi8(static_cast<char>(0x80)));
        }
    }

    void decode(const W & B0, const W & B1) {
        prefetch_ahead(&B0, sizeof(W));
        prefetch_ahead(&B1, sizeof(W));
        // Words 0-7 of both rows: the interleave's low half.
        _mm512_store_si512(q, interleave_lo(_mm512_castsi256_si512(values(B0)), _mm512_castsi256_si512(values(B1))));
        d[0] = h2f(B0.d);
        d[1] = h2f(B1.d);
    }

    template <class V>
    static void block(const Rows32 * const * W2, const Tokens0<V> & A, typename V::F * acc) {
        const auto neg = V::sub(V::zero(), V::template shl<Shift>(V::load(A.sum)));
        typename V::I s[kGroups];
        for (int g = 0; g < kGroups; ++g) s[g] = neg;
        for (int k = 0; k < 8; ++k) {
            const auto a = V::load(A.q[k]);
            for (int g = 0; g < kGroups; ++g) s[g] = V::dpbusd(s[g], V::pair(W2[g]->q[k]), a);
        }
        const auto ad = V::load_f(A.d);
        for (int g = 0; g < kGroups; ++g) {  // fold_q8_0: (d_w * d_a) * isum
            const auto d = V::mul_f(V::pair_f(W2[g]->d), ad);
            acc[g] = V::add_f(acc[g], V::mul_f(d, V::cvt(s[g])));
        }
    }
};
using Q50 = Rows32<BlockQ5_0, 4>;
using Q80 = Rows32<BlockQ8_0, 7>;

// ---- the product -----------------------------------------------------------------------------------------

// Rows [0, n_rows) against every token, 2 * kGroups rows a pass (rows past n_rows repeat the last one, their results
// unwritten), the tokens in groups of V's (8 or 4).
template <class X, class V>
void product(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows,
             int64_t n_tok, float * y, size_t y_stride, uint64_t act_key) {
    using Tok = typename X::template Tokens<V>;
    using Weight = typename X::Weight;
    constexpr int kPassRows = 2 * kGroups;
    constexpr int kTokens = Tok::kTokens;
    const int64_t nb = n / X::kBlock;
    if (nb == 0 || n_rows <= 0 || n_tok <= 0) return;
    const int64_t groups = (n_tok + kTokens - 1) / kTokens;
    const auto * wb = static_cast<const uint8_t *>(w);
    const Tok * tokens = pack_tokens<Tok>(act, act_stride, nb, n_tok, act_key);
    auto * decoded = reinterpret_cast<X *>(
        Workspace::scratch().kernel_block(KernelBlock::tile_weights, kGroups * static_cast<size_t>(std::max<int64_t>(nb, 2)) * sizeof(X)));
    for (int64_t r = 0; r < n_rows; r += kPassRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kPassRows, n_rows - r));
        const Weight * B[kPassRows];
        for (int i = 0; i < kPassRows; ++i) B[i] = reinterpret_cast<const Weight *>(wb + (r + std::min(i, rows - 1)) * w_stride);
        // While this pass computes, the rows kPassesAhead passes on are fetched into L2, whole, in address order, a
        // share at each block: the memory then works while the passes compute instead of in turn with them. (With
        // only the next pass's first 3 KiB fetched, into L1, a product from DRAM took about the sum of its
        // arithmetic and its reading. One pass ahead gained on rows of 1 KiB and more only, two passes on every
        // shape, three or four no more.)
        const int64_t ahead = r + kPassesAhead * kPassRows;
        const char * next = reinterpret_cast<const char *>(wb + std::min(ahead, n_rows) * w_stride);
        const int64_t ahead_rows = std::max<int64_t>(0, std::min<int64_t>(kPassRows, n_rows - ahead));
        const int64_t next_lines = ahead_rows * static_cast<int64_t>(w_stride) / 64;
        const int64_t lines_per_block = (next_lines + nb - 1) / nb;
        const auto fetch_share = [&](int64_t b) {
            const int64_t l0 = b * lines_per_block, l1 = std::min(next_lines, l0 + lines_per_block);
            for (int64_t l = l0; l < l1; ++l) _mm_prefetch(next + 64 * l, _MM_HINT_T1);
        };
        const auto write = [&](int64_t tg, const typename V::F * acc) {
            const int toks = static_cast<int>(std::min<int64_t>(kTokens, n_tok - tg * kTokens));
            for (int g = 0; g < kGroups; ++g) {
                alignas(64) float out[V::kLanes];
                V::store_f(out, acc[g]);
                for (int i = 0; i < 2 && 2 * g + i < rows; ++i) {
                    for (int t = 0; t < toks; ++t) y[(tg * kTokens + t) * static_cast<int64_t>(y_stride) + r + 2 * g + i] = out[2 * t + i];
                }
            }
        };
        typename V::F acc[kGroups];
        for (int g = 0; g < kGroups; ++g) acc[g] = V::zero_f();
        const X * W[kGroups];
        if (groups == 1) {
            // One group of tokens: each block is decoded while the one before it computes (two blocks' buffers), so
            // the decoding's shuffles and the products' `vpdpbusd` overlap instead of taking turns pass by pass.
            for (int g = 0; g < kGroups; ++g) decoded[g].decode(B[2 * g][0], B[2 * g + 1][0]);
            for (int64_t b = 0; b < nb; ++b) {
                fetch_share(b);
                if (b + 1 < nb) {
                    X * const following = decoded + ((b + 1) & 1) * kGroups;
                    for (int g = 0; g < kGroups; ++g) following[g].decode(B[2 * g][b + 1], B[2 * g + 1][b + 1]);
                }
                for (int g = 0; g < kGroups; ++g) W[g] = decoded + (b & 1) * kGroups + g;
                X::template block<V>(W, tokens[b], acc);
            }
            write(0, acc);
            continue;
        }
        // Several groups: the pass decoded whole, then each group through every block.
        for (int g = 0; g < kGroups; ++g) {
            for (int64_t b = 0; b < nb; ++b) decoded[g * nb + b].decode(B[2 * g][b], B[2 * g + 1][b]);
        }
        for (int64_t tg = 0; tg < groups; ++tg) {
            const Tok * A = tokens + tg * nb;
            for (int64_t b = 0; b < nb; ++b) {
                if (tg == 0) fetch_share(b);
                for (int g = 0; g < kGroups; ++g) W[g] = decoded + g * nb + b;
                X::template block<V>(W, A[b], acc);
            }
            write(tg, acc);
            for (int g = 0; g < kGroups; ++g) acc[g] = V::zero_f();
        }
    }
}

// Products of up to 4 tokens in 256-bit registers, larger ones 8 tokens to a group in 512-bit ones.
template <class X>
void product_by_count(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows,
                      int64_t n_tok, float * y, size_t y_stride, uint64_t act_key) {
    if (n_tok <= Ymm::kLanes / 2) {
        product<X, Ymm>(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride, act_key);
    } else {
        product<X, Zmm>(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride, act_key);
    }
}

template <class Tok>
size_t packed_bytes(int64_t blocks, int64_t n_tok) {
    return static_cast<size_t>((n_tok + Tok::kTokens - 1) / Tok::kTokens * blocks) * sizeof(Tok);
}
template <class X>
size_t token_bytes(int64_t n, int64_t n_tok) {
    return std::max(packed_bytes<typename X::template Tokens<Zmm>>(n / X::kBlock, n_tok),
                    packed_bytes<typename X::template Tokens<Ymm>>(n / X::kBlock, n_tok));
}

template <class X>
size_t weight_bytes(int64_t n) {
    return kGroups * static_cast<size_t>(std::max<int64_t>(n / X::kBlock, 2)) * sizeof(X);
}

}  // namespace

Int8Product int8_lanes_avx512(tensor::ElemType type) {
    switch (type) {
        case tensor::ElemType::Q4_K: return product_by_count<Q4K>;
        case tensor::ElemType::Q6_K: return product_by_count<Q6K>;
        case tensor::ElemType::Q5_0: return product_by_count<Q50>;
        case tensor::ElemType::Q8_0: return product_by_count<Q80>;
        default: return nullptr;
    }
}

size_t int8_lanes_avx512_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok) {
    n_tok = std::min<int64_t>(n_tok, kInt8LanesMaxTokens);
    switch (type) {
        case tensor::ElemType::Q4_K: return token_bytes<Q4K>(n, n_tok);
        case tensor::ElemType::Q6_K: return token_bytes<Q6K>(n, n_tok);
        case tensor::ElemType::Q5_0: return token_bytes<Q50>(n, n_tok);
        case tensor::ElemType::Q8_0: return token_bytes<Q80>(n, n_tok);
        default: return 0;
    }
}

size_t int8_lanes_avx512_weight_bytes(tensor::ElemType type, int64_t n) {
    switch (type) {
        case tensor::ElemType::Q4_K: return weight_bytes<Q4K>(n);
        case tensor::ElemType::Q6_K: return weight_bytes<Q6K>(n);
        case tensor::ElemType::Q5_0: return weight_bytes<Q50>(n);
        case tensor::ElemType::Q8_0: return weight_bytes<Q80>(n);
        default: return 0;
    }
}

}  // namespace offgrid::ops::cpu::quant

#else

namespace offgrid::ops::cpu::quant {
Int8Product int8_lanes_avx512(tensor::ElemType) { return nullptr; }
size_t int8_lanes_avx512_token_bytes(tensor::ElemType, int64_t, int64_t) { return 0; }
size_t int8_lanes_avx512_weight_bytes(tensor::ElemType, int64_t) { return 0; }
}  // namespace offgrid::ops::cpu::quant

#endif
