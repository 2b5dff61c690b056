// Quantised dot kernels of every weight type except F32, F16 and BF16 (docs/kernels.md). add_quant_kernels
// fills table[type id] for the types it implements at isa, in the mode OFFGRID_QUANT_ACT selects (read once):
//  - int16 (the default): Q16_K activations, integer dots (kernels_quant_int16.h) for q4_0 q5_0 iq4_nl
//    q2_K q3_K q4_K q5_K q6_K iq4_xs; q4_1 q5_1 and Q8_0 keep the exact entry (Q8_0: measured, see the .cpp);
//  - f32: the exact entries (weights dequantised in registers, f32 activations; Q8_0 keeps the float side's
//    exact entry);
//  - int8: the speed path, ggml-style 8-bit activations (q8_0 / q8_1 / q8_K; Q8_0 the int8 variant): SIMD
//    kernels for q4_K q5_K q6_K q5_0 (kernels_quant_int8.h), the level's int16 entry for the other types; its
//    error against the exact computation is llama.cpp's order (docs/kernels.md).
// add_exact_quant_kernels fills the exact entries whatever the mode (exact_kernels_for: the tests' and
// benchmarks' exact table). Both are called once per level when the
// dispatch builds its tables, after the float kernels; a Scalar entry exists for every type with an entry at
// a higher level: it is the twin the tests compare with.
#pragma once

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu {

enum class QuantActMode { Int16, F32, Int8 };
QuantActMode quant_act_mode();  // OFFGRID_QUANT_ACT=int16|f32|int8, default int16 (read once)
// Fixes the process's mode to `mode` (over OFFGRID_QUANT_ACT) if nothing has read it yet; true when the mode in
// effect is `mode`.
bool request_quant_act_mode(QuantActMode mode);
const char * quant_act_mode_name(QuantActMode mode);
// The mode a name ("int16", "f32", "int8") stands for; false for any other name.
bool quant_act_mode_from_name(const char * name, QuantActMode * out);

// Fills the quantised types' entries of `mode` (default: the process's OFFGRID_QUANT_ACT) at isa.
void add_quant_kernels(Isa isa, TypeKernels * table, QuantActMode mode = quant_act_mode());
void add_exact_quant_kernels(Isa isa, TypeKernels * table);

}  // namespace offgrid::ops::cpu
