// One-row tiles for the table's Q8_0 entry (kernels_quant_q8_0_avx512.cpp): installed over the float side's exact
// AVX-512 entry, bit-identical to its vec_dot, so that few-token products can run row after row.
#pragma once

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu::quant {

// Wraps k.dot_tile (the float side's exact Q8_0 entry at the Avx512 level): one-row calls widen each block once
// for all tokens, other calls go to the float side's tile; sets k.row_tile_min_tokens. No-op when the entry is not that
// kernel (another activation format or tile size) or the compiler cannot target AVX-512.
void add_q8_0_row_tiles_avx512(TypeKernels & k);

}  // namespace offgrid::ops::cpu::quant
