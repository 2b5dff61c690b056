// The ggml element-type table.
#include "tensor/types.h"

#include <array>
#include <string>

#include "common/error.h"
#include "tensor/blocks.h"

namespace offgrid::tensor {

namespace {

// Indexed by ggml type id. The types offgrid reads take their sizes from the structs of tensor/blocks.h; the
// others (known so that gguf-info can name them and the reader can size them) follow gguf-py's
// GGML_QUANT_SIZES. Ids 4, 5 (q4_2, q4_3), 31-33 and 36-38 (repacked layouts) were removed upstream and are
// left empty, so files using them are rejected.
constexpr size_t kTypeCount = 64;  // 43..62 unknown; 63 is offgrid's activation format Q16_K

constexpr std::array<TypeTraits, kTypeCount> make_table() {
    std::array<TypeTraits, kTypeCount> t{};
    auto set = [&](ElemType id, std::string_view name, uint32_t block, uint32_t bytes, bool deq) {
        t[static_cast<uint32_t>(id)] = TypeTraits{name, block, bytes, deq};
    };
    set(ElemType::F32, "f32", 1, sizeof(float), true);
    set(ElemType::F16, "f16", 1, sizeof(uint16_t), true);
    set(ElemType::Q4_0, "q4_0", kQK, sizeof(BlockQ4_0), true);
    set(ElemType::Q4_1, "q4_1", kQK, sizeof(BlockQ4_1), true);
    set(ElemType::Q5_0, "q5_0", kQK, sizeof(BlockQ5_0), true);
    set(ElemType::Q5_1, "q5_1", kQK, sizeof(BlockQ5_1), true);
    set(ElemType::Q8_0, "q8_0", kQK, sizeof(BlockQ8_0), true);
    set(ElemType::Q8_1, "q8_1", kQK, sizeof(BlockQ8_1), true);
    set(ElemType::Q2_K, "q2_K", kQK_K, sizeof(BlockQ2_K), true);
    set(ElemType::Q3_K, "q3_K", kQK_K, sizeof(BlockQ3_K), true);
    set(ElemType::Q4_K, "q4_K", kQK_K, sizeof(BlockQ4_K), true);
    set(ElemType::Q5_K, "q5_K", kQK_K, sizeof(BlockQ5_K), true);
    set(ElemType::Q6_K, "q6_K", kQK_K, sizeof(BlockQ6_K), true);
    set(ElemType::Q8_K, "q8_K", kQK_K, sizeof(BlockQ8_K), true);
    set(ElemType::IQ2_XXS, "iq2_xxs", 256, 66, false);
    set(ElemType::IQ2_XS, "iq2_xs", 256, 74, false);
    set(ElemType::IQ3_XXS, "iq3_xxs", 256, 98, false);
    set(ElemType::IQ1_S, "iq1_s", 256, 50, false);
    set(ElemType::IQ4_NL, "iq4_nl", kQK, sizeof(BlockIQ4_NL), true);
    set(ElemType::IQ3_S, "iq3_s", 256, 110, false);
    set(ElemType::IQ2_S, "iq2_s", 256, 82, false);
    set(ElemType::IQ4_XS, "iq4_xs", kQK_K, sizeof(BlockIQ4_XS), true);
    set(ElemType::I8, "i8", 1, 1, false);
    set(ElemType::I16, "i16", 1, 2, false);
    set(ElemType::I32, "i32", 1, 4, false);
    set(ElemType::I64, "i64", 1, 8, false);
    set(ElemType::F64, "f64", 1, 8, false);
    set(ElemType::IQ1_M, "iq1_m", 256, 56, false);
    set(ElemType::BF16, "bf16", 1, sizeof(uint16_t), true);
    set(ElemType::TQ1_0, "tq1_0", 256, 54, false);
    set(ElemType::TQ2_0, "tq2_0", 256, 66, false);
    set(ElemType::MXFP4, "mxfp4", 32, 17, false);
    set(ElemType::NVFP4, "nvfp4", 64, 36, false);
    set(ElemType::Q1_0, "q1_0", 128, 18, false);
    set(ElemType::Q2_0, "q2_0", 64, 18, false);
    set(ElemType::Q16_K, "q16_K", kQK_K, sizeof(BlockQ16_K), true);
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

}  // namespace offgrid::tensor
