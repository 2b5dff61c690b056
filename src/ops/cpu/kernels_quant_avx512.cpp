// avx512 row dequantisers of the K-quants (compiled with the avx512 flags; reached only through the dispatch
// when active_isa() allows it). Bit-identical to tensor::dequantize_row: the same f32 multiply and subtract per
// element as the reference, 16 elements per instruction, no fused multiply-add.
#include "ops/cpu/kernels_quant_common.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
// GCC 12's avx512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized reports as a use of
// an uninitialised value once inlined (a false positive of the header, not of this code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace offgrid::ops::cpu::quant {

#if defined(__AVX512F__) && defined(__AVX512BW__)

namespace {

using namespace tensor;

inline __m512i bytes_u32(const uint8_t * p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
inline __m512 to_f32(__m512i v) { return _mm512_cvtepi32_ps(v); }

}  // namespace

bool avx512_compiled() { return true; }

void dequant_q4_k_avx512(const void * src, float * y, int64_t n) {
    const auto * x = static_cast<const BlockQ4_K *>(src);
    const __m512i low4 = _mm512_set1_epi32(0x0f);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
        const uint8_t * q = x[b].qs;
        for (int s = 0; s < 8; s += 2, q += 32, y += 64) {
            uint8_t sc, m;
            k4_scale_min(s, x[b].scales, sc, m);
            const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc)), m1 = _mm512_set1_ps(dmin * static_cast<float>(m));
            k4_scale_min(s + 1, x[b].scales, sc, m);
            const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(sc)), m2 = _mm512_set1_ps(dmin * static_cast<float>(m));
            for (int l = 0; l < 32; l += 16) {
                const __m512i v = bytes_u32(q + l);
                _mm512_storeu_ps(y + l, _mm512_sub_ps(_mm512_mul_ps(d1, to_f32(_mm512_and_si512(v, low4))), m1));
                _mm512_storeu_ps(y + 32 + l, _mm512_sub_ps(_mm512_mul_ps(d2, to_f32(_mm512_srli_epi32(v, 4))), m2));
            }
        }
    }
}

void dequant_q5_k_avx512(const void * src, float * y, int64_t n) {
    const auto * x = static_cast<const BlockQ5_K *>(src);
    const __m512i low4 = _mm512_set1_epi32(0x0f), one = _mm512_set1_epi32(1);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
        const uint8_t * q = x[b].qs;
        const uint8_t * qh = x[b].qh;
        for (int s = 0; s < 8; s += 2, q += 32, y += 64) {
            uint8_t sc, m;
            k4_scale_min(s, x[b].scales, sc, m);
            const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc)), m1 = _mm512_set1_ps(dmin * static_cast<float>(m));
            k4_scale_min(s + 1, x[b].scales, sc, m);
            const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(sc)), m2 = _mm512_set1_ps(dmin * static_cast<float>(m));
            for (int l = 0; l < 32; l += 16) {
                const __m512i v = bytes_u32(q + l), h = bytes_u32(qh + l);
                const __m512i h1 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, s), one), 4);
                const __m512i h2 = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, s + 1), one), 4);
                const __m512i q1 = _mm512_add_epi32(_mm512_and_si512(v, low4), h1);
                const __m512i q2 = _mm512_add_epi32(_mm512_srli_epi32(v, 4), h2);
                _mm512_storeu_ps(y + l, _mm512_sub_ps(_mm512_mul_ps(d1, to_f32(q1)), m1));
                _mm512_storeu_ps(y + 32 + l, _mm512_sub_ps(_mm512_mul_ps(d2, to_f32(q2)), m2));
            }
        }
    }
}

void dequant_q6_k_avx512(const void * src, float * y, int64_t n) {
    const auto * x = static_cast<const BlockQ6_K *>(src);
    const __m512i low4 = _mm512_set1_epi32(0x0f), two = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        const uint8_t * ql = x[b].ql;
        const uint8_t * qh = x[b].qh;
        const int8_t * sc = x[b].scales;
        for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l += 16) {
                const int is = l / 16;
                const __m512i a = bytes_u32(ql + l), c = bytes_u32(ql + l + 32), h = bytes_u32(qh + l);
                auto hbits = [&](int shift) { return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, shift), two), 4); };
                const __m512i q1 = _mm512_sub_epi32(_mm512_or_si512(_mm512_and_si512(a, low4), hbits(0)), bias);
                const __m512i q2 = _mm512_sub_epi32(_mm512_or_si512(_mm512_and_si512(c, low4), hbits(2)), bias);
                const __m512i q3 = _mm512_sub_epi32(_mm512_or_si512(_mm512_srli_epi32(a, 4), hbits(4)), bias);
                const __m512i q4 = _mm512_sub_epi32(_mm512_or_si512(_mm512_srli_epi32(c, 4), hbits(6)), bias);
                _mm512_storeu_ps(y + l, _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[is])), to_f32(q1)));
                _mm512_storeu_ps(y + l + 32, _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[is + 2])), to_f32(q2)));
                _mm512_storeu_ps(y + l + 64, _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[is + 4])), to_f32(q3)));
                _mm512_storeu_ps(y + l + 96, _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[is + 6])), to_f32(q4)));
            }
        }
    }
}

#else

bool avx512_compiled() { return false; }
void dequant_q4_k_avx512(const void * src, float * y, int64_t n) { tensor::dequantize_row(tensor::ElemType::Q4_K, src, y, n); }
void dequant_q5_k_avx512(const void * src, float * y, int64_t n) { tensor::dequantize_row(tensor::ElemType::Q5_K, src, y, n); }
void dequant_q6_k_avx512(const void * src, float * y, int64_t n) { tensor::dequantize_row(tensor::ElemType::Q6_K, src, y, n); }

#endif

}  // namespace offgrid::ops::cpu::quant

