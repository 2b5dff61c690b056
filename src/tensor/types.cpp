// The ggml element-type table and the scalar f16 / bf16 conversions.
#include "tensor/types.h"

#include <array>
#include <bit>
#include <cstring>
#include <string>

#include "common/error.h"

namespace offgrid::tensor {

namespace {

// Indexed by ggml type id. Block layouts follow ggml's block_* structs (ggml-common.h) and gguf-py's
// GGML_QUANT_SIZES: e.g. q8_0 is one f16 scale and 32 int8 values (34 bytes), the k-quants use super-blocks
// of 256. Ids 4, 5 (q4_2, q4_3), 31-33 and
// 36-38 (repacked layouts) were removed upstream and are left empty, so files using them are rejected.
constexpr size_t kTypeCount = 43;

constexpr std::array<TypeTraits, kTypeCount> make_table() {
    std::array<TypeTraits, kTypeCount> t{};
    auto set = [&](ElemType id, std::string_view name, uint32_t block, uint32_t bytes, bool deq) {
        t[static_cast<uint32_t>(id)] = TypeTraits{name, block, bytes, deq};
    };
    set(ElemType::F32, "f32", 1, 4, true);
    set(ElemType::F16, "f16", 1, 2, true);
    set(ElemType::Q4_0, "q4_0", 32, 18, false);
    set(ElemType::Q4_1, "q4_1", 32, 20, false);
    set(ElemType::Q5_0, "q5_0", 32, 22, false);
    set(ElemType::Q5_1, "q5_1", 32, 24, false);
    set(ElemType::Q8_0, "q8_0", 32, 34, true);
    set(ElemType::Q8_1, "q8_1", 32, 36, false);
    set(ElemType::Q2_K, "q2_K", 256, 84, false);
    set(ElemType::Q3_K, "q3_K", 256, 110, false);
    set(ElemType::Q4_K, "q4_K", 256, 144, false);
    set(ElemType::Q5_K, "q5_K", 256, 176, false);
    set(ElemType::Q6_K, "q6_K", 256, 210, false);
    set(ElemType::Q8_K, "q8_K", 256, 292, false);
    set(ElemType::IQ2_XXS, "iq2_xxs", 256, 66, false);
    set(ElemType::IQ2_XS, "iq2_xs", 256, 74, false);
    set(ElemType::IQ3_XXS, "iq3_xxs", 256, 98, false);
    set(ElemType::IQ1_S, "iq1_s", 256, 50, false);
    set(ElemType::IQ4_NL, "iq4_nl", 32, 18, false);
    set(ElemType::IQ3_S, "iq3_s", 256, 110, false);
    set(ElemType::IQ2_S, "iq2_s", 256, 82, false);
    set(ElemType::IQ4_XS, "iq4_xs", 256, 136, false);
    set(ElemType::I8, "i8", 1, 1, false);
    set(ElemType::I16, "i16", 1, 2, false);
    set(ElemType::I32, "i32", 1, 4, false);
    set(ElemType::I64, "i64", 1, 8, false);
    set(ElemType::F64, "f64", 1, 8, false);
    set(ElemType::IQ1_M, "iq1_m", 256, 56, false);
    set(ElemType::BF16, "bf16", 1, 2, true);
    set(ElemType::TQ1_0, "tq1_0", 256, 54, false);
    set(ElemType::TQ2_0, "tq2_0", 256, 66, false);
    set(ElemType::MXFP4, "mxfp4", 32, 17, false);
    set(ElemType::NVFP4, "nvfp4", 64, 36, false);
    set(ElemType::Q1_0, "q1_0", 128, 18, false);
    set(ElemType::Q2_0, "q2_0", 64, 18, false);
    return t;
}

constexpr std::array<TypeTraits, kTypeCount> kTable = make_table();

}  // namespace

std::optional<TypeTraits> type_traits(uint32_t type_id) {
    if (type_id >= kTypeCount || kTable[type_id].block_size == 0) return std::nullopt;
    return kTable[type_id];
}

const TypeTraits & traits(ElemType type) {
    const auto id = static_cast<uint32_t>(type);
    if (id >= kTypeCount || kTable[id].block_size == 0) {
        throw Error("tensor type id " + std::to_string(id) + " is not a known ggml type");
    }
    return kTable[id];
}

uint64_t row_bytes(ElemType type, uint64_t n) {
    const TypeTraits & t = traits(type);
    return n / t.block_size * t.block_bytes;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);  // inf, or NaN keeping its payload
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
    } else if (mant == 0) {
        bits = sign;
    } else {
        // Subnormal half: normalise the mantissa into an f32 normal.
        uint32_t e = 113;
        while ((mant & 0x400u) == 0) {
            mant <<= 1;
            --e;
        }
        bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
    }
    return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
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

float bf16_to_f32(uint16_t h) {
    return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t f32_to_bf16(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace offgrid::tensor
