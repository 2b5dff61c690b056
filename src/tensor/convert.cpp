// Encoders from f32 to the stored element types (dequantize_row, the way back, is in dequantize.cpp).
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "tensor/blocks.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace offgrid::tensor {

namespace {

constexpr size_t kQ8Block = kQK;
constexpr size_t kQ8BlockBytes = sizeof(BlockQ8_0);

void store_u16(uint8_t * p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

void check_whole_blocks(ElemType type, size_t n, const char * what) {
    const TypeTraits & t = traits(type);
    if (n % t.block_size != 0) {
        throw Error(std::string(what) + ": " + std::to_string(n) + " elements is not a multiple of the " +
                    std::string(t.name) + " block size " + std::to_string(t.block_size));
    }
}

}  // namespace

bool can_quantize(ElemType type) {
    return type == ElemType::F32 || type == ElemType::F16 || type == ElemType::BF16 || type == ElemType::Q8_0;
}

void quantize_row(ElemType type, const float * src, void * dst, size_t n) {
    check_whole_blocks(type, n, "quantize_row");
    auto * p = static_cast<uint8_t *>(dst);
    switch (type) {
    case ElemType::F32:
        std::memcpy(p, src, n * sizeof(float));
        return;
    case ElemType::F16:
        for (size_t i = 0; i < n; ++i) store_u16(p + 2 * i, f32_to_f16(src[i]));
        return;
    case ElemType::BF16:
        for (size_t i = 0; i < n; ++i) store_u16(p + 2 * i, f32_to_bf16(src[i]));
        return;
    case ElemType::Q8_0:
        // Symmetric per-block scale d = max|x| / 127, values round(x / d), as ggml's reference quantiser.
        for (size_t b = 0; b < n / kQ8Block; ++b) {
            const float * x = src + b * kQ8Block;
            float amax = 0.0f;
            for (size_t j = 0; j < kQ8Block; ++j) amax = std::fmax(amax, std::fabs(x[j]));
            const float d = amax / 127.0f;
            const float inv = d != 0.0f ? 1.0f / d : 0.0f;
            uint8_t * block = p + b * kQ8BlockBytes;
            store_u16(block, f32_to_f16(d));
            auto * q = reinterpret_cast<int8_t *>(block + 2);
            for (size_t j = 0; j < kQ8Block; ++j) q[j] = static_cast<int8_t>(std::lround(x[j] * inv));
        }
        return;
    default:
        throw Error("quantize_row: element type " + std::string(traits(type).name) + " has no encoder");
    }
}

std::vector<uint8_t> quantize(ElemType type, std::span<const float> src) {
    std::vector<uint8_t> out(row_bytes(type, src.size()));
    quantize_row(type, src.data(), out.data(), src.size());
    return out;
}

}  // namespace offgrid::tensor
