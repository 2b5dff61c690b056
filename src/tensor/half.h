// The one implementation of the 16-bit float conversions (IEEE binary16 and bfloat16). Inline, so kernels'
// inner loops and the dequantisers pay no call per element.
//
// Widening (f16 -> f32, bf16 -> f32) is exact for every input, NaN payloads included, so any correct
// widening gives the same bits as ggml's (table, F16C or bit trick alike). Narrowing rounds to nearest even.
#pragma once

#include <bit>
#include <cstdint>

namespace offgrid::tensor {

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf / NaN with payload
    if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));  // rebias 15 -> 127
    // Zero or subnormal: the value is mant * 2^-24, exact in f32.
    const float mag = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
}

inline uint16_t f32_to_f16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        if (a == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
        // NaN: keep the top payload bits and force the quiet bit so it cannot become inf.
        return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    }
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
    if (a >= 0x38800000u) {
        // Normal half: drop 13 mantissa bits with round-to-nearest-even; a carry correctly bumps the exponent.
        uint32_t q = (a - 0x38000000u) >> 13;
        const uint32_t rem = a & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    // Subnormal half (units of 2^-24) or zero.
    const uint32_t e = a >> 23;
    if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
}

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace offgrid::tensor
