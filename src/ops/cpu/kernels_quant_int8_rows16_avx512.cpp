// q4_K in 16-row groups (ops/rows16.h) by up to 8 tokens of q8_K activations, AVX-512 VNNI: the rows16 product
// of the 8-bit q4_K entry (TypeKernels::rows16).
//
// The 16 int32 lanes are the group's 16 rows. A 64-byte vector qs[k] holds the same qs word of every row: its
// low nibbles are 4 values of sub-block 2c (c = k / 8), its high nibbles 4 of sub-block 2c + 1, so two
// `vpdpbusd` against the token's 4 matching bytes (a broadcast) add them to two sums, one per sub-block. A
// sub-block's 16 row sums take the rows' scales in one `vpmulld`; the mins, two sub-blocks at a time, in one
// `vpdpwssd` of the rows' min pairs by the token's pair of 32-element sums. The isum and imin of a row and block
// are then the twin's exact integers, and the fold is the twin's (fold_q8_k_min: (a_d * d) * isum - (a_d *
// dmin) * imin, added block after block), lane for lane: the results are vec_dot's bits.
//
// From the L3 on one core of a Zen 4 (bench_rows16, 4096 x 2560): 1.8x the 4-row tiles at one token, 1.8-2.2x
// at 2-4 tokens, 1.2-1.3x the lanes at 8 (docs/kernels.md, "Decode against the bus").
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/kernels_quant_common.h"  // its pragma: the fold is compiled without contraction
#include "ops/rows16.h"
#include "tensor/blocks.h"

namespace offgrid::ops::cpu::quant {

namespace {

using tensor::BlockQ8_K;

// Fetch distances, in a group's blocks (2304 bytes each): the vectors of the block this many ahead into L1 as
// the current one's are read, and a whole block this many ahead into L2 (of 1-16 and 0-64 tried, the best from
// DRAM; docs/kernels.md).
constexpr size_t kAheadL1 = 2, kAheadL2 = 32;

// A token block's 32-element sums in pairs: int32 p holds sub-blocks 2p and 2p + 1 as two int16 (|sum| <= 32 *
// 128), the broadcast side of the mins' vpdpwssd.
inline __m128i bsum32_pairs(const BlockQ8_K & A) {
    const __m256i b16 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(A.bsums));
    const __m256i s = _mm256_madd_epi16(b16, _mm256_set1_epi16(1));
    return _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

// Block B of the group by NT <= 4 tokens (tok[t]: token t's block), added to acc[t] (16 rows). ahead: null, or
// where the L1 fetch reads.
template <int NT>
inline void block(const Q4KRows16Block & B, const BlockQ8_K * const * tok, float (*acc)[16], const char * ahead) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m6 = _mm512_set1_epi8(63), m30 = _mm512_set1_epi8(0x30);
    // The rows' scales and mins (tensor::k4_scale_min): sub-block j's 16 rows at bytes 16 (j % 4) of sc_lo / mn_lo
    // (j < 4) or sc_hi / mn_hi (j >= 4). (A & B) | C is ternary-logic table 0xF8.
    const __m512i p0 = _mm512_loadu_si512(B.planes[0]), p1 = _mm512_loadu_si512(B.planes[4]),
                  p2 = _mm512_loadu_si512(B.planes[8]);
    const __m512i sc_lo = _mm512_and_si512(p0, m6), mn_lo = _mm512_and_si512(p1, m6);
    const __m512i sc_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(p2, m4), _mm512_srli_epi16(p0, 2), m30, 0xF8);
    const __m512i mn_hi =
        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(p2, 4), m4), _mm512_srli_epi16(p1, 2), m30, 0xF8);
    __m512i isum[NT], imin[NT];
    for (int t = 0; t < NT; ++t) isum[t] = imin[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
        __m512i s0[NT], s1[NT];  // sub-blocks 2c (low nibbles) and 2c + 1 (high), a chain each per token
        for (int t = 0; t < NT; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            if (ahead != nullptr) _mm_prefetch(ahead + 64 * (8 * c + i), _MM_HINT_T0);
            const __m512i v = _mm512_loadu_si512(B.qs[8 * c + i]);
            const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            for (int t = 0; t < NT; ++t) {
                const int8_t * q = tok[t]->qs + 64 * c + 4 * i;
                int32_t w0, w1;
                std::memcpy(&w0, q, 4);
                std::memcpy(&w1, q + 32, 4);
                s0[t] = _mm512_dpbusd_epi32(s0[t], lo, _mm512_set1_epi32(w0));
                s1[t] = _mm512_dpbusd_epi32(s1[t], hi, _mm512_set1_epi32(w1));
            }
        }
        const __m512i src = c < 2 ? sc_lo : sc_hi;
        const bool upper = (c & 1) != 0;
        const __m512i sa =
            _mm512_cvtepu8_epi32(upper ? _mm512_extracti32x4_epi32(src, 2) : _mm512_extracti32x4_epi32(src, 0));
        const __m512i sb =
            _mm512_cvtepu8_epi32(upper ? _mm512_extracti32x4_epi32(src, 3) : _mm512_extracti32x4_epi32(src, 1));
        for (int t = 0; t < NT; ++t) {
            const __m512i scaled = _mm512_add_epi32(_mm512_mullo_epi32(s0[t], sa), _mm512_mullo_epi32(s1[t], sb));
            isum[t] = _mm512_add_epi32(isum[t], scaled);
        }
    }
    // The rows' mins of sub-blocks 2p and 2p + 1 as int16 pairs, against the tokens' pairs of sums.
    alignas(16) int32_t pairs[NT][4];
    for (int t = 0; t < NT; ++t) _mm_store_si128(reinterpret_cast<__m128i *>(pairs[t]), bsum32_pairs(*tok[t]));
    for (int p = 0; p < 4; ++p) {
        const __m512i src = p < 2 ? mn_lo : mn_hi;
        const bool upper = (p & 1) != 0;
        const __m128i a = upper ? _mm512_extracti32x4_epi32(src, 2) : _mm512_extracti32x4_epi32(src, 0);
        const __m128i b = upper ? _mm512_extracti32x4_epi32(src, 3) : _mm512_extracti32x4_epi32(src, 1);
        const __m512i pair = _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b)));
        for (int t = 0; t < NT; ++t) {
            imin[t] = _mm512_dpwssd_epi32(imin[t], pair, _mm512_set1_epi32(pairs[t][p]));
        }
    }
    const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.d)));
    const __m512 wm = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.dmin)));
    for (int t = 0; t < NT; ++t) {  // fold_q8_k_min, lane r row r
        const __m512 ad = _mm512_set1_ps(tok[t]->d);
        const __m512 d = _mm512_mul_ps(ad, wd), dmin = _mm512_mul_ps(ad, wm);
        const __m512 part = _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t])),
                                          _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin[t])));
        _mm512_storeu_ps(acc[t], _mm512_add_ps(_mm512_loadu_ps(acc[t]), part));
    }
}

void q4_k_rows16(const void * group, int64_t n, const void * act, size_t act_stride, int n_tok, float * y,
                 size_t y_stride) {
    const int64_t nb = n / 256;
    const auto * W = static_cast<const Q4KRows16Block *>(group);
    alignas(64) float acc[kTileTokensMax][16] = {};
    for (int64_t b = 0; b < nb; ++b) {
        const Q4KRows16Block & B = W[b];
        const char * ahead = reinterpret_cast<const char *>(&B) + kAheadL1 * sizeof(Q4KRows16Block);
        for (size_t off = sizeof(B.qs); off < sizeof(Q4KRows16Block); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
        const char * far = reinterpret_cast<const char *>(&B) + kAheadL2 * sizeof(Q4KRows16Block);
        for (size_t off = 0; off < sizeof(Q4KRows16Block); off += 64) _mm_prefetch(far + off, _MM_HINT_T1);
        const BlockQ8_K * tp[kTileTokensMax];
        for (int t = 0; t < n_tok; ++t) {
            tp[t] = reinterpret_cast<const BlockQ8_K *>(static_cast<const uint8_t *>(act) + t * act_stride) + b;
        }
        for (int t0 = 0; t0 < n_tok; t0 += 4) {
            const char * a = t0 == 0 ? ahead : nullptr;
            switch (std::min(4, n_tok - t0)) {
                case 1: block<1>(B, tp + t0, acc + t0, a); break;
                case 2: block<2>(B, tp + t0, acc + t0, a); break;
                case 3: block<3>(B, tp + t0, acc + t0, a); break;
                default: block<4>(B, tp + t0, acc + t0, a); break;
            }
        }
    }
    for (int t = 0; t < n_tok; ++t) std::memcpy(y + t * y_stride, acc[t], sizeof(acc[t]));
}

}  // namespace

void add_int8_rows16_avx512(TypeKernels * table) {
    table[static_cast<uint32_t>(tensor::ElemType::Q4_K)].rows16 = q4_k_rows16;
}

}  // namespace offgrid::ops::cpu::quant

#else

namespace offgrid::ops::cpu::quant {
void add_int8_rows16_avx512(TypeKernels *) {}
}  // namespace offgrid::ops::cpu::quant

#endif
