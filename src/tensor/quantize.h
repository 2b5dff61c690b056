// Encoders from f32 to the element types that dequantize_row can read back (F32, F16, BF16, Q8_0), used by
// the GGUF writer and by tests that build models from float buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tensor/types.h"

namespace offgrid::tensor {

// Encodes n floats (a multiple of the type's block size) into row_bytes(type, n) bytes at dst.
// Throws offgrid::Error for a type without an encoder or a count that is not a whole number of blocks.
void quantize_row(ElemType type, const float * src, void * dst, size_t n);

// Convenience: encodes a whole buffer and returns the bytes.
std::vector<uint8_t> quantize(ElemType type, std::span<const float> src);

// True for the types quantize_row can encode.
bool can_quantize(ElemType type);

}  // namespace offgrid::tensor
