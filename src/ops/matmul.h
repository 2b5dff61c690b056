// Matrix-vector and matrix-matrix products with weights in their stored element type (any type that
// tensor::dequantize_row reads), read in place. Types with kernels in the table of ops/cpu/dispatch.h use them
// (activations quantised per token row where the kernel asks for it); the others are dequantised row by row
// and multiplied in F32. A weight with ggml shape {in, out} is a row-major out x in matrix W, and y = W x.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/thread_pool.h"
#include "ops/workspace.h"
#include "tensor/types.h"

namespace offgrid::ops {

// A read-only view of a 2-D weight (or one 2-D slab of a 3-D expert tensor), usually inside a memory map.
struct Matrix {
    tensor::ElemType type = tensor::ElemType::F32;
    const uint8_t * data = nullptr;
    int64_t cols = 0;       // input width (ggml ne[0])
    int64_t rows = 0;       // output height
    size_t row_bytes = 0;   // bytes between consecutive rows
    // q4_K held in 16-row groups (ops/rows16.h): row(r) is then not row r's bytes; the products, dot_row and
    // dequantize_matrix_row read the groups, and row_slice takes whole groups only.
    bool rows16 = false;

    const uint8_t * row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
    // Rows [first, first + count) as a matrix of their own.
    Matrix row_slice(int64_t first, int64_t count) const;
};

// True for the element types a matrix can hold: every type tensor::dequantize_row can read.
bool supported_weight_type(tensor::ElemType type);
// Bytes of one row of n elements of a supported type (n a multiple of its block size).
size_t weight_row_bytes(tensor::ElemType type, int64_t n);
// Builds a matrix over contiguous rows. Throws offgrid::Error for an unsupported type or a bad width.
Matrix make_matrix(tensor::ElemType type, const void * data, int64_t cols, int64_t rows);

// dot(row r of W, x), x of W.cols floats.
float dot_row(const Matrix & w, int64_t r, const float * x);
// Plain scalar twin: dequantise element by element and sum in index order.
float dot_row_ref(const Matrix & w, int64_t r, const float * x);

// Dequantises row r of W into out (W.cols floats).
void dequantize_matrix_row(const Matrix & w, int64_t r, float * out);

// y[o] = sum_i W[o,i] x[i], o < W.rows.
void matvec(const Matrix & w, const float * x, float * y, ThreadPool * pool = nullptr);
// Y[t, o] = sum_i W[o,i] X[t, i] for n_tokens rows of X (stride W.cols) and Y (stride W.rows). The work is
// split by output rows, so results do not depend on the thread count.
void matmul(const Matrix & w, const float * x, int64_t n_tokens, float * y, ThreadPool * pool = nullptr);
// The activations of x in the format w's kernels want (each token row quantised on its own), laid out once for
// several matmul_rows calls on other threads.
struct PreparedActivations {
    const uint8_t * data = nullptr;
    size_t stride = 0;
    // Set by activation_layout: the row quantiser (null when the kernel takes the f32 rows themselves) and
    // its input.
    void (*quantize)(const float * x, void * dst, int64_t n) = nullptr;
    const float * x = nullptr;
    int64_t cols = 0;
    // Names these activations for the product calls that use them (TypeKernels::gemm's act_key: an entry may
    // reuse what it derived from them on a thread, e.g. its packed copy, across the row ranges of one product).
    // Unique per activation_layout / matmul call.
    uint64_t key = 0;
};
// The layout of x's rows for w's kernels (data is x for f32 rows, null for quantised ones until
// take_activation_rows takes their room from `arena`, valid while the arena's scope that was open holds; nothing is
// quantised yet). quantize_activation_rows then fills token rows [t0, t1) (disjoint ranges may run on different
// threads; each row's bytes depend only on its own floats).
PreparedActivations activation_layout(const Matrix & w, const float * x);
void take_activation_rows(PreparedActivations & act, int64_t n_tokens, Arena & arena);
void quantize_activation_rows(const PreparedActivations & act, int64_t t0, int64_t t1);
// Quantising fewer elements than this (tokens x width) stays on the caller; above it the rows are spread
// over the pool first (a region of its own: the product's ranges all need every row).
constexpr int64_t kParallelQuantElems = 32 * 1024;
// Rows [r0, r1) of matmul(w, x, n_tokens, y) on the calling thread, with activations from
// activation_layout / take_activation_rows for n_tokens, quantised: bit-identical to what matmul writes there (each output is the same
// single dot whatever the range). For running several products in one parallel region (ops/matmul_group.h).
void matmul_rows(const Matrix & w, const float * x, const PreparedActivations & act, int64_t n_tokens, float * y,
                 int64_t r0, int64_t r1);
// Plain scalar twin of matmul, single-threaded.
void matmul_ref(const Matrix & w, const float * x, int64_t n_tokens, float * y);

// What the products over a model's weights take from a workspace (matmul and matmul_group take their scratch from
// Workspace::scratch()): the quantised activation rows on the calling thread, for at most `max_rows` token rows
// held at once (a group's distinct inputs together), and every thread's kernel blocks for products of up to
// `max_tokens` tokens. `weights` lists each weight's type and row width (ggml ne[0]); other sizes do not matter.
struct WeightShape {
    tensor::ElemType type = tensor::ElemType::F32;
    int64_t cols = 0;
};
WorkspaceSize matmul_workspace(const std::vector<WeightShape> & weights, int64_t max_tokens, int64_t max_rows);

}  // namespace offgrid::ops
