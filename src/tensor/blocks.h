// Block layouts of every quantised weight and activation type offgrid reads: the one place that knows them.
//
// Each struct is byte for byte ggml's block of the same name (ggml-common.h; the formats are public facts of
// the GGUF ecosystem): little-endian fields, no padding (checked by the static_asserts below), f16 fields
// kept as raw uint16_t bits. Data in a GGUF mapping is at least 2-byte aligned and every block size below is
// even, so a row pointer may be viewed as an array of these structs. The type table (types.cpp) takes its
// block sizes and byte counts from here.
//
// Conventions for the quants of a block of 32 (the "legacy" types): element j < 16 is the low nibble of
// qs[j], element j + 16 the high nibble; a fifth bit for element j is bit j of the 32-bit qh.
// K-quants group 256 elements in a super-block with an f16 scale d (and dmin for the types with mins)
// and 6-bit (q4_K, q5_K: 8 sub-blocks of 32), 4-bit (q2_K: 16 of 16), 6-bit signed (q3_K: 16 of 16) or 8-bit
// (q6_K: 16 of 16) sub-block scales.
#pragma once

#include <cstdint>

namespace offgrid::tensor {

inline constexpr int kQK = 32;    // elements per block of the legacy types, q8_0/q8_1 and iq4_nl
inline constexpr int kQK_K = 256; // elements per K-quant / iq4_xs / q8_K super-block

struct BlockQ4_0 {
    uint16_t d;            // f16 scale
    uint8_t qs[kQK / 2];   // x = d * (q - 8)
};
struct BlockQ4_1 {
    uint16_t d, m;         // f16 scale and minimum
    uint8_t qs[kQK / 2];   // x = d * q + m
};
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];         // fifth bits, bit j for element j (read as one little-endian uint32)
    uint8_t qs[kQK / 2];   // x = d * (q - 16)
};
struct BlockQ5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[kQK / 2];   // x = d * q + m
};
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[kQK];        // x = d * q
};
struct BlockQ8_1 {         // activations of the q4_1 / q5_1 dot products
    uint16_t d;            // f16 scale
    uint16_t s;            // f16 of d * sum(qs)
    int8_t qs[kQK];
};

struct BlockQ2_K {
    uint8_t scales[kQK_K / 16];  // per 16: low nibble scale, high nibble min
    uint8_t qs[kQK_K / 4];       // 2-bit quants; see dequantize_row for the order
    uint16_t d, dmin;            // x = d * scale * q - dmin * min
};
struct BlockQ3_K {
    uint8_t hmask[kQK_K / 8];    // third bit; a clear bit subtracts 4
    uint8_t qs[kQK_K / 4];       // low 2 bits
    uint8_t scales[12];          // 16 six-bit scales, biased by 32 (see unpack_q3_k_scales)
    uint16_t d;                  // x = d * (scale - 32) * (q - 4 * !hbit)
};
struct BlockQ4_K {
    uint16_t d, dmin;
    uint8_t scales[12];          // 8 six-bit scales and 8 six-bit mins (see k4_scale_min)
    uint8_t qs[kQK_K / 2];       // per 64: 32 bytes, low nibbles first sub-block, high nibbles second
};
struct BlockQ5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[kQK_K / 8];       // fifth bits: sub-block s uses bit s of qh[l]
    uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
    uint8_t ql[kQK_K / 2];       // low 4 bits
    uint8_t qh[kQK_K / 4];       // high 2 bits
    int8_t scales[kQK_K / 16];   // signed 8-bit scales of 16 elements
    uint16_t d;                  // x = d * scale * (q - 32)
};
struct BlockIQ4_NL {
    uint16_t d;
    uint8_t qs[kQK / 2];         // x = d * kIq4nlValues[q]
};
struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;           // high 2 bits of 8 six-bit scales
    uint8_t scales_l[kQK_K / 64]; // low 4 bits, two per byte
    uint8_t qs[kQK_K / 2];       // x = d * (scale - 32) * kIq4nlValues[q]
};
struct BlockQ8_K {               // activations of the K-quant and iq4_xs dot products
    float d;                     // f32 scale
    int8_t qs[kQK_K];
    int16_t bsums[kQK_K / 16];   // sums of each 16 quants
};

// offgrid's 16-bit activation block (not a ggml format; the integer dot kernels' activations, see
// docs/kernels.md): x = d * qs[i] with d = max|x| / 16383 over the 256 elements (15-bit quants, so the integer
// kernels' int32 sums cannot overflow). dsum16 / dsum32 are d times the exact integer sum of each 16 / 32 quants
// (one f32 rounding; the min terms of q2_K, q4_K, q5_K). 640 bytes, so that qs of every block of a 64-byte
// aligned row is 64-byte aligned. A row of n elements holds ceil(n / 256) blocks, the last one zero-padded
// (its d is the partial block's own max|x| / 16383).
struct BlockQ16_K {
    int16_t qs[kQK_K];
    float dsum16[kQK_K / 16];
    float dsum32[kQK_K / 32];
    float d;
    uint8_t pad[28];
};
static_assert(sizeof(BlockQ16_K) == 640);

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

// The 16 non-linear levels of iq4_nl / iq4_xs.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Scale and min of sub-block j (0..7) of a q4_K / q5_K super-block: j < 4 sit in the low 6 bits of bytes j
// and j + 4; j >= 4 take their low 4 bits from byte j + 4 and their top 2 bits from the spare top bits of
// bytes j - 4 (scale) and j (min).
inline void k4_scale_min(int j, const uint8_t * q, uint8_t & scale, uint8_t & min) {
    if (j < 4) {
        scale = q[j] & 63;
        min = q[j + 4] & 63;
    } else {
        scale = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// The 16 scales of a q3_K super-block, unbiased (range -32..31). Scale j has its low nibble in byte j % 8
// (low nibble for j < 8, high for j >= 8) and its top 2 bits in byte 8 + j % 4 at bit 2 * (j / 4).
inline void unpack_q3_k_scales(const uint8_t * s, int8_t out[16]) {
    for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
        const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = static_cast<int8_t>((low | (high << 4)) - 32);
    }
}

// Six-bit scale of sub-block ib (0..7) of an iq4_xs super-block, unbiased (range -32..31).
inline int iq4_xs_scale(const BlockIQ4_XS & b, int ib) {
    const int low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
    const int high = (b.scales_h >> (2 * ib)) & 3;
    return (low | (high << 4)) - 32;
}

}  // namespace offgrid::tensor
