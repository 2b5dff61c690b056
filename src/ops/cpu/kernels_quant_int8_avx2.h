// What the files of the 8-bit-activation path compiled for AVX2 and above (kernels_quant_int8_avx2.cpp and the
// AVX2 and AVX-512 gemm files) share: block decoders. Internal linkage (kernels_quant_int8_entries.h says why);
// include only from files compiled for AVX2 or a level above it.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/blocks.h"

namespace offgrid::ops::cpu::quant {
namespace {

// The 32 signed values of a q5_0 block: v = nibble + 16 * fifth bit - 16 (byte j gets byte j / 8 of qh, then its
// bit j % 8).
inline __m256i q5_0_values(const tensor::BlockQ5_0 & B) {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B.qs)), m4 = _mm_set1_epi8(0x0f);
    const __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m4)),
                                                _mm_and_si128(_mm_srli_epi16(qs, 4), m4), 1);
    uint32_t qh;
    std::memcpy(&qh, B.qh, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i sixteen = _mm256_set1_epi8(16);
    const __m256i set = _mm256_cmpeq_epi8(
        _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), spread), bit), bit);
    return _mm256_sub_epi8(nib, _mm256_andnot_si256(set, sixteen));  // nibble - 16 where the fifth bit is clear
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

}  // namespace
}  // namespace offgrid::ops::cpu::quant
