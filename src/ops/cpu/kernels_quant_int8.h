// SIMD entries of the 8-bit-activation path (OFFGRID_QUANT_ACT=int8): the same activation formats, quantisers
// and float folds as the scalar twins of kernels_quant_scalar.cpp (kernels_quant_common.h), bit for bit.
#pragma once

#include "ops/cpu/dispatch.h"

namespace offgrid::ops::cpu::quant {

// q4_K and q6_K (q8_K activations) and q5_0 (q8_0 activations) with AVX2 (`vpmaddubsw`) or AVX-512 VNNI, and
// q5_K at AVX2 (the AVX-512 levels keep that one); each
// sets vec_dot and dot_tile of entries whose act_type and quantize_act the scalar twins set, and its own q8_K
// quantiser (the twin's bytes). No-op when the compiler cannot target the level.
void add_int8_entries_avx2(TypeKernels * table);
void add_int8_entries_avx512(TypeKernels * table);
// Q8_0's int8 variant at AVX2 (k: its entry, whose quantiser the caller sets): rows, four-row tiles and gemm in the
// scalar twin's fold, bit for bit.
void add_q8_0_int8_entries_avx2(TypeKernels & k);

// q4_K in 16-row groups (kernels_quant_int8_rows16_avx512.cpp): sets rows16 of the q4_K entry (ops/rows16.h).
// No-op when the compiler cannot target AVX-512 VNNI.
void add_int8_rows16_avx512(TypeKernels * table);

// Prompt products on the tile unit (kernels_quant_int8_amx.cpp): sets gemm of the q4_K, q6_K and q5_0 entries,
// bit-identical to their vec_dot. No-op when the compiler cannot target AMX.
void add_int8_gemm_amx(TypeKernels * table);

// Prompt products at AVX2 (kernels_quant_int8_gemm_avx2.cpp, tokens in lanes): sets gemm of the q4_K, q5_K, q6_K
// and q5_0 entries, bit-identical to their vec_dot, and the sizes of the kernel blocks they take (0 for other
// types). No-op when the compiler cannot target AVX2.
void add_int8_gemm_avx2(TypeKernels * table);
void add_q8_0_int8_gemm_avx2(TypeKernels & k);  // the same for Q8_0's int8 variant (k takes Q8_0 activations)
size_t int8_gemm_avx2_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok);
size_t int8_gemm_avx2_weight_bytes(tensor::ElemType type, int64_t n);

// The same at AVX-512 VNNI (kernels_quant_int8_gemm_avx512.cpp, 16 tokens to a group), and for the int8 variant
// of Q8_0 (sets k.gemm when k takes Q8_0 activations).
void add_int8_gemm_avx512(TypeKernels * table);
void add_q8_0_int8_gemm_avx512(TypeKernels & k);
size_t int8_gemm_avx512_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok);
size_t int8_gemm_avx512_weight_bytes(tensor::ElemType type, int64_t n);

// Products of up to kInt8LanesMaxTokens tokens at AVX-512 VNNI (kernels_quant_int8_lanes_avx512.cpp: two weight rows
// by eight tokens in a register's lanes, by four in 256-bit registers up to 4 tokens, groups of eight sharing each
// pass's decoded rows), the gemm of the q4_K, q6_K, q5_0 and Q8_0 entries for those products (TypeKernels::gemm's
// contract; null for other types or when the compiler cannot target the level), and the bytes of the kernel blocks
// they take. Up to 16 tokens: two groups of eight cost 20-30 % less than the 16-lane gemm's one group of 16
// (bench_quant_batch, 2560 -> 4096 from DRAM, one thread, Zen 4: q4_K 1383 against 1967 us, q6_K 1572 / 1949, Q8_0
// 1563 / 2102, q5_0 1553 / 1901); for prompts the gemm stays (pp512 of scale Q4_K_M with the lanes for every
// product: no faster, 49.8-65.0 against 71.0-76.1 t/s).
constexpr int kInt8LanesMaxTokens = 16;
using Int8Product = void (*)(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n,
                             int64_t n_rows, int64_t n_tok, float * y, size_t y_stride, uint64_t act_key);
Int8Product int8_lanes_avx512(tensor::ElemType type);
size_t int8_lanes_avx512_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok);
size_t int8_lanes_avx512_weight_bytes(tensor::ElemType type, int64_t n);

}  // namespace offgrid::ops::cpu::quant

namespace offgrid::ops::cpu {

// The same for the int8 variant of Q8_0 (q8_0_int8_kernels): sets k.gemm when k takes Q8_0 activations.
void add_q8_0_int8_gemm_amx(TypeKernels & k);

// Bytes of the thread's kernel blocks one tile-unit product takes: its tokens packed (KernelBlock::packed_tokens)
// and one 16-row block of weights decoded (KernelBlock::tile_weights), for n columns; 0 for other types.
size_t int8_gemm_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok);
size_t int8_gemm_weight_bytes(tensor::ElemType type, int64_t n);

}  // namespace offgrid::ops::cpu
