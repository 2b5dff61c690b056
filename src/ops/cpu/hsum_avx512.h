// The one horizontal sum of the AVX-512 kernels, and the integer reduction of four rows' block pairs (include only
// from *_avx512.cpp, inside their AVX-512 guard).
// Its order of additions is part of every kernel's bits: the float dots, the attention rows and the Q8_0 row tiles
// (which must equal the float side's vec_dot_q8_0_f32 bit for bit) all reduce through this one function.
#pragma once

#include <immintrin.h>

namespace offgrid::ops::cpu::avx512 {

// Halves added pairwise: 16 -> 8 -> 4 -> 2 -> 1 (GCC 12 warns inside _mm512_reduce_add_ps).
inline float hsum(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Four rows' products of a pair of 32-blocks (lanes 0-7 block b, 8-15 block b + 1 of each v) reduced to their
// block sums: lanes 0-3 rows 0-3 of block b, lanes 4-7 rows 0-3 of block b + 1. Exact integer adds, so any order
// gives the same sums (the 8-bit Q8_0 and q5_0 tiles of four rows).
inline __m256i four_row_sums(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
    const __m512i s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
    const __m512i s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
    const __m512i q = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    // 128-bit lane L of q: the four rows' sums over lanes 4L..4L+3; lanes 0, 1 are block b, 2, 3 block b + 1.
    const __m512i h = _mm512_add_epi32(q, _mm512_shuffle_i32x4(q, q, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castsi512_si256(_mm512_shuffle_i32x4(h, h, _MM_SHUFFLE(2, 2, 2, 0)));
}

}  // namespace offgrid::ops::cpu::avx512
