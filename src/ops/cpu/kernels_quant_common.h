// Shared by every ISA level of the quantised dot kernels (kernels_quant_*.cpp).
//
// The integer kernels (8-bit activations): a kernel splits its dot product into integer sums per block
// (exact, so any SIMD order gives the same integers) and folds them into the f32 result with the functions
// below, one block after the other, in index order. Only the integer part is vectorised; the float part is
// these scalar expressions, compiled without contraction (the pragmas below), so a
// row's result would be the same at every level and tile shape.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/cpu/dispatch.h"
#include "tensor/blocks.h"
#include "tensor/half.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")  // GCC contracts in ISO C++ mode too, intrinsics included
#endif

namespace offgrid::ops::cpu::quant {

using tensor::f16_to_f32;

// Block of 32 against a q8_0 activation block: q4_0, q5_0, iq4_nl (isum = sum of signed weight value * a).
inline float fold_q8_0(float acc, uint16_t w_d, uint16_t a_d, int32_t isum) {
    const float d = f16_to_f32(w_d) * f16_to_f32(a_d);
    return acc + d * static_cast<float>(isum);
}

// Block of 32 with a minimum against a q8_1 activation block: q4_1, q5_1 (isum = sum of unsigned quant * a).
inline float fold_q8_1(float acc, uint16_t w_d, uint16_t w_m, uint16_t a_d, uint16_t a_s, int32_t isum) {
    const float d = f16_to_f32(w_d) * f16_to_f32(a_d);
    const float m = f16_to_f32(w_m) * f16_to_f32(a_s);
    return acc + (d * static_cast<float>(isum) + m);
}

// Super-block with scales only against q8_K: q3_K, q6_K, iq4_xs (isum = sum of scale * value * a).
inline float fold_q8_k(float acc, uint16_t w_d, float a_d, int32_t isum) {
    const float d = a_d * f16_to_f32(w_d);
    return acc + d * static_cast<float>(isum);
}

// Super-block with scales and mins against q8_K: q2_K, q4_K, q5_K (isum = sum of scale * quant * a,
// imin = sum of min * block sum of a).
inline float fold_q8_k_min(float acc, uint16_t w_d, uint16_t w_dmin, float a_d, int32_t isum, int32_t imin) {
    const float d = a_d * f16_to_f32(w_d);
    const float dmin = a_d * f16_to_f32(w_dmin);
    return acc + (d * static_cast<float>(isum) - dmin * static_cast<float>(imin));
}

// The 8 six-bit scales and mins of a q4_K / q5_K super-block.
inline void k4_scales_mins(const uint8_t * packed, uint8_t scales[8], uint8_t mins[8]) {
    for (int j = 0; j < 8; ++j) tensor::k4_scale_min(j, packed, scales[j], mins[j]);
}

// The same 8 scales and 8 mins as k4_scales_mins, one byte each (scale / min j in byte j), by word arithmetic:
// scales and mins 0-3 are the low 6 bits of bytes 0-3 and 4-7; 4-7 take their low 4 bits from bytes 8-11 (the
// scales the low nibbles, the mins the high ones) and their top 2 bits from the top bits of bytes 0-3 and 4-7.
inline void k4_scales_mins_u64(const uint8_t * packed, uint64_t & scales, uint64_t & mins) {
    uint32_t a0, a1, a2;
    std::memcpy(&a0, packed, 4);
    std::memcpy(&a1, packed + 4, 4);
    std::memcpy(&a2, packed + 8, 4);
    const uint32_t sc_lo = a0 & 0x3f3f3f3fu, m_lo = a1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (a2 & 0x0f0f0f0fu) | ((a0 >> 2) & 0x30303030u);
    const uint32_t m_hi = ((a2 >> 4) & 0x0f0f0f0fu) | ((a1 >> 2) & 0x30303030u);
    scales = sc_lo | (static_cast<uint64_t>(sc_hi) << 32);
    mins = m_lo | (static_cast<uint64_t>(m_hi) << 32);
}

// sum_j mins[j] * (bsums[2j] + bsums[2j + 1]) for q4_K / q5_K against q8_K.
inline int32_t k4_min_sum(const uint8_t mins[8], const int16_t * bsums) {
    int32_t s = 0;
    for (int j = 0; j < 8; ++j) s += static_cast<int32_t>(mins[j]) * (bsums[2 * j] + bsums[2 * j + 1]);
    return s;
}

// Activation quantisers of this side, the twins (per row; a level's own quantiser gives the same bytes, so a
// token's bytes never depend on the ISA): q8_1 for q4_1 / q5_1, q8_K for the K-quants and iq4_xs. n is a whole
// number of blocks.
void quantize_row_q8_1(const float * x, void * dst, int64_t n);
void quantize_row_q8_K(const float * x, void * dst, int64_t n);
// q8_0 activations: the kernels side's quantiser from the table when it has one, else this reference.
void quantize_row_q8_0_ref(const float * x, void * dst, int64_t n);

// --- the default path: exact dequantisation fused with the f32 dot ------------------------------------------
//
// Each type's entry multiplies with f32 activations, so the model keeps the exact computation of its
// quantised weights (docs/weights.md says why this is the default). The Scalar entries (the twins) dequantise
// the row with tensor::dequantize_row into per-thread scratch and take the level's F32 vec_dot; the avx2 /
// avx512 entries of every type dequantise in registers (bit-identical values) and multiply-add at once.
// Each dot_tile computes every (row, token) with the operations of its vec_dot, so it is bit-identical.

using RowDequant = void (*)(const void * src, float * dst, int64_t n);

// Row dequantisers at a level (the reference ones forward to tensor::dequantize_row). Each is bit-identical
// to the reference: same f32 operations per element, only several elements per instruction.
RowDequant dequantizer(tensor::ElemType type, Isa isa);  // null when the level has none for the type

// Defined in the ISA files (null / no-op when the compiler cannot target the level): the SIMD row
// dequantisers, and the fused kernels that dequantise in registers and dot with the f32 activations.
RowDequant dequantizer_avx2(tensor::ElemType type);
RowDequant dequantizer_avx512(tensor::ElemType type);
void add_fused_avx2(TypeKernels * table);
void add_fused_avx512(TypeKernels * table);

// The fused entries of the types this side serves, at a level, using that level's F32 vec_dot (taken from
// table[F32], which the float kernels fill first).
void add_dequant_entries(Isa isa, TypeKernels * table);

// --- the 8-bit-activation path (OFFGRID_QUANT_ACT=int8) --------------------------------------------------
//
// ggml's design: activations quantised per row to q8_0 / q8_1 / q8_K, integer block dots. Kept as scalar
// kernels for measurement; not the default because its error against the exact computation is the same
// order as llama.cpp's and exceeds it on some golden pairs (docs/weights.md).
void add_integer_entries(TypeKernels * table);
bool integer_activations_requested();  // OFFGRID_QUANT_ACT=int8

}  // namespace offgrid::ops::cpu::quant
