// Runtime kernel dispatch: one table of kernels per weight type and level, built once from the list of levels
// (ops/cpu/levels.h), chosen from the CPU's features or by OFFGRID_ISA=scalar|avx2|avx512|neon|neondot for tests
// and benchmarks.
//
// Invariants every entry keeps:
//  - vec_dot has a fixed reduction order that depends only on n (never on the caller, the batch or threads);
//  - dot_tile, when present, is bit-identical to vec_dot for every (row, token) pair it computes;
//  - quantize_act works on one activation row at a time, so a token's bytes never depend on its neighbours;
//  - the Scalar entry of a type is its plain twin: the tests compare every other level with it.
// The quantised kernels (kernels_quant.h) fill the same tables under the same invariants (docs/kernels.md);
// keep the interface backward compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tensor/types.h"

namespace offgrid::ops::cpu {

// The kernel levels. A set, not a ladder: each level needs its own CPU features and builds on one base level
// (ops/cpu/levels.h); a build holds the levels of its target architecture only.
//   Avx2 = AVX2 + FMA + F16C (x86-64), base Scalar;  Avx512 = F BW VL DQ VNNI + the Avx2 set, base Avx2;
//   Neon = Advanced SIMD (aarch64), base Scalar;      NeonDot = Neon + the dot-product instructions, base Neon;
//   Amx = Avx512 + the tile unit's int8 products (AMX-TILE, AMX-INT8, and the OS's permission), base Avx512.
enum class Isa { Scalar, Avx2, Avx512, Neon, NeonDot, Amx };

Isa detected_isa();                  // the best level this CPU runs (the last of available_isas(); read once)
Isa active_isa();                    // detected, or the level OFFGRID_ISA names if the CPU runs it (read once)
std::vector<Isa> available_isas();   // every level this CPU can run, Scalar first, each after its base
const char * isa_name(Isa);

constexpr int kGemmMinTokens = 9;  // the default TypeKernels::gemm_min_tokens
constexpr int64_t kGemmNarrowRow = 1024;  // TypeKernels::gemm_min_tokens_narrow's rows

struct TypeKernels {
    tensor::ElemType act_type = tensor::ElemType::F32;  // format of the activation row: F32, Q8_0, Q8_1 or Q8_K
    // Quantises one activation row of n floats into act_type blocks (null when act_type is F32).
    void (*quantize_act)(const float * x, void * dst, int64_t n) = nullptr;
    // dot(weight row of n elements, activation row in act_type), fixed reduction order.
    float (*vec_dot)(const void * w_row, const void * act_row, int64_t n) = nullptr;
    // Optional tile: y[t * y_stride + r] = vec_dot(w + r * w_stride, act + t * act_stride, n) for r < n_rows,
    // t < n_tok (n_rows at most kTileMax, n_tok at most tile_tokens), bit-identical to vec_dot. Null: the
    // driver calls vec_dot.
    void (*dot_tile)(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n,
                     int n_rows, int n_tok, float * y, size_t y_stride) = nullptr;
    // Most tokens one dot_tile call takes (kTileMax, or up to kTileTokensMax for kernels whose weight decoding
    // is worth spreading over more tokens).
    int tile_tokens = 4;
    // Non-zero: dot_tile with n_rows == 1 takes up to kTileTokensMax tokens and reads the row once for all of
    // them, and the driver runs products of row_tile_min_tokens to kTileTokensMax tokens row after row (one
    // sequential weight stream per thread). Entries with Q16_K activations run every product of at most
    // tile_tokens tokens that way (their one-row tiles take tile_tokens).
    int row_tile_min_tokens = 0;
    // Optional product of many tokens (F32 weights and activations, ops/cpu/gemm_float.h; the 8-bit entries of q4_K,
    // q5_K, q6_K, q5_0 and Q8_0 at Avx2, ops/cpu/kernels_quant_int8_gemm_avx2.cpp; all but q5_K at Avx512,
    // ops/cpu/kernels_quant_int8_gemm_avx512.cpp, which hands products of up to 16 tokens, from one token on some
    // rows, to ops/cpu/kernels_quant_int8_lanes_avx512.cpp, and on the tile unit at Amx,
    // ops/cpu/kernels_quant_int8_amx.cpp):
    // y[t * y_stride + r] = vec_dot(w + r * w_stride, act + t * act_stride, n) for every r < n_rows and t < n_tok,
    // bit-identical to vec_dot, with the entry's own register and cache blocking. The driver calls it for products
    // of at least gemm_min_tokens tokens (fewer go through dot_tile). act_key: 0, or a number that names these activation rows
    // (pointer, stride, n, n_tok and their contents) for all calls that pass it, so the entry may keep what it
    // derived from them (its packed copy) on a thread between the row ranges of one product. Null: dot_tile.
    void (*gemm)(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows,
                 int64_t n_tok, float * y, size_t y_stride, uint64_t act_key) = nullptr;
    // Products of this many tokens or more go through gemm (for F32 rows narrower than 512, at least 32), and on
    // rows of at most kGemmNarrowRow columns from gemm_min_tokens_narrow (where a type's row kernels and its gemm
    // cross elsewhere on short rows). Set both through set_gemm_min_tokens.
    int gemm_min_tokens = kGemmMinTokens;
    int gemm_min_tokens_narrow = kGemmMinTokens;
    // Optional product of a q4_K group of 16 rows (ops/rows16.h, n columns) by up to kTileTokensMax tokens:
    // y[t * y_stride + r] for r < 16, bit-identical to vec_dot of row r. Null: the driver unpacks the group into
    // plain rows and takes the kernels above (so does it for more tokens).
    void (*rows16)(const void * group, int64_t n, const void * act, size_t act_stride, int n_tok, float * y,
                   size_t y_stride) = nullptr;

    void set_gemm_min_tokens(int wide, int narrow) {
        gemm_min_tokens = wide;
        gemm_min_tokens_narrow = narrow;
    }
};

constexpr size_t kTypeTableSize = 64;  // indexed by the ggml type id
constexpr int kTileMax = 4;            // dot_tile handles at most this many rows (and tokens, by default)
constexpr int kTileTokensMax = 8;      // the largest tile_tokens of any entry

// Kernels of a weight type at a level; null when the type has no entry there (the caller falls back to the
// generic path: dequantise the row, then the F32 dot).
const TypeKernels * kernels_for(tensor::ElemType type, Isa isa);

// The exact entry of a type at a level whatever OFFGRID_QUANT_ACT selects: f32 activations, weights dequantised
// exactly (the float kernels and the quantised types' exact entries). The driver takes it for a row width the
// table entry's activation blocks cannot hold; tests take it as the exact mode.
const TypeKernels * exact_kernels_for(tensor::ElemType type, Isa isa);

// The entry of a type at a level in the 8-bit-activation table (OFFGRID_QUANT_ACT=int8) whatever the process's
// mode: ggml-style q8_0 / q8_1 / q8_K activations and integer block dots (tests, benchmarks).
const TypeKernels * int8_kernels_for(tensor::ElemType type, Isa isa);

// The int8 variant of the Q8_0 kernels: activations quantised to Q8_0 per token row, exact integer block dots
// (AVX2 maddubs, AVX-512 VNNI vpdpbusd). In the table only under OFFGRID_QUANT_ACT=int8 (measurement): its
// activation rounding moves logits about as far from the exact result as llama.cpp's own Q8_0 path does
// (docs/kernels.md).
const TypeKernels * q8_0_int8_kernels(Isa isa);

// Bytes of one activation row of n elements in act_type (n elements of F32, or whole blocks; Q16_K rows end
// with a zero-padded block when n is not a multiple of 256).
size_t act_row_bytes(tensor::ElemType act_type, int64_t n);

}  // namespace offgrid::ops::cpu
