// The kernels' names for the 16-bit float conversions. The one implementation lives in tensor/half.h; these
// forward to it so the two can never disagree.
#pragma once

#include <cstdint>
#include <cstring>  // includers (matmul.cpp) rely on it

#include "tensor/half.h"

namespace offgrid::ops {

inline float half_to_float(uint16_t h) { return tensor::f16_to_f32(h); }
inline uint16_t float_to_half(float f) { return tensor::f32_to_f16(f); }
inline float bf16_to_float(uint16_t h) { return tensor::bf16_to_f32(h); }
inline uint16_t float_to_bf16(float f) { return tensor::f32_to_bf16(f); }

}  // namespace offgrid::ops
