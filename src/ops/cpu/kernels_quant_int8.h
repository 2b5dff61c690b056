// SIMD entries of the 8-bit-activation path (OFFGRID_QUANT_ACT=int8): the same activation formats, quantisers
// and float folds as the scalar twins of kernels_quant_scalar.cpp (kernels_quant_common.h), bit for bit.
#pragma once

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu::quant {

// q4_K and q6_K (q8_K activations) and q5_0 (q8_0 activations) with AVX-512 VNNI; sets vec_dot and dot_tile
// of entries whose act_type and quantize_act the scalar twins set. No-op when the compiler cannot target it.
void add_int8_entries_avx512(TypeKernels * table);

}  // namespace offgrid::ops::cpu::quant
