// dequantize_row per type on hand-made blocks. The expected values come from an element-by-index reading of
// each format written independently here (which byte, which bits, which scale element i uses), computed in
// double. Scales are powers of two so every product is exact and the order of operations cannot matter; the
// operation order itself is checked bit for bit against ggml by the golden hash test (tests/quant).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/types.h"

using namespace offgrid::tensor;

namespace {

uint16_t rd16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
double h(const uint8_t * p) { return f16_to_f32(rd16(p)); }
int bit(const uint8_t * bytes, int i) { return (bytes[i / 8] >> (i % 8)) & 1; }

const int kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// 6-bit scale/min number j of the 12-byte q4_K/q5_K field.
void k4(const uint8_t * s, int j, int & sc, int & m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) + 16 * (s[j - 4] >> 6);
        m = (s[j + 4] >> 4) + 16 * (s[j] >> 6);
    }
}

// Element i of the block at b, by the format's definition.
double element(ElemType t, const uint8_t * b, int i) {
    switch (t) {
    case ElemType::Q4_0: {
        const int q = i < 16 ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
        return h(b) * (q - 8);
    }
    case ElemType::Q4_1: {
        const int q = i < 16 ? (b[4 + i] & 15) : (b[4 + i - 16] >> 4);
        return h(b) * q + h(b + 2);
    }
    case ElemType::Q5_0: {
        const int q = (i < 16 ? (b[6 + i] & 15) : (b[6 + i - 16] >> 4)) + 16 * bit(b + 2, i);
        return h(b) * (q - 16);
    }
    case ElemType::Q5_1: {
        const int q = (i < 16 ? (b[8 + i] & 15) : (b[8 + i - 16] >> 4)) + 16 * bit(b + 4, i);
        return h(b) * q + h(b + 2);
    }
    case ElemType::Q8_0: return h(b) * static_cast<int8_t>(b[2 + i]);
    case ElemType::Q2_K: {  // scales[16] qs[64] d dmin
        const int half = i / 128, g = (i % 128) / 32, l = i % 32;
        const int q = (b[16 + 32 * half + l] >> (2 * g)) & 3;
        const int s = b[i / 16];
        return h(b + 80) * (s & 15) * q - h(b + 82) * (s >> 4);
    }
    case ElemType::Q3_K: {  // hmask[32] qs[64] scales[12] d
        const int half = i / 128, g = (i % 128) / 32, l = i % 32;
        const int low = (b[32 + 32 * half + l] >> (2 * g)) & 3;
        const int hi = (b[l] >> (4 * half + g)) & 1;
        const int j = i / 16;
        const uint8_t * s = b + 96;
        const int sc = ((j < 8 ? s[j] : s[j - 8] >> 4) & 15) + 16 * ((s[8 + j % 4] >> (2 * (j / 4))) & 3) - 32;
        return h(b + 108) * sc * (low + 4 * hi - 4);
    }
    case ElemType::Q4_K: {  // d dmin scales[12] qs[128]
        const int r = i % 64;
        const uint8_t byte = b[16 + 32 * (i / 64) + r % 32];
        const int q = r < 32 ? (byte & 15) : (byte >> 4);
        int sc, m;
        k4(b + 4, i / 32, sc, m);
        return h(b) * sc * q - h(b + 2) * m;
    }
    case ElemType::Q5_K: {  // d dmin scales[12] qh[32] qs[128]
        const int r = i % 64;
        const uint8_t byte = b[48 + 32 * (i / 64) + r % 32];
        const int q = (r < 32 ? (byte & 15) : (byte >> 4)) + 16 * ((b[16 + r % 32] >> (i / 32)) & 1);
        int sc, m;
        k4(b + 4, i / 32, sc, m);
        return h(b) * sc * q - h(b + 2) * m;
    }
    case ElemType::Q6_K: {  // ql[128] qh[64] scales[16] d
        const int half = i / 128, g = (i % 128) / 32, l = i % 32;
        const uint8_t lowbyte = b[64 * half + l + 32 * (g & 1)];
        const int low = g < 2 ? (lowbyte & 15) : (lowbyte >> 4);
        const int hi = (b[128 + 32 * half + l] >> (2 * g)) & 3;
        return h(b + 208) * static_cast<int8_t>(b[192 + i / 16]) * (low + 16 * hi - 32);
    }
    case ElemType::IQ4_NL: {
        const int q = i < 16 ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
        return h(b) * kIq4[q];
    }
    case ElemType::IQ4_XS: {  // d scales_h scales_l[4] qs[128]
        const int ib = i / 32, r = i % 32;
        const uint8_t byte = b[8 + 16 * ib + r % 16];
        const int q = r < 16 ? (byte & 15) : (byte >> 4);
        const int sc = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) + 16 * ((rd16(b + 2) >> (2 * ib)) & 3) - 32;
        return h(b) * sc * kIq4[q];
    }
    default: ADD_FAILURE() << "no element reader"; return 0;
    }
}

// Offsets of the f16 scale fields of each block type (set to powers of two so products are exact).
std::vector<int> f16_fields(ElemType t) {
    switch (t) {
    case ElemType::Q4_0: case ElemType::Q5_0: case ElemType::Q8_0: case ElemType::IQ4_NL: case ElemType::IQ4_XS:
        return {0};
    case ElemType::Q4_1: case ElemType::Q5_1: case ElemType::Q4_K: case ElemType::Q5_K: return {0, 2};
    case ElemType::Q2_K: return {80, 82};
    case ElemType::Q3_K: return {108};
    case ElemType::Q6_K: return {208};
    default: return {};
    }
}

const ElemType kBlockTypes[] = {ElemType::Q4_0, ElemType::Q4_1, ElemType::Q5_0, ElemType::Q5_1,
                                ElemType::Q8_0, ElemType::Q2_K, ElemType::Q3_K, ElemType::Q4_K,
                                ElemType::Q5_K, ElemType::Q6_K, ElemType::IQ4_NL, ElemType::IQ4_XS};

}  // namespace

TEST(Dequantize, RandomBlocksMatchTheFormatDefinition) {
    std::mt19937 rng(1234);
    for (ElemType t : kBlockTypes) {
        const TypeTraits & tr = traits(t);
        SCOPED_TRACE(std::string(tr.name));
        const int n_blocks = 3;
        std::vector<uint8_t> data(tr.block_bytes * n_blocks);
        for (auto & byte : data) byte = static_cast<uint8_t>(rng());
        for (int b = 0; b < n_blocks; ++b) {
            for (int off : f16_fields(t)) {
                // +-2^e, e in -6..3 (and now and then zero).
                const int e = static_cast<int>(rng() % 10) - 6;
                float v = std::ldexp(1.0f, e) * ((rng() & 1) ? -1.0f : 1.0f);
                if (rng() % 16 == 0) v = 0.0f;
                const uint16_t bits = f32_to_f16(v);
                std::memcpy(data.data() + b * tr.block_bytes + off, &bits, 2);
            }
        }
        std::vector<float> out(tr.block_size * n_blocks);
        dequantize_row(t, data.data(), out.data(), out.size());
        for (int b = 0; b < n_blocks; ++b) {
            for (uint32_t i = 0; i < tr.block_size; ++i) {
                const double want = element(t, data.data() + b * tr.block_bytes, static_cast<int>(i));
                ASSERT_EQ(out[b * tr.block_size + i], static_cast<float>(want)) << "block " << b << " element " << i;
            }
        }
    }
}

TEST(Dequantize, Q4_0AndQ4_1HandMade) {
    BlockQ4_0 a{};
    a.d = f32_to_f16(0.5f);
    for (int j = 0; j < 16; ++j) a.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float out[32];
    dequantize_row(ElemType::Q4_0, &a, out, 32);
    EXPECT_EQ(out[0], -4.0f);    // (0 - 8) * 0.5
    EXPECT_EQ(out[15], 3.5f);    // (15 - 8) * 0.5
    EXPECT_EQ(out[16], 3.5f);    // high nibble of byte 0 = 15
    EXPECT_EQ(out[31], -4.0f);
    BlockQ4_1 b{};
    b.d = f32_to_f16(0.25f);
    b.m = f32_to_f16(-1.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    dequantize_row(ElemType::Q4_1, &b, out, 32);
    EXPECT_EQ(out[0], -1.0f);
    EXPECT_EQ(out[15], 2.75f);
    EXPECT_EQ(out[16], 2.75f);
}

TEST(Dequantize, Q5_0FifthBit) {
    BlockQ5_0 b{};
    b.d = f32_to_f16(1.0f);
    const uint32_t qh = 0x80000001u;  // fifth bit of elements 0 and 31
    std::memcpy(b.qh, &qh, 4);
    for (int j = 0; j < 16; ++j) b.qs[j] = 0xff;
    float out[32];
    dequantize_row(ElemType::Q5_0, &b, out, 32);
    EXPECT_EQ(out[0], 15.0f);    // 31 - 16
    EXPECT_EQ(out[1], -1.0f);    // 15 - 16
    EXPECT_EQ(out[31], 15.0f);
    EXPECT_EQ(out[30], -1.0f);
}

TEST(Dequantize, Q4_KSubBlockScalesAndMins) {
    BlockQ4_K b{};
    b.d = f32_to_f16(1.0f);
    b.dmin = f32_to_f16(0.5f);
    // Sub-block 5: scale 37 (low 4 bits 5 in scales[9], top bits 2 in scales[1] bits 6-7), min 18 (low 2 in
    // scales[9] high nibble, top bits 1 in scales[5] bits 6-7).
    b.scales[9] = static_cast<uint8_t>(5 | (2 << 4));
    b.scales[1] = static_cast<uint8_t>(2 << 6);
    b.scales[5] = static_cast<uint8_t>(1 << 6);
    // Sub-block 0: scale 3, min 4.
    b.scales[0] |= 3;
    b.scales[4] |= 4;
    b.qs[0] = 0x07;           // element 0: q 7
    b.qs[64 + 1] = 0x90;      // sub-block 5 is the high nibbles of bytes 64..95: element 161 has q 9
    float out[256];
    dequantize_row(ElemType::Q4_K, &b, out, 256);
    EXPECT_EQ(out[0], 3.0f * 7 - 0.5f * 4);
    EXPECT_EQ(out[1], -2.0f);
    EXPECT_EQ(out[161], 37.0f * 9 - 0.5f * 18);
    EXPECT_EQ(out[160], -9.0f);
}

TEST(Dequantize, Q6_KAndQ3_KSigns) {
    BlockQ6_K b{};
    b.d = f32_to_f16(0.5f);
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j % 2 ? -2 : 3);
    float out[256];
    dequantize_row(ElemType::Q6_K, &b, out, 256);
    EXPECT_EQ(out[0], 0.5f * 3 * -32);   // all quant bits zero: q - 32
    EXPECT_EQ(out[16], 0.5f * -2 * -32);
    BlockQ3_K c{};
    c.d = f32_to_f16(1.0f);
    std::memset(c.scales, 0, sizeof c.scales);  // every scale 0 - 32 = -32
    c.hmask[0] = 1;                              // element 0 keeps its high bit: q 0; element 1: 0 - 4
    dequantize_row(ElemType::Q3_K, &c, out, 256);
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 128.0f);
}

TEST(Dequantize, Iq4ValuesAndXsScales) {
    BlockIQ4_NL b{};
    b.d = f32_to_f16(1.0f);
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float out[256];
    dequantize_row(ElemType::IQ4_NL, &b, out, 32);
    EXPECT_EQ(out[0], -127.0f);
    EXPECT_EQ(out[15], 113.0f);
    EXPECT_EQ(out[16], 113.0f);
    BlockIQ4_XS x{};
    x.d = f32_to_f16(0.5f);
    x.scales_l[0] = 0x21;          // sub-block 0 low 1, sub-block 1 low 2
    x.scales_h = 0x0002 | 0x0004;  // sub-block 0 high 2 (scale 33 - 32 = 1), sub-block 1 high 1 (18 - 32)
    for (auto & q : x.qs) q = 0x88;
    dequantize_row(ElemType::IQ4_XS, &x, out, 256);
    EXPECT_EQ(out[0], 0.5f * 1 * 1);
    EXPECT_EQ(out[32], 0.5f * -14 * 1);
    EXPECT_EQ(out[64], 0.5f * -32 * 1);  // scale bits zero
}

TEST(Dequantize, Q8_KActivationBlocks) {
    BlockQ8_K b{};
    b.d = 0.25f;
    for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
    std::vector<float> out(256);
    dequantize_row(ElemType::Q8_K, &b, out.data(), 256);
    EXPECT_EQ(out[0], -32.0f);
    EXPECT_EQ(out[255], 31.75f);
}
