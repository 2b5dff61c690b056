// Inline conversions of 16-bit floats for the kernels' inner loops (the tensor module has the same
// conversions out of line; these are here so a dot product does not pay a call per element).
#pragma once

#include <cstdint>
#include <cstring>

namespace offgrid::ops {

inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {
            // Subnormal: the value is mant * 2^-24, exact in float.
            float f = static_cast<float>(mant) * (1.0f / 16777216.0f);
            std::memcpy(&bits, &f, 4);
            bits |= sign;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

// Round to nearest even; overflow gives infinity, NaN stays NaN.
inline uint16_t float_to_half(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;           // NaN
    if (abs >= 0x477ff000u) return sign | 0x7c00u;          // rounds to >= 65520: infinity
    if (abs < 0x38800000u) {
        // Result is subnormal or zero: value / 2^-24, rounded to nearest even by the float addition.
        float a;
        std::memcpy(&a, &abs, 4);
        const float scaled = a * 16777216.0f;  // exact (power of two)
        // Round to integer, ties to even, via the magic-number trick.
        const float r = (scaled + 8388608.0f) - 8388608.0f;
        return sign | static_cast<uint16_t>(r);
    }
    const uint32_t mant_round = abs + 0xfffu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>((mant_round - 0x38000000u) >> 13);
}

inline float bf16_to_float(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

inline uint16_t float_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace offgrid::ops
