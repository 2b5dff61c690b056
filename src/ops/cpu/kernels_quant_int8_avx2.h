// What the files of the 8-bit-activation path compiled for AVX2 and above (kernels_quant_int8_avx2.cpp and the
// AVX2 and AVX-512 gemm files) share: block decoders. Internal linkage (kernels_quant_int8_entries.h says why);
// include only from files compiled for AVX2 or a level above it. Also the runs of super-blocks that the q4_K rows
// of both levels reduce together, and their fold.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ops/cpu/kernels_quant_common.h"  // its pragma: fold_q4_k_run is compiled without contraction
#include "tensor/blocks.h"

namespace offgrid::ops::cpu::quant {
namespace {

// A q5_0 block's low nibbles in element order (nib) and, per byte, all ones where its fifth bit is set (set):
// byte j gets byte j / 8 of qh, then its bit j % 8.
inline void q5_0_parts(const tensor::BlockQ5_0 & B, __m256i & nib, __m256i & set) {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B.qs)), m4 = _mm_set1_epi8(0x0f);
    nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m4)), _mm_and_si128(_mm_srli_epi16(qs, 4), m4),
                                  1);
    uint32_t qh;
    std::memcpy(&qh, B.qh, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), spread), bit),
                            bit);
}

// The 32 signed values of a q5_0 block: v = nibble + 16 * fifth bit - 16.
inline __m256i q5_0_values(const tensor::BlockQ5_0 & B) {
    __m256i nib, set;
    q5_0_parts(B, nib, set);
    return _mm256_sub_epi8(nib, _mm256_andnot_si256(set, _mm256_set1_epi8(16)));  // nibble - 16 where the bit is clear
}

// The 32 unsigned quants q = nibble + 16 * fifth bit (0..31, value q - 16): the offset form of the products.
inline __m256i q5_0_unsigned(const tensor::BlockQ5_0 & B) {
    __m256i nib, set;
    q5_0_parts(B, nib, set);
    return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

// The unsigned 6-bit values (0..63) of elements 128h .. 128h + 127 of a q6_K block, 32 a register in element order:
// element 128h + 32g + l takes ql byte 64h + l (its high nibble for g >= 2, byte 32 further for odd g) and bits 2g
// of qh byte 32h + l.
inline void q6_k_values(const tensor::BlockQ6_K & B, int h, __m256i g[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.ql + 64 * h));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.ql + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qh + 32 * h));
    g[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
    g[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
    g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
}

// Runs of Max blocks over a row of nb blocks, then its shorter last run: run.template operator()<M>(b) for each,
// M a template argument so that a run's sums stay in registers.
template <int M, class Run>
inline void last_run(int64_t m, int64_t b, Run & run) {
    if constexpr (M > 0) {
        if (m == M) {
            run.template operator()<M>(b);
        } else {
            last_run<M - 1>(m, b, run);
        }
    }
}

template <int Max, class Run>
inline void in_runs(int64_t nb, Run && run) {
    int64_t b = 0;
    for (; b + Max <= nb; b += Max) run.template operator()<Max>(b);
    last_run<Max - 1>(nb - b, b, run);
}

// The per-token sums of a run's first M of 4 super-blocks (sums(i, out): block i of the run), zero after them.
template <int NT, int M, class Sums>
inline void run_sums(__m256i (&x)[4][NT], Sums && sums) {
    for (int i = 0; i < 4; ++i) {
        if (i < M) {
            sums(i, x[i]);
        } else {
            for (int t = 0; t < NT; ++t) x[i][t] = _mm256_setzero_si256();
        }
    }
}

// q4_K's super-block sums, folded: each per-token vector h of a super-block holds the exact integer sums by lanes,
// eight lanes of scale * quant * a and eight of min * block sums, halfway reduced as [s01 s23 m01 m23 | s45 s67 m45
// m67] (any split of the two sums over the lanes of each half will do). Four of them as one vector of whole sums:
// [isum0 imin0 isum1 imin1 | isum2 imin2 isum3 imin3].
inline __m256i q4_k_sums_of4(__m256i h0, __m256i h1, __m256i h2, __m256i h3) {
    const __m256i u01 = _mm256_hadd_epi32(h0, h1), u23 = _mm256_hadd_epi32(h2, h3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u01, u23, 0x20), _mm256_permute2x128_si256(u01, u23, 0x31));
}

// The twin's contract (kernels_quant_scalar.cpp, dot_q4_k): the super-block's exact integer sums of scale * quant
// * a and of min * block sums, folded once per super-block. A run of M <= 4 super-blocks from block b on reduces
// its sums together (the horizontal sums of one super-block are a long chain; four at once let the next blocks'
// products overlap it) and forms the twin's products in a vector, lane for lane the same roundings: d = a_d * w_d
// and dmin = a_d * w_dmin, then d * isum and dmin * imin, their difference; the additions to the accumulator stay
// one after another, in block order. h[i][t]: block b + i, token t, as q4_k_sums_of4 takes them (zero for i >= M).
// q5_K has q4_K's header (d, dmin, the packed scales and mins) and fold: Block is either.
template <int NT, int M, class Block>
inline void fold_q4_k_run(const Block * w, const void * const * act, int64_t b, const __m256i (&h)[4][NT],
                          float * acc) {
    // [d0 dmin0 d1 dmin1 d2 dmin2 d3 dmin3]: each block starts with its two f16 scales.
    auto pair = [&](int i) {
        uint32_t v = 0;
        if (i < M) std::memcpy(&v, &w[b + i].d, 4);
        return static_cast<int>(v);
    };
    const __m256 wd = _mm256_cvtph_ps(_mm_setr_epi32(pair(0), pair(1), pair(2), pair(3)));
    for (int t = 0; t < NT; ++t) {
        const auto * A = static_cast<const tensor::BlockQ8_K *>(act[t]) + b;
        auto ad = [&](int i) { return i < M ? A[i].d : 0.0f; };
        const __m256 d = _mm256_mul_ps(_mm256_setr_ps(ad(0), ad(0), ad(1), ad(1), ad(2), ad(2), ad(3), ad(3)), wd);
        const __m256 prod = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q4_k_sums_of4(h[0][t], h[1][t], h[2][t], h[3][t])));
        alignas(32) float r[8];
        _mm256_store_ps(r, _mm256_hsub_ps(prod, prod));  // [r0 r1 r0 r1 | r2 r3 r2 r3]
        float s = acc[t];
        s = s + r[0];
        if (M > 1) s = s + r[1];
        if (M > 2) s = s + r[4];
        if (M > 3) s = s + r[5];
        acc[t] = s;
    }
}

// A row of q4_K (or q5_K: Block) against NT tokens in runs of up to 4 super-blocks: sums(B, b, h) gives block b's
// per-token sums (h[t], as q4_k_sums_of4 takes them), the fold is fold_q4_k_run's.
template <int NT, class Block = tensor::BlockQ4_K, class Sums>
inline void q4_k_row(const void * wv, const void * const * act, int64_t n, float * out, Sums && sums) {
    const auto * w = static_cast<const Block *>(wv);
    float acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    in_runs<4>(n / tensor::kQK_K, [&]<int M>(int64_t b) {
        __m256i h[4][NT];
        run_sums<NT, M>(h, [&](int i, __m256i * x) { sums(w[b + i], b + i, x); });
        fold_q4_k_run<NT, M, Block>(w, act, b, h, acc);
    });
    for (int t = 0; t < NT; ++t) out[t] = acc[t];
}

}  // namespace
}  // namespace offgrid::ops::cpu::quant
