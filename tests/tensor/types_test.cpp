// Element-type table, f16/bf16 conversions, dequantisation and the encoders.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/error.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

using namespace offgrid::tensor;

TEST(TypeTable, KnownBlockLayouts) {
    struct Row {
        uint32_t id;
        const char * name;
        uint32_t block, bytes;
    };
    // ggml's block structs (ggml-common.h), as listed by gguf-py's GGML_QUANT_SIZES.
    const Row rows[] = {
        {0, "f32", 1, 4},        {1, "f16", 1, 2},         {2, "q4_0", 32, 18},      {3, "q4_1", 32, 20},
        {6, "q5_0", 32, 22},     {7, "q5_1", 32, 24},      {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},
        {10, "q2_K", 256, 84},   {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
        {14, "q6_K", 256, 210},  {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66}, {17, "iq2_xs", 256, 74},
        {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},  {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},
        {22, "iq2_s", 256, 82},  {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
        {26, "i32", 1, 4},       {27, "i64", 1, 8},        {28, "f64", 1, 8},        {29, "iq1_m", 256, 56},
        {30, "bf16", 1, 2},      {34, "tq1_0", 256, 54},   {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17},
        {40, "nvfp4", 64, 36},   {41, "q1_0", 128, 18},    {42, "q2_0", 64, 18},
    };
    for (const Row & row : rows) {
        SCOPED_TRACE(row.name);
        const auto t = type_traits(row.id);
        ASSERT_TRUE(t.has_value());
        EXPECT_EQ(t->name, row.name);
        EXPECT_EQ(t->block_size, row.block);
        EXPECT_EQ(t->block_bytes, row.bytes);
        const bool readable = row.id <= 3 || (row.id >= 6 && row.id <= 15) || row.id == 20 || row.id == 23 ||
                              row.id == 30;
        EXPECT_EQ(t->can_dequantize, readable);
    }
    for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 43u, 44u, 1000u, 0xffffffffu}) {
        EXPECT_FALSE(type_traits(removed).has_value()) << removed;
    }
    EXPECT_EQ(row_bytes(ElemType::Q8_0, 64), 68u);
    EXPECT_EQ(row_bytes(ElemType::Q4_K, 512), 288u);
    EXPECT_EQ(row_bytes(ElemType::F16, 3), 6u);
}

TEST(F16, KnownValues) {
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
    EXPECT_EQ(f32_to_f16(0.1f), 0x2e66);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // halfway to the next binade rounds up to inf
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);       // tie rounds to even (0)
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);       // tie 1.5 rounds to even (2)
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even stays
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie, odd rounds up
    const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x3ff, 0);
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_TRUE(std::isinf(f16_to_f32(0xfc00)));
    EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

TEST(F16, EveryNonNanHalfRoundTrips) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN
        ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << std::hex << h;
    }
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (IEEE, round to nearest even) is an independent reference.
TEST(F16, MatchesCompilerConversion) {
    for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 65521) {
        const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
        if (std::isnan(f)) continue;
        const _Float16 ref = static_cast<_Float16>(f);
        ASSERT_EQ(f32_to_f16(f), std::bit_cast<uint16_t>(ref)) << std::hex << bits;
        ASSERT_EQ(std::bit_cast<uint32_t>(f16_to_f32(std::bit_cast<uint16_t>(ref))),
                  std::bit_cast<uint32_t>(static_cast<float>(ref)));
    }
}
#endif

TEST(BF16, RoundsToNearestEven) {
    auto from_bits = [](uint32_t b) { return std::bit_cast<float>(b); };
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie, even stays
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
    EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);
    EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // largest float rounds to inf
    const uint16_t nan = f32_to_bf16(from_bits(0x7f800001));  // signalling NaN must stay NaN
    EXPECT_EQ(nan & 0x7f80, 0x7f80);
    EXPECT_NE(nan & 0x7f, 0);
    EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
    EXPECT_EQ(bf16_to_f32(0xc040), -3.0f);
}

TEST(Dequantize, F32F16Bf16) {
    const float f32[3] = {1.5f, -2.0f, 0.25f};
    float out[3];
    dequantize_row(ElemType::F32, f32, out, 3);
    EXPECT_EQ(std::memcmp(out, f32, sizeof f32), 0);
    const uint16_t f16[3] = {0x3e00, 0xc000, 0x3400};
    dequantize_row(ElemType::F16, f16, out, 3);
    EXPECT_EQ(out[0], 1.5f);
    EXPECT_EQ(out[1], -2.0f);
    EXPECT_EQ(out[2], 0.25f);
    const uint16_t bf16[3] = {0x3fc0, 0xc000, 0x3e80};
    dequantize_row(ElemType::BF16, bf16, out, 3);
    EXPECT_EQ(out[0], 1.5f);
    EXPECT_EQ(out[1], -2.0f);
    EXPECT_EQ(out[2], 0.25f);
}

TEST(Dequantize, Q8_0Block) {
    uint8_t block[2 * 34];
    const uint16_t d0 = 0x3800;  // 0.5
    const uint16_t d1 = 0xc000;  // -2
    std::memcpy(block, &d0, 2);
    std::memcpy(block + 34, &d1, 2);
    for (int j = 0; j < 32; ++j) {
        block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
        block[36 + j] = static_cast<uint8_t>(static_cast<int8_t>(j == 0 ? -128 : 127 - j));
    }
    float out[64];
    dequantize_row(ElemType::Q8_0, block, out, 64);
    for (int j = 0; j < 32; ++j) {
        EXPECT_EQ(out[j], 0.5f * static_cast<float>(j - 16)) << j;
        EXPECT_EQ(out[32 + j], -2.0f * static_cast<float>(j == 0 ? -128 : 127 - j)) << j;
    }
}

TEST(Dequantize, RejectsPartialBlocksAndUnimplementedTypes) {
    uint8_t buf[64] = {};
    float out[64];
    EXPECT_THROW(dequantize_row(ElemType::Q8_0, buf, out, 31), offgrid::Error);
    EXPECT_THROW(dequantize_row(ElemType::Q4_K, buf, out, 32), offgrid::Error);
    EXPECT_THROW(dequantize_row(ElemType::IQ2_XXS, buf, out, 256), offgrid::Error);
    EXPECT_THROW(quantize_row(ElemType::Q4_K, out, buf, 256), offgrid::Error);
}

TEST(Quantize, Q8_0ExactWhenScaleIsOne) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j * 8 - 127 + (j == 31 ? 6 : 0));  // max |x| = 127
    const auto bytes = quantize(ElemType::Q8_0, x);
    ASSERT_EQ(bytes.size(), 34u);
    uint16_t d;
    std::memcpy(&d, bytes.data(), 2);
    EXPECT_EQ(d, 0x3c00);  // scale exactly 1
    std::vector<float> back(32);
    dequantize_row(ElemType::Q8_0, bytes.data(), back.data(), 32);
    EXPECT_EQ(back, x);
}

TEST(Quantize, Q8_0ErrorWithinHalfAStep) {
    std::vector<float> x(256);
    for (size_t j = 0; j < x.size(); ++j) x[j] = std::sin(0.37f * static_cast<float>(j)) * (1.0f + j % 7);
    const auto bytes = quantize(ElemType::Q8_0, x);
    std::vector<float> back(x.size());
    dequantize_row(ElemType::Q8_0, bytes.data(), back.data(), x.size());
    for (size_t b = 0; b < x.size() / 32; ++b) {
        float amax = 0;
        for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
        const float step = amax / 127.0f;
        for (size_t j = 0; j < 32; ++j) {
            // Half a step for rounding, plus the f16 rounding of the scale (relative 2^-11) times 127.
            EXPECT_LE(std::fabs(back[b * 32 + j] - x[b * 32 + j]), 0.5f * step + amax * 0.0005f + 1e-7f);
        }
    }
    std::vector<float> zeros(32, 0.0f);
    const auto zb = quantize(ElemType::Q8_0, zeros);
    for (uint8_t byte : zb) EXPECT_EQ(byte, 0);
}

TEST(Quantize, F16AndBf16MatchScalarConversions) {
    const std::vector<float> x = {0.1f, -3.75f, 65504.0f, 1e-6f, 123.456f};
    const auto h = quantize(ElemType::F16, x);
    const auto b = quantize(ElemType::BF16, x);
    ASSERT_EQ(h.size(), 10u);
    ASSERT_EQ(b.size(), 10u);
    for (size_t i = 0; i < x.size(); ++i) {
        uint16_t hv, bv;
        std::memcpy(&hv, h.data() + 2 * i, 2);
        std::memcpy(&bv, b.data() + 2 * i, 2);
        EXPECT_EQ(hv, f32_to_f16(x[i]));
        EXPECT_EQ(bv, f32_to_bf16(x[i]));
    }
}
