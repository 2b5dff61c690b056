// Weight-block decoders of the int16 kernels in AVX2 byte arithmetic, shared by kernels_quant_int16_avx2.cpp
// and kernels_quant_int16_avx512.cpp (include only from those files: it needs their target flags, and all of
// it has internal linkage, so each ISA file keeps its own copy). A decoder gives each group of 32 elements
// (group k = elements 32k..32k+31 of the block, in element order) as 32 signed bytes: the block's integer
// values exactly as kernels_quant_int16_scalar.cpp decodes them, plus the per-16 scales and the min multipliers.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "ops/cpu/kernels_quant_common.h"

// The decoders run once per weight block in the innermost loops: always inlined, so their vectors stay in
// registers (GCC otherwise outlines the larger ones and passes the block through memory).
#define OFFGRID_I16_INLINE inline __attribute__((always_inline))

namespace offgrid::ops::cpu::quant {
namespace {

using namespace tensor;

enum class Mins { None, Per32, Per16 };

struct KDecoded {
    __m256i g[8];       // 32 signed values per group
    __m256i sc16;       // 16 int16: scale of elements 16h..16h+15
    __m128i mins;       // Per32: 8 bytes (mins of the 8 groups); Per16: 16 bytes
    float d, dmin;
};

OFFGRID_I16_INLINE __m256i nibbles_lo(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
OFFGRID_I16_INLINE __m256i nibbles_hi(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }
OFFGRID_I16_INLINE __m256i load256(const void * p) { return _mm256_loadu_si256(static_cast<const __m256i *>(p)); }
OFFGRID_I16_INLINE __m128i load128(const void * p) { return _mm_loadu_si128(static_cast<const __m128i *>(p)); }

// Bit `bit` of every byte of v, as `value` or 0 (epi16 shifts keep each byte's bits inside it after the mask).
OFFGRID_I16_INLINE __m256i bit_as(__m256i v, int bit, int value_shift) {
    const __m256i mask = _mm256_set1_epi8(static_cast<char>(1 << value_shift));
    if (bit <= value_shift) return _mm256_and_si256(_mm256_slli_epi16(v, value_shift - bit), mask);
    return _mm256_and_si256(_mm256_srli_epi16(v, bit - value_shift), mask);
}

// 8 byte scales of 32-groups as 16 int16 scales of 16-halves.
OFFGRID_I16_INLINE __m256i per32_scales(uint64_t sc) {
    const __m128i b = _mm_cvtsi64_si128(static_cast<long long>(sc));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b));
}

struct DQ4K {
    using Block = BlockQ4_K;
    static constexpr Mins kMins = Mins::Per32;
    OFFGRID_I16_INLINE static void decode(const Block & b, KDecoded & k) {
        uint64_t sc, mn;
        k4_scales_mins_u64(b.scales, sc, mn);
        k.sc16 = per32_scales(sc);
        k.mins = _mm_cvtsi64_si128(static_cast<long long>(mn));
        for (int c = 0; c < 4; ++c) {
            const __m256i v = load256(b.qs + 32 * c);
            k.g[2 * c] = nibbles_lo(v);
            k.g[2 * c + 1] = nibbles_hi(v);
        }
        k.d = _cvtsh_ss(b.d);
        k.dmin = _cvtsh_ss(b.dmin);
    }
};
struct DQ5K {
    using Block = BlockQ5_K;
    static constexpr Mins kMins = Mins::Per32;
    OFFGRID_I16_INLINE static void decode(const Block & b, KDecoded & k) {
        uint64_t sc, mn;
        k4_scales_mins_u64(b.scales, sc, mn);
        k.sc16 = per32_scales(sc);
        k.mins = _mm_cvtsi64_si128(static_cast<long long>(mn));
        const __m256i h = load256(b.qh);
        for (int c = 0; c < 4; ++c) {
            const __m256i v = load256(b.qs + 32 * c);
            k.g[2 * c] = _mm256_or_si256(nibbles_lo(v), bit_as(h, 2 * c, 4));
            k.g[2 * c + 1] = _mm256_or_si256(nibbles_hi(v), bit_as(h, 2 * c + 1, 4));
        }
        k.d = _cvtsh_ss(b.d);
        k.dmin = _cvtsh_ss(b.dmin);
    }
};
struct DQ6K {
    using Block = BlockQ6_K;
    static constexpr Mins kMins = Mins::None;
    OFFGRID_I16_INLINE static void decode(const Block & b, KDecoded & k) {
        const __m256i m30 = _mm256_set1_epi8(0x30), b32 = _mm256_set1_epi8(32);
        k.sc16 = _mm256_cvtepi8_epi16(load128(b.scales));
        for (int h = 0; h < 2; ++h) {
            const __m256i a = load256(b.ql + 64 * h), c = load256(b.ql + 64 * h + 32), hb = load256(b.qh + 32 * h);
            const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30);
            const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30);
            const __m256i h2 = _mm256_and_si256(hb, m30);
            const __m256i h3 = _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30);
            k.g[4 * h + 0] = _mm256_sub_epi8(_mm256_or_si256(nibbles_lo(a), h0), b32);
            k.g[4 * h + 1] = _mm256_sub_epi8(_mm256_or_si256(nibbles_lo(c), h1), b32);
            k.g[4 * h + 2] = _mm256_sub_epi8(_mm256_or_si256(nibbles_hi(a), h2), b32);
            k.g[4 * h + 3] = _mm256_sub_epi8(_mm256_or_si256(nibbles_hi(c), h3), b32);
        }
        k.d = _cvtsh_ss(b.d);
        k.dmin = 0;
    }
};
// unpack_q3_k_scales in vector form (a byte-by-byte loop compiles to 16 dependent byte inserts): scale j's low
// nibble is byte j of the first 8 (j < 8) or its high nibble (j >= 8), its high two bits are bits 2 (j / 4) of
// byte 8 + j % 4; the result is the signed 6-bit value minus 32, one byte per scale.
OFFGRID_I16_INLINE __m128i q3_k_scales(const uint8_t * s) {
    uint64_t lo8;
    uint32_t hi4;
    std::memcpy(&lo8, s, 8);
    std::memcpy(&hi4, s + 8, 4);
    const __m128i m4 = _mm_set1_epi8(0x0f), x = _mm_cvtsi64_si128(static_cast<long long>(lo8));
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(x, m4), _mm_and_si128(_mm_srli_epi16(x, 4), m4));
    const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(hi4)), _mm_setr_epi32(0, 2, 4, 6)),
                                       _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
}

struct DQ3K {
    using Block = BlockQ3_K;
    static constexpr Mins kMins = Mins::None;
    OFFGRID_I16_INLINE static void decode(const Block & b, KDecoded & k) {
        k.sc16 = _mm256_cvtepi8_epi16(q3_k_scales(b.scales));
        const __m256i three = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
        const __m256i hm = load256(b.hmask);
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load256(b.qs + 32 * h);
            for (int g = 0; g < 4; ++g) {
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * g), three);
                const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + g)));
                const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                k.g[4 * h + g] = _mm256_sub_epi8(low, _mm256_andnot_si256(set, four));  // low - 4 * !high
            }
        }
        k.d = _cvtsh_ss(b.d);
        k.dmin = 0;
    }
};
struct DQ2K {
    using Block = BlockQ2_K;
    static constexpr Mins kMins = Mins::Per16;
    OFFGRID_I16_INLINE static void decode(const Block & b, KDecoded & k) {
        const __m128i s = load128(b.scales), low4 = _mm_set1_epi8(0x0f);
        k.sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(s, low4));
        k.mins = _mm_and_si128(_mm_srli_epi16(s, 4), low4);
        const __m256i three = _mm256_set1_epi8(3);
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load256(b.qs + 32 * h);
            for (int g = 0; g < 4; ++g) k.g[4 * h + g] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * g), three);
        }
        k.d = _cvtsh_ss(b.d);
        k.dmin = _cvtsh_ss(b.dmin);
    }
};

OFFGRID_I16_INLINE __m256i iq4_lookup(__m256i idx) {
    const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
    return _mm256_shuffle_epi8(table, idx);
}
// 16 bytes of nibbles of a block of 32 as its 32 indices in element order (low nibbles, then high).
OFFGRID_I16_INLINE __m256i nibbles32(const uint8_t * qs) {
    const __m128i v = load128(qs), low4 = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
}

struct DIQ4XS {
    using Block = BlockIQ4_XS;
    static constexpr Mins kMins = Mins::None;
    OFFGRID_I16_INLINE static void decode(const Block & b, KDecoded & k) {
        // iq4_xs_scale of the 8 groups, one byte each, by spreading the bit fields in a 64-bit register (bytes
        // stored one by one and read back as a vector stall on store forwarding), each byte twice (16-halves).
        uint32_t l32;
        std::memcpy(&l32, b.scales_l, 4);
        uint64_t lo = l32, hi = b.scales_h;
        lo = (lo | (lo << 16)) & 0x0000ffff0000ffffull;
        lo = (lo | (lo << 8)) & 0x00ff00ff00ff00ffull;
        lo = (lo | (lo << 4)) & 0x0f0f0f0f0f0f0f0full;  // byte ib: low 4 bits of scale ib
        hi = (hi | (hi << 24)) & 0x000000ff000000ffull;
        hi = (hi | (hi << 12)) & 0x000f000f000f000full;
        hi = (hi | (hi << 6)) & 0x0303030303030303ull;  // byte ib: its high 2 bits
        const __m128i s8 = _mm_sub_epi8(_mm_cvtsi64_si128(static_cast<long long>(lo | (hi << 4))), _mm_set1_epi8(32));
        k.sc16 = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s8, s8));
        for (int ib = 0; ib < 8; ++ib) k.g[ib] = iq4_lookup(nibbles32(b.qs + 16 * ib));
        k.d = _cvtsh_ss(b.d);
        k.dmin = 0;
    }
};

// Blocks of 32: the 32 signed values of a block.
struct DQ80 {
    using Block = BlockQ8_0;
    OFFGRID_I16_INLINE static __m256i values(const Block & b) { return load256(b.qs); }
};
struct DQ40 {
    using Block = BlockQ4_0;
    OFFGRID_I16_INLINE static __m256i values(const Block & b) { return _mm256_sub_epi8(nibbles32(b.qs), _mm256_set1_epi8(8)); }
};
struct DIQ4NL {
    using Block = BlockIQ4_NL;
    OFFGRID_I16_INLINE static __m256i values(const Block & b) { return iq4_lookup(nibbles32(b.qs)); }
};
// Per byte j of a 32-element block, all ones where bit j of qh (its fifth bits) is set: byte j takes byte j / 8 of
// qh, then its bit j % 8.
OFFGRID_I16_INLINE __m256i fifth_bits_set(uint32_t qh) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(qh)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bits = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bits), bits);
}

struct DQ50 {
    using Block = BlockQ5_0;
    OFFGRID_I16_INLINE static __m256i values(const Block & b) {
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
        // q - 16 = nibble - 16 where bit j of qh is clear: one masked subtraction, the mask register being ~qh.
        const __m256i nib = nibbles32(b.qs);
        return _mm256_mask_sub_epi8(nib, static_cast<__mmask32>(~qh), nib, _mm256_set1_epi8(16));
#else
        // nibble - 16 where the fifth bit is clear.
        return _mm256_sub_epi8(nibbles32(b.qs), _mm256_andnot_si256(fifth_bits_set(qh), _mm256_set1_epi8(16)));
#endif
    }
};
// q4_1 / q5_1: the unsigned quants (their minimum is added per block by the row kernels, as the contract says).
struct DQ41 {
    using Block = BlockQ4_1;
    static constexpr bool kMin = true;
    OFFGRID_I16_INLINE static __m256i values(const Block & b) { return nibbles32(b.qs); }
};
struct DQ51 {
    using Block = BlockQ5_1;
    static constexpr bool kMin = true;
    OFFGRID_I16_INLINE static __m256i values(const Block & b) {
        uint32_t qh;
        std::memcpy(&qh, b.qh, 4);
        return _mm256_or_si256(nibbles32(b.qs), _mm256_and_si256(fifth_bits_set(qh), _mm256_set1_epi8(16)));
    }
};

OFFGRID_I16_INLINE float reduce8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace offgrid::ops::cpu::quant
