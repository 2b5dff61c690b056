// Element types of the GGUF ecosystem (ggml type ids), their block sizes and byte sizes, and dequantisation.
// Invariant: block_size / block_bytes of every type offgrid reads come from the structs of tensor/blocks.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tensor/half.h"

namespace offgrid::tensor {

// ggml type ids as stored in GGUF tensor infos. Gaps are ids that were removed upstream.
enum class ElemType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
    // offgrid's own activation format (not a ggml type; never in a file): see BlockQ16_K in tensor/blocks.h.
    Q16_K = 63,
};

struct TypeTraits {
    std::string_view name;   // "f32", "q8_0", ... as the ecosystem's tools print it
    uint32_t block_size;     // elements per block (1 for plain types)
    uint32_t block_bytes;    // bytes per block
    bool can_dequantize;     // implemented by dequantize_row
};

// Traits of a known type id; nullopt for an unknown id (a file using it is rejected).
std::optional<TypeTraits> type_traits(uint32_t type_id);
const TypeTraits & traits(ElemType type);  // for a known type

// Bytes of a row of n elements; n must be a multiple of the block size (checked by callers).
uint64_t row_bytes(ElemType type, uint64_t n);

// Converts n elements (a multiple of the block size) starting at src to f32, bit for bit as ggml's to_float
// for the type (same float operations in the same order; see docs/weights.md). Reads F32 F16 BF16 Q8_0 Q4_0
// Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS (and the activation types Q8_1, Q8_K, Q16_K). Throws
// offgrid::Error for any other type or a partial block.
void dequantize_row(ElemType type, const void * src, float * dst, size_t n);

// The scalar f16 / bf16 conversions (f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16) are inline in
// tensor/half.h, included here; block layouts are in tensor/blocks.h.

}  // namespace offgrid::tensor
