// What the SIMD files of the 8-bit-activation path (kernels_quant_int8_avx2.cpp, kernels_quant_int8_avx512.cpp)
// share: the block names, the twins' float folds on converted scales, and the table entries built from a level's
// row kernels.
// Plain C++, no intrinsics: each level's row kernels are the template arguments.
//
// Everything here has internal linkage on purpose. Each includer is compiled for its own ISA, so an inline
// function with external linkage would leave one copy per level, and the linker would keep any one of them for
// all callers: an AVX-512 copy could then run on a CPU without AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_quant_common.h"  // its pragma: the folds below are compiled without contraction

namespace offgrid::ops::cpu {
namespace {

// The blocks the 8-bit kernels read (also the tile unit's, kernels_quant_int8_amx.cpp).
using tensor::BlockQ4_K;
using tensor::BlockQ5_0;
using tensor::BlockQ5_K;
using tensor::BlockQ6_K;
using tensor::BlockQ8_0;
using tensor::BlockQ8_K;
using tensor::kQK;
using tensor::kQK_K;

}  // namespace
}  // namespace offgrid::ops::cpu

namespace offgrid::ops::cpu::quant {
namespace {

constexpr int kMaxTokens = 4;  // token rows one row-kernel call takes

// The twins' folds (kernels_quant_common.h) with the f16 scales already converted: the same operations in the
// same order.
inline float fold_k(float acc, float w_d, float a_d, int32_t isum) {
    const float d = a_d * w_d;
    return acc + d * static_cast<float>(isum);
}
inline float fold_k_min(float acc, float w_d, float w_dmin, float a_d, int32_t isum, int32_t imin) {
    const float d = a_d * w_d;
    const float dmin = a_d * w_dmin;
    return acc + (d * static_cast<float>(isum) - dmin * static_cast<float>(imin));
}
inline float fold_0(float acc, float w_d, float a_d, int32_t isum) {
    const float d = w_d * a_d;
    return acc + d * static_cast<float>(isum);
}

// A row kernel: one weight row (n columns) against `N` token rows of activations, one result per token.
using RowKernel = void (*)(const void * w, const void * const * act, int64_t n, float * out);

// vec_dot and dot_tile of an entry from the row kernels for 1 to kMaxTokens tokens. dot_tile runs its rows one
// after another, so each row is one sequential stream.
template <RowKernel R1, RowKernel R2, RowKernel R3, RowKernel R4>
struct Entry {
    static float vec_dot(const void * w, const void * a, int64_t n) {
        float y;
        R1(w, &a, n, &y);
        return y;
    }
    static void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                         int n_tok, float * y, size_t y_stride) {
        const void * rows[kMaxTokens];
        for (int t = 0; t < n_tok; ++t) rows[t] = static_cast<const uint8_t *>(act) + t * act_stride;
        for (int r = 0; r < n_rows; ++r) {
            const void * wr = static_cast<const uint8_t *>(w) + r * w_stride;
            float out[kMaxTokens];
            switch (n_tok) {
                case 1: R1(wr, rows, n, out); break;
                case 2: R2(wr, rows, n, out); break;
                case 3: R3(wr, rows, n, out); break;
                default: R4(wr, rows, n, out); break;
            }
            for (int t = 0; t < n_tok; ++t) y[t * y_stride + r] = out[t];
        }
    }
};

// Sets a type's vec_dot and dot_tile; its activation format and quantiser stay the twin's (the same bytes at
// every level). A lower level's prompt product is dropped: it would give the same bits (every entry has the
// twin's), but whether it beats this level's tiles is a measurement of its own (the level sets its gemm after).
template <typename E>
void set_entry(TypeKernels * table, tensor::ElemType type) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.vec_dot = E::vec_dot;
    k.dot_tile = E::dot_tile;
    k.tile_tokens = kMaxTokens;
    k.row_tile_min_tokens = 0;
    k.gemm = nullptr;
    k.rows16 = nullptr;
    k.set_gemm_min_tokens(kGemmMinTokens, kGemmMinTokens);
}

// A four-row tile: four weight rows (n columns) against NT token rows, results at y[t * ys + r].
using FourRowTile = void (*)(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y,
                             size_t ys);

// An entry whose dot_tile takes the four-row tiles for four rows of at most MaxCols columns and the row kernels
// (Rows, an Entry) otherwise; set_four_row_entry puts it in the table.
template <class Rows, FourRowTile Tile1, FourRowTile Tile2, FourRowTile Tile3, FourRowTile Tile4,
          int64_t MaxCols = std::numeric_limits<int64_t>::max()>
struct FourRowEntry {
    using RowEntry = Rows;
    static void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                         int n_tok, float * y, size_t y_stride) {
        const auto * wb = static_cast<const uint8_t *>(w);
        const auto * ab = static_cast<const uint8_t *>(act);
        if (n_rows == 4 && n <= MaxCols) {
            switch (n_tok) {
                case 1: return Tile1(wb, w_stride, ab, act_stride, n, y, y_stride);
                case 2: return Tile2(wb, w_stride, ab, act_stride, n, y, y_stride);
                case 3: return Tile3(wb, w_stride, ab, act_stride, n, y, y_stride);
                case 4: return Tile4(wb, w_stride, ab, act_stride, n, y, y_stride);
            }
        }
        Rows::dot_tile(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride);
    }
};

template <class E>
void set_four_row_entry(TypeKernels * table, tensor::ElemType type) {
    set_entry<typename E::RowEntry>(table, type);
    table[static_cast<uint32_t>(type)].dot_tile = E::dot_tile;
}

// Every q8_K entry of the table takes a level's quantiser (it writes the twin's bytes).
inline void set_q8_k_quantizer(TypeKernels * table, void (*quantize)(const float *, void *, int64_t)) {
    for (size_t id = 0; id < kTypeTableSize; ++id) {
        if (table[id].act_type == tensor::ElemType::Q8_K) table[id].quantize_act = quantize;
    }
}

// The same for the q8_0 entries of the table (q5_0, q4_0, iq4_nl: the twins' ggml-reference quantiser, ties away
// from zero; the int8 Q8_0 entry is not in this table, and its quantiser rounds ties to even).
inline void set_q8_0_quantizer(TypeKernels * table, void (*quantize)(const float *, void *, int64_t)) {
    for (size_t id = 0; id < kTypeTableSize; ++id) {
        if (table[id].act_type == tensor::ElemType::Q8_0 && id != static_cast<size_t>(tensor::ElemType::Q8_0)) {
            table[id].quantize_act = quantize;
        }
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu::quant
