// avx2 row dequantisers of the K-quants (compiled with the avx2 flags; reached only through the dispatch
// when active_isa() allows it). Bit-identical to tensor::dequantize_row: the same f32 multiply and subtract per
// element as the reference, 8 elements per instruction, no fused multiply-add.
#include "ops/cpu/kernels_quant_common.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#endif

namespace offgrid::ops::cpu::quant {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

namespace {

using namespace tensor;

inline __m256i bytes_u32(const uint8_t * p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))); }
inline __m256 to_f32(__m256i v) { return _mm256_cvtepi32_ps(v); }

}  // namespace

bool avx2_compiled() { return true; }

void dequant_q4_k_avx2(const void * src, float * y, int64_t n) {
    const auto * x = static_cast<const BlockQ4_K *>(src);
    const __m256i low4 = _mm256_set1_epi32(0x0f);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
        const uint8_t * q = x[b].qs;
        for (int s = 0; s < 8; s += 2, q += 32, y += 64) {
            uint8_t sc, m;
            k4_scale_min(s, x[b].scales, sc, m);
            const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc)), m1 = _mm256_set1_ps(dmin * static_cast<float>(m));
            k4_scale_min(s + 1, x[b].scales, sc, m);
            const __m256 d2 = _mm256_set1_ps(d * static_cast<float>(sc)), m2 = _mm256_set1_ps(dmin * static_cast<float>(m));
            for (int l = 0; l < 32; l += 8) {
                const __m256i v = bytes_u32(q + l);
                _mm256_storeu_ps(y + l, _mm256_sub_ps(_mm256_mul_ps(d1, to_f32(_mm256_and_si256(v, low4))), m1));
                _mm256_storeu_ps(y + 32 + l, _mm256_sub_ps(_mm256_mul_ps(d2, to_f32(_mm256_srli_epi32(v, 4))), m2));
            }
        }
    }
}

void dequant_q5_k_avx2(const void * src, float * y, int64_t n) {
    const auto * x = static_cast<const BlockQ5_K *>(src);
    const __m256i low4 = _mm256_set1_epi32(0x0f), one = _mm256_set1_epi32(1);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
        const uint8_t * q = x[b].qs;
        const uint8_t * qh = x[b].qh;
        for (int s = 0; s < 8; s += 2, q += 32, y += 64) {
            uint8_t sc, m;
            k4_scale_min(s, x[b].scales, sc, m);
            const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc)), m1 = _mm256_set1_ps(dmin * static_cast<float>(m));
            k4_scale_min(s + 1, x[b].scales, sc, m);
            const __m256 d2 = _mm256_set1_ps(d * static_cast<float>(sc)), m2 = _mm256_set1_ps(dmin * static_cast<float>(m));
            for (int l = 0; l < 32; l += 8) {
                const __m256i v = bytes_u32(q + l), h = bytes_u32(qh + l);
                const __m256i h1 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, s), one), 4);
                const __m256i h2 = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, s + 1), one), 4);
                const __m256i q1 = _mm256_add_epi32(_mm256_and_si256(v, low4), h1);
                const __m256i q2 = _mm256_add_epi32(_mm256_srli_epi32(v, 4), h2);
                _mm256_storeu_ps(y + l, _mm256_sub_ps(_mm256_mul_ps(d1, to_f32(q1)), m1));
                _mm256_storeu_ps(y + 32 + l, _mm256_sub_ps(_mm256_mul_ps(d2, to_f32(q2)), m2));
            }
        }
    }
}

void dequant_q6_k_avx2(const void * src, float * y, int64_t n) {
    const auto * x = static_cast<const BlockQ6_K *>(src);
    const __m256i low4 = _mm256_set1_epi32(0x0f), two = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        const uint8_t * ql = x[b].ql;
        const uint8_t * qh = x[b].qh;
        const int8_t * sc = x[b].scales;
        for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l += 8) {
                const int is = l / 16;
                const __m256i a = bytes_u32(ql + l), c = bytes_u32(ql + l + 32), h = bytes_u32(qh + l);
                auto hbits = [&](int shift) { return _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, shift), two), 4); };
                const __m256i q1 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(a, low4), hbits(0)), bias);
                const __m256i q2 = _mm256_sub_epi32(_mm256_or_si256(_mm256_and_si256(c, low4), hbits(2)), bias);
                const __m256i q3 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(a, 4), hbits(4)), bias);
                const __m256i q4 = _mm256_sub_epi32(_mm256_or_si256(_mm256_srli_epi32(c, 4), hbits(6)), bias);
                _mm256_storeu_ps(y + l, _mm256_mul_ps(_mm256_set1_ps(d * static_cast<float>(sc[is])), to_f32(q1)));
                _mm256_storeu_ps(y + l + 32, _mm256_mul_ps(_mm256_set1_ps(d * static_cast<float>(sc[is + 2])), to_f32(q2)));
                _mm256_storeu_ps(y + l + 64, _mm256_mul_ps(_mm256_set1_ps(d * static_cast<float>(sc[is + 4])), to_f32(q3)));
                _mm256_storeu_ps(y + l + 96, _mm256_mul_ps(_mm256_set1_ps(d * static_cast<float>(sc[is + 6])), to_f32(q4)));
            }
        }
    }
}

#else

bool avx2_compiled() { return false; }
void dequant_q4_k_avx2(const void * src, float * y, int64_t n) { tensor::dequantize_row(tensor::ElemType::Q4_K, src, y, n); }
void dequant_q5_k_avx2(const void * src, float * y, int64_t n) { tensor::dequantize_row(tensor::ElemType::Q5_K, src, y, n); }
void dequant_q6_k_avx2(const void * src, float * y, int64_t n) { tensor::dequantize_row(tensor::ElemType::Q6_K, src, y, n); }

#endif

}  // namespace offgrid::ops::cpu::quant

