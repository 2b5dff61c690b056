// The 16 x 16 transpose of 32-bit lanes in AVX-512 registers (include only from *_avx512.cpp, inside their
// AVX-512 guard): the attention rows turn 16 keys element-major with it, the 8-bit prompt products turn a group's
// row-major results token-major. Pure data movement: no rounding, any lane contents.
#pragma once

#include <immintrin.h>

namespace offgrid::ops::cpu::avx512 {

// t[j] lane k = r[k] lane j.
inline void transpose16(const __m512 (&r)[16], __m512 (&t)[16]) {
    // Within each 128-bit lane L: u[4 g + j] = lane 4 L + j of rows 4 g .. 4 g + 3.
    __m512 u[16];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
        const __m512 a = _mm512_unpacklo_ps(r[4 * g], r[4 * g + 1]), b = _mm512_unpackhi_ps(r[4 * g], r[4 * g + 1]);
        const __m512 e = _mm512_unpacklo_ps(r[4 * g + 2], r[4 * g + 3]), f = _mm512_unpackhi_ps(r[4 * g + 2], r[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(e)));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(e)));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(b), _mm512_castps_pd(f)));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(b), _mm512_castps_pd(f)));
    }
    // Lane 4 L + j of the 16 rows: lane L of u[j], u[4 + j], u[8 + j], u[12 + j].
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
        const __m512 s0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44), s1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
        const __m512 s2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44), s3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
        t[j] = _mm512_shuffle_f32x4(s0, s2, 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
        t[8 + j] = _mm512_shuffle_f32x4(s1, s3, 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
    }
}

}  // namespace offgrid::ops::cpu::avx512
