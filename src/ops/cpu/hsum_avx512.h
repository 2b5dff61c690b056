// The one horizontal sum of the AVX-512 kernels (include only from *_avx512.cpp, inside their AVX-512 guard).
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

}  // namespace offgrid::ops::cpu::avx512
