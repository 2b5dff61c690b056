// The 16-bit-activation integer kernels (the default quantised path; docs/kernels.md, "Integer kernels").
//
// Activations: each token row is quantised on its own to Q16_K blocks (tensor/blocks.h): per 256 elements one
// f32 scale d = max|x| / 16383 and 15-bit quants, plus the exact sums of each 16 and 32 quants. Rounding an
// activation costs at most max|x| / 32766, 1/129 of an 8-bit block's step, so the logits stay far closer to
// the exact computation than llama.cpp's 8-bit path (the golden bar), while every product is an integer
// multiply-add (vpdpwssd / vpmaddwd: 32 or 16 per instruction, no int->float conversion per weight).
//
// The contract every level keeps (so the Scalar twin, AVX2 and AVX-512 give the same bits, at every tile):
//  - a weight block is decoded to exact integers w[i] = value[i] * scale[i / 16] (int16; |w| <= 4096);
//  - per super-block (256 types) the integer lanes P[l] (l < 8) sum w[i] * a[i] over the elements with
//    (i mod 16) / 2 == l: exact int32 (|P| <= 32 * 4096 * 16383 < 2^31: why 15 bits, not 16), so the SIMD grouping
//    is free;
//  - float: acc[l] = fma(float(P[l]), d_w * d_a, acc[l]), super-block after super-block; the types with mins
//    then subtract their min term lane by lane with one rounding: q4_K / q5_K acc[l] = fma(-(dmin_w * m[l]),
//    dsum32[l], acc[l]); q2_K the same with dsum16[l], then with m[l + 8] and dsum16[l + 8]; the result is
//    reduce8(acc);
//  - blocks of 32 (q8_0 q4_0 q5_0 iq4_nl, and q4_1 q5_1 with their unsigned quants): P[l] over the block's 32
//    elements as above, folded with d_w * d_a (d_a of the Q16_K block holding it) into acc_even or acc_odd by the
//    block's index parity; q4_1 / q5_1 then add their minimum in the same accumulator, acc[l] = fma(M[l],
//    dsum32[j], acc[l]) with M = (m_w, 0, ..., 0) and j the block's 32-group in its Q16_K block; the result is
//    reduce8(acc_even + acc_odd);
//  - reduce8(v) = ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)), i.e. halves, then halves, then pairs.
// A row whose width is not a multiple of 256 (the types with blocks of 32) ends with a zero-padded Q16_K block.
#pragma once

#include <cmath>
#include <cstdint>
#include <climits>

#include "ops/cpu/dispatch.h"
#include "tensor/blocks.h"

namespace offgrid::ops::cpu::quant {

// Q16_K activation row (n a multiple of 256), the Scalar twin; each level has its own quantiser with the same
// bytes for finite inputs: amax = max|x| (exact in any order), id = 16383 / amax, q = round-to-nearest-even of
// x * id (one f32 product; the SIMD conversion's default rounding), clamped to +-16383; d = amax / 16383.
void quantize_row_q16_K(const float * x, void * dst, int64_t n);

// x * id rounded as cvtps2dq does (nearest, ties to even; NaN and out-of-range give INT_MIN), then clamped.
inline int32_t q16_round(float v) {
    const int32_t q = (v == v && std::fabs(v) < 2147483520.0f) ? static_cast<int32_t>(std::nearbyint(v)) : INT32_MIN;
    return q < -16383 ? -16383 : (q > 16383 ? 16383 : q);
}

// Entries of the int16 kernels at each level (the Scalar twins, and the ISA files; no-op when the compiler
// cannot target the level). Each sets act_type Q16_K, quantize_act, vec_dot and dot_tile.
void add_int16_entries_scalar(TypeKernels * table);
void add_int16_entries_avx2(TypeKernels * table);
void add_int16_entries_avx512(TypeKernels * table);
#if defined(__aarch64__)
void add_int16_entries_neon(TypeKernels * table);  // kernels_quant_int16_neon.cpp
#endif

// The float part of the contract, shared by the scalar twin (and its tests).
inline float i16_reduce8(const float v[8]) {
    const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
    return (a0 + a2) + (a1 + a3);
}

}  // namespace offgrid::ops::cpu::quant
