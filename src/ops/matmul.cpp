// The matmul driver: chooses the weight type's kernels from the dispatch table (or the generic path: dequantise
// the row, then the F32 dot), quantises the activations once per token row when the kernel wants quantised blocks,
// and splits the work by output rows. Every output is one vec_dot (or a dot_tile, bit-identical to it), so a
// result never depends on the thread count or on the other tokens of the call.
#include "ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_quant_int8.h"
#include "ops/rows16.h"
#include "ops/workspace.h"

namespace offgrid::ops {

namespace {

using tensor::ElemType;

[[noreturn]] void unsupported(const char * what, ElemType type) {
    throw Error(std::string(what) + ": unsupported weight type " + std::to_string(static_cast<uint32_t>(type)));
}

// The kernels a matmul uses: the type's entry at the active level, or null for the generic path.
const cpu::TypeKernels * active_kernels(ElemType type) { return cpu::kernels_for(type, cpu::active_isa()); }

const cpu::TypeKernels & f32_kernels() {
    static const cpu::TypeKernels * k = cpu::kernels_for(ElemType::F32, cpu::active_isa());
    return *k;
}

// A new PreparedActivations::key (never 0).
uint64_t next_act_key() {
    static std::atomic<uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

// Activations in the kernel's format: the f32 rows themselves, or rows each quantised on its own (their room
// taken by take_activation_rows from an arena: 64-byte aligned, so the blocks' vectors never straddle cache lines
// when the row size allows it).
PreparedActivations layout_of(const cpu::TypeKernels * k, const float * x, int64_t cols) {
    PreparedActivations a;
    a.key = next_act_key();
    if (k == nullptr || k->act_type == ElemType::F32) {
        a.stride = static_cast<size_t>(cols) * sizeof(float);
        a.data = reinterpret_cast<const uint8_t *>(x);
        return a;
    }
    a.stride = cpu::act_row_bytes(k->act_type, cols);
    a.quantize = k->quantize_act;
    a.x = x;
    a.cols = cols;
    return a;
}

// Every token row quantised, on the pool when there is enough of it.
void quantize_all_rows(const PreparedActivations & a, int64_t n_tokens, ThreadPool * pool) {
    if (a.quantize == nullptr || n_tokens <= 0) return;
    if (pool == nullptr || pool->n_threads() == 1 || n_tokens * a.cols < kParallelQuantElems) {
        quantize_activation_rows(a, 0, n_tokens);
        return;
    }
    parallel_for(
        pool, static_cast<size_t>(n_tokens),
        [&](size_t t0, size_t t1) { quantize_activation_rows(a, static_cast<int64_t>(t0), static_cast<int64_t>(t1)); },
        8);
}

// Activation bytes a thread keeps hot while it sweeps its rows: a chunk of token rows that fits in L2 next to the
// weights, so each weight tile is reused for every token of the chunk from L1 and the chunk is read from L2.
constexpr size_t kActChunkBytes = 256 * 1024;
// Weight rows a thread sweeps past each token group when the activation rows are the larger side.
constexpr size_t kWeightBlockBytes = 256 * 1024;
constexpr size_t kMinBytesPerPart = 32 * 1024;

// Rows [r0, r1) of Y for every token, through the type's kernels, in tiles of up to kTileMax rows by
// k.tile_tokens tokens: with 16-bit activations weight-row blocks outer, token groups, then row tiles; otherwise
// token chunks outer, row tiles, then token groups. Each output is one vec_dot (or the tile's bit-identical
// equivalent), so the order changes speed only.
void rows_with_kernels(const Matrix & w, const cpu::TypeKernels & k, const uint8_t * act, size_t act_stride,
                       int64_t n_tokens, float * y, int64_t r0, int64_t r1) {
    constexpr int tile = cpu::kTileMax;
    const int tt_max = k.dot_tile != nullptr ? k.tile_tokens : tile;
    if (k.dot_tile != nullptr && k.act_type == ElemType::Q16_K && n_tokens > tt_max) {
        // 16-bit activation rows are 3-4x the bytes of a quantised weight row: keep a token group's rows in L1
        // and sweep a block of weight rows that stays in L2 past it (weights: ~2 KB per tile from L2, instead
        // of ~20 KB of activations per tile). 4-15 % faster than chunking the tokens (q4_K from cache).
        const int64_t block = std::max<int64_t>(tile, static_cast<int64_t>(kWeightBlockBytes / w.row_bytes) / tile * tile);
        for (int64_t b0 = r0; b0 < r1; b0 += block) {
            const int64_t b1 = std::min(r1, b0 + block);
            for (int64_t t = 0; t < n_tokens; t += tt_max) {
                const int nt = static_cast<int>(std::min<int64_t>(tt_max, n_tokens - t));
                // The first token group brings the block in from DRAM: one row after another there (see below).
                const int rows_per_tile = t == 0 ? 1 : tile;
                for (int64_t r = b0; r < b1; r += rows_per_tile) {
                    const int nr = static_cast<int>(std::min<int64_t>(rows_per_tile, b1 - r));
                    k.dot_tile(w.row(r), w.row_bytes, act + t * act_stride, act_stride, w.cols, nr, nt,
                               y + t * w.rows + r, static_cast<size_t>(w.rows));
                }
            }
        }
        return;
    }
    const bool q16_rows = k.act_type == ElemType::Q16_K;  // n_tokens <= tt_max here
    const bool entry_rows = k.row_tile_min_tokens > 0 && n_tokens >= k.row_tile_min_tokens &&
                            n_tokens <= cpu::kTileTokensMax;
    if (k.dot_tile != nullptr && (q16_rows || entry_rows)) {
        // A few tokens (a decode step of up to 8 sequences): the weights stream from DRAM once, so the rows go one
        // after another, each decoded once for all tokens (1 x n tiles). A 4-row tile reads four rows' blocks
        // in turn, which the prefetchers follow badly: 2-5x slower from DRAM (bench_quant_batch).
        for (int64_t r = r0; r < r1; ++r) {
            k.dot_tile(w.row(r), w.row_bytes, act, act_stride, w.cols, 1, static_cast<int>(n_tokens), y + r,
                       static_cast<size_t>(w.rows));
        }
        return;
    }
    const int64_t chunk =
        std::max<int64_t>(tt_max, static_cast<int64_t>(kActChunkBytes / act_stride) / tt_max * tt_max);
    for (int64_t c0 = 0; c0 < n_tokens; c0 += chunk) {
        const int64_t c1 = std::min(n_tokens, c0 + chunk);
        for (int64_t r = r0; r < r1; r += tile) {
            const int nr = static_cast<int>(std::min<int64_t>(tile, r1 - r));
            for (int64_t t = c0; t < c1; t += tt_max) {
                const int nt = static_cast<int>(std::min<int64_t>(tt_max, c1 - t));
                if (k.dot_tile != nullptr) {
                    k.dot_tile(w.row(r), w.row_bytes, act + t * act_stride, act_stride, w.cols, nr, nt,
                               y + t * w.rows + r, static_cast<size_t>(w.rows));
                    continue;
                }
                for (int tt = 0; tt < nt; ++tt) {
                    for (int rr = 0; rr < nr; ++rr) {
                        y[(t + tt) * w.rows + r + rr] = k.vec_dot(w.row(r + rr), act + (t + tt) * act_stride, w.cols);
                    }
                }
            }
        }
    }
}

// Prompt products (kGemmMinTokens tokens or more) through the entry's gemm: rows [r0, r1) by every token in one
// call, which blocks rows, tokens and columns itself; bit-identical to vec_dot like the tiles. Rows shorter than
// kGemmShortRow (the experts' down products, 256 wide) take it from kGemmShortRowTokens tokens: below that the
// 8-token tiles stream the weights faster (bench_gemm, one thread: 256 -> 1024 at 9 / 16 / 32 / 128 tokens, gemm
// against tiles 0.77 / 0.91 / 0.97-1.03 / 1.08).
constexpr int64_t kGemmShortRow = 512;
constexpr int64_t kGemmShortRowTokens = 32;
bool uses_gemm(const cpu::TypeKernels * k, const Matrix & w, int64_t n_tokens) {
    if (k == nullptr || k->gemm == nullptr) return false;
    if (k->act_type == ElemType::F32 && w.cols < kGemmShortRow) return n_tokens >= kGemmShortRowTokens;
    return n_tokens >= (w.cols <= cpu::kGemmNarrowRow ? k->gemm_min_tokens_narrow : k->gemm_min_tokens);
}
void rows_with_gemm(const Matrix & w, const cpu::TypeKernels & k, const PreparedActivations & act, int64_t n_tokens,
                    float * y, int64_t r0, int64_t r1) {
    k.gemm(w.row(r0), w.row_bytes, act.data, act.stride, w.cols, r1 - r0, n_tokens, y + r0, static_cast<size_t>(w.rows),
           act.key);
}

// Generic path for a type without kernels: each row dequantised once, then the F32 dot with every token.
void rows_generic(const Matrix & w, const float * x, int64_t n_tokens, float * y, int64_t r0, int64_t r1) {
    const cpu::TypeKernels & f32 = f32_kernels();
    auto * row = reinterpret_cast<float *>(
        Workspace::scratch().kernel_block(KernelBlock::dequantised_rows, static_cast<size_t>(w.cols) * sizeof(float)));
    for (int64_t r = r0; r < r1; ++r) {
        tensor::dequantize_row(w.type, w.row(r), row, static_cast<size_t>(w.cols));
        for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + r] = f32.vec_dot(row, x + t * w.cols, w.cols);
    }
}

// Rows [r0, r1) of a matrix in the file's layout by the type's kernels (or the generic path).
void plain_rows(const Matrix & w, const cpu::TypeKernels * k, const PreparedActivations & act, const float * x,
                int64_t n_tokens, float * y, int64_t r0, int64_t r1) {
    if (uses_gemm(k, w, n_tokens)) {
        rows_with_gemm(w, *k, act, n_tokens, y, r0, r1);
    } else if (k != nullptr) {
        rows_with_kernels(w, *k, act.data, act.stride, n_tokens, y, r0, r1);
    } else {
        rows_generic(w, x, n_tokens, y, r0, r1);
    }
}

// Group g of a rows16 matrix as a matrix of 16 plain rows in `out` (16 * w.row_bytes bytes).
Matrix plain_group(const Matrix & w, int64_t g, uint8_t * out) {
    unpack_rows16_group(w, g, out);
    return make_matrix(w.type, out, w.cols, kRows16);
}
Matrix plain_group(const Matrix & w, int64_t g, std::vector<uint8_t> & storage) {
    storage.resize(static_cast<size_t>(kRows16) * w.row_bytes);
    return plain_group(w, g, storage.data());
}

// Groups [g0, g1) of a rows16 matrix: the entry's rows16 product for a few tokens of its own activations;
// otherwise each group unpacked into 16 plain rows for the kernels above (prompts: the unpacking is a small part
// of a product of many tokens; other activation modes, which never meet such matrices in a model).
void rows16_groups(const Matrix & w, const cpu::TypeKernels * k, const PreparedActivations & act, const float * x,
                   int64_t n_tokens, float * y, int64_t g0, int64_t g1) {
    g1 = std::min(g1, w.rows / kRows16);
    if (g0 >= g1) return;
    const size_t group_bytes = static_cast<size_t>(kRows16) * w.row_bytes;
    if (k != nullptr && k->rows16 != nullptr && n_tokens <= cpu::kTileTokensMax) {
        for (int64_t g = g0; g < g1; ++g) {
            k->rows16(w.data + static_cast<size_t>(g) * group_bytes, w.cols, act.data, act.stride,
                      static_cast<int>(n_tokens), y + g * kRows16, static_cast<size_t>(w.rows));
        }
        return;
    }
    Scope scope(Workspace::scratch());
    uint8_t * plain = scope.take<uint8_t>(group_bytes).data();
    float * yg = scope.take<float>(static_cast<size_t>(kRows16 * n_tokens)).data();
    for (int64_t g = g0; g < g1; ++g) {
        const Matrix m = plain_group(w, g, plain);
        plain_rows(m, k, act, x, n_tokens, yg, 0, kRows16);
        for (int64_t t = 0; t < n_tokens; ++t) {
            std::copy(yg + t * kRows16, yg + (t + 1) * kRows16, y + t * w.rows + g * kRows16);
        }
    }
}

}  // namespace

bool supported_weight_type(ElemType type) {
    const auto t = tensor::type_traits(static_cast<uint32_t>(type));
    return t.has_value() && t->can_dequantize;
}

size_t weight_row_bytes(ElemType type, int64_t n) {
    if (!supported_weight_type(type)) unsupported("matrix", type);
    return static_cast<size_t>(tensor::row_bytes(type, static_cast<uint64_t>(n)));
}

Matrix make_matrix(ElemType type, const void * data, int64_t cols, int64_t rows) {
    if (!supported_weight_type(type)) unsupported("matrix", type);
    if (cols <= 0 || rows < 0) throw Error("matrix: bad shape " + std::to_string(cols) + "x" + std::to_string(rows));
    const tensor::TypeTraits & t = tensor::traits(type);
    if (cols % t.block_size != 0) {
        throw Error("matrix: " + std::string(t.name) + " row width " + std::to_string(cols) +
                    " is not a multiple of " + std::to_string(t.block_size));
    }
    Matrix m;
    m.type = type;
    m.data = static_cast<const uint8_t *>(data);
    m.cols = cols;
    m.rows = rows;
    m.row_bytes = weight_row_bytes(type, cols);
    return m;
}

Matrix Matrix::row_slice(int64_t first, int64_t count) const {
    if (rows16 && (first % kRows16 != 0 || count % kRows16 != 0)) {
        throw Error("matrix: a slice of a 16-row-group matrix must take whole groups");
    }
    Matrix m = *this;
    m.data = row(first);
    m.rows = count;
    return m;
}

float dot_row(const Matrix & w, int64_t r, const float * x) {
    if (w.rows16) {
        std::vector<uint8_t> plain;
        return dot_row(plain_group(w, r / kRows16, plain), r % kRows16, x);
    }
    float y;
    const Matrix one = w.row_slice(r, 1);
    matmul(one, x, 1, &y, nullptr);
    return y;
}

float dot_row_ref(const Matrix & w, int64_t r, const float * x) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    dequantize_matrix_row(w, r, row.data());
    float s = 0;
    for (int64_t i = 0; i < w.cols; ++i) s += row[i] * x[i];
    return s;
}

void dequantize_matrix_row(const Matrix & w, int64_t r, float * out) {
    if (w.rows16) {
        std::vector<uint8_t> plain;
        dequantize_matrix_row(plain_group(w, r / kRows16, plain), r % kRows16, out);
        return;
    }
    tensor::dequantize_row(w.type, w.row(r), out, static_cast<size_t>(w.cols));
}

void matvec(const Matrix & w, const float * x, float * y, ThreadPool * pool) {
    matmul(w, x, 1, y, pool);
}

void matmul(const Matrix & w, const float * x, int64_t n_tokens, float * y, ThreadPool * pool) {
    if (!supported_weight_type(w.type)) unsupported("matmul", w.type);
    if (n_tokens <= 0 || w.rows == 0) return;
    const cpu::TypeKernels * k = active_kernels(w.type);
    Scope scope(Workspace::scratch());
    PreparedActivations prepared = layout_of(k, x, w.cols);
    take_activation_rows(prepared, n_tokens, scope.arena());
    quantize_all_rows(prepared, n_tokens, pool);
    if (w.rows16) {
        const size_t group_work = static_cast<size_t>(kRows16) * w.row_bytes * static_cast<size_t>(n_tokens);
        parallel_claims(
            pool, static_cast<size_t>(w.rows / kRows16),
            [&](size_t begin, size_t end) {
                rows16_groups(w, k, prepared, x, n_tokens, y, static_cast<int64_t>(begin), static_cast<int64_t>(end));
            },
            std::max<size_t>(1, (kMinBytesPerPart + group_work - 1) / group_work));
        return;
    }
    const uint8_t * act = prepared.data;
    const size_t act_stride = prepared.stride;
    // Ranges of whole row tiles, so a tile is never cut by a thread boundary (not needed for the bits, which
    // are the same either way, but it keeps the tiles full).
    const int64_t tile = cpu::kTileMax;
    const size_t n_tiles = static_cast<size_t>((w.rows + tile - 1) / tile);
    // A claimed range is at least kMinBytesPerPart of weights times tokens: below that a claim costs more than
    // the rows (small products run inline, on the caller). Ranges are claimed largest first (parallel_claims),
    // so the threads end within one such range of each other; every output is the same whoever computes it.
    const size_t tile_work = static_cast<size_t>(tile) * w.row_bytes * static_cast<size_t>(n_tokens);
    const size_t min_tiles = std::max<size_t>(4, (kMinBytesPerPart + tile_work - 1) / tile_work);
    parallel_claims(
        pool, n_tiles,
        [&](size_t begin, size_t end) {
            const int64_t r0 = static_cast<int64_t>(begin) * tile;
            const int64_t r1 = std::min<int64_t>(w.rows, static_cast<int64_t>(end) * tile);
            if (uses_gemm(k, w, n_tokens)) {
                rows_with_gemm(w, *k, prepared, n_tokens, y, r0, r1);
            } else if (k != nullptr) {
                rows_with_kernels(w, *k, act, act_stride, n_tokens, y, r0, r1);
            } else {
                rows_generic(w, x, n_tokens, y, r0, r1);
            }
        },
        min_tiles);
}

PreparedActivations activation_layout(const Matrix & w, const float * x) {
    if (!supported_weight_type(w.type)) unsupported("matmul", w.type);
    return layout_of(active_kernels(w.type), x, w.cols);
}

void take_activation_rows(PreparedActivations & a, int64_t n_tokens, Arena & arena) {
    if (a.quantize != nullptr && n_tokens > 0) a.data = arena.take<uint8_t>(a.stride * static_cast<size_t>(n_tokens)).data();
}

void quantize_activation_rows(const PreparedActivations & a, int64_t t0, int64_t t1) {
    if (a.quantize == nullptr) return;
    auto * base = const_cast<uint8_t *>(a.data);  // the caller's storage (reserve_activations)
    for (int64_t t = t0; t < t1; ++t) a.quantize(a.x + t * a.cols, base + t * a.stride, a.cols);
}

void matmul_rows(const Matrix & w, const float * x, const PreparedActivations & act, int64_t n_tokens, float * y,
                 int64_t r0, int64_t r1) {
    if (!supported_weight_type(w.type)) unsupported("matmul", w.type);
    r1 = std::min(r1, w.rows);
    if (n_tokens <= 0 || r0 >= r1) return;
    const cpu::TypeKernels * k = active_kernels(w.type);
    if (w.rows16) {
        // The groups that start in [r0, r1), whole: a range that starts inside a group leaves it to the range
        // holding its first row, so every output is written once, whatever the cut.
        rows16_groups(w, k, act, x, n_tokens, y, (r0 + kRows16 - 1) / kRows16, (r1 + kRows16 - 1) / kRows16);
        return;
    }
    plain_rows(w, k, act, x, n_tokens, y, r0, r1);
}

void matmul_ref(const Matrix & w, const float * x, int64_t n_tokens, float * y) {
    for (int64_t t = 0; t < n_tokens; ++t) {
        for (int64_t o = 0; o < w.rows; ++o) y[t * w.rows + o] = dot_row_ref(w, o, x + t * w.cols);
    }
}

WorkspaceSize matmul_workspace(const std::vector<WeightShape> & weights, int64_t max_tokens, int64_t max_rows) {
    WorkspaceSize size;
    size_t act_row = 0;
    for (const WeightShape & w : weights) {
        if (!supported_weight_type(w.type) || w.cols <= 0) continue;
        const cpu::TypeKernels * k = active_kernels(w.type);
        const auto cols = static_cast<size_t>(w.cols);
        if (k != nullptr && k->act_type != ElemType::F32) act_row = std::max(act_row, cpu::act_row_bytes(k->act_type, w.cols));
        if (k != nullptr && k->gemm != nullptr && k->act_type == ElemType::F32) {
            // The float gemm packs the tokens by 16 columns (pack_tokens in gemm_float_avx512.cpp).
            auto & b = size.kernel_bytes[static_cast<size_t>(KernelBlock::packed_tokens)];
            b = std::max(b, static_cast<size_t>(max_tokens) * ((cols + 15) / 16 * 16) * sizeof(float));
        }
        if (k != nullptr && k->gemm != nullptr && k->act_type != ElemType::F32) {
            // The 8-bit prompt products pack the tokens and decode rows: 16 at a time on the tile unit
            // (kernels_quant_int8_amx.cpp), 2 at AVX2 (kernels_quant_int8_gemm_avx2.cpp), 16 at AVX-512
            // (kernels_quant_int8_gemm_avx512.cpp; 8 for products of up to 8 tokens, whose sizes it includes).
            auto & t = size.kernel_bytes[static_cast<size_t>(KernelBlock::packed_tokens)];
            t = std::max({t, cpu::int8_gemm_token_bytes(w.type, w.cols, max_tokens),
                          cpu::quant::int8_gemm_avx2_token_bytes(w.type, w.cols, max_tokens),
                          cpu::quant::int8_gemm_avx512_token_bytes(w.type, w.cols, max_tokens)});
            auto & r = size.kernel_bytes[static_cast<size_t>(KernelBlock::tile_weights)];
            r = std::max({r, cpu::int8_gemm_weight_bytes(w.type, w.cols),
                          cpu::quant::int8_gemm_avx2_weight_bytes(w.type, w.cols),
                          cpu::quant::int8_gemm_avx512_weight_bytes(w.type, w.cols)});
        }
        if (w.type != ElemType::F32) {
            // A tile's rows dequantised (the exact path's fused_tile) or one row (the generic path).
            auto & b = size.kernel_bytes[static_cast<size_t>(KernelBlock::dequantised_rows)];
            b = std::max(b, static_cast<size_t>(cpu::kTileMax) * cols * sizeof(float));
        }
    }
    // The quantised rows (each distinct input's own take, aligned), plus a group's books (ops/matmul_group.cpp):
    // a layout and up to one quantisation job per task and per 16 rows, at most two tasks per row held (an
    // expert's gate and up) and a few more, and the cuts.
    const size_t rows = static_cast<size_t>(std::max<int64_t>(max_rows, 1));
    const size_t tasks = 2 * rows + 8;
    const size_t books = tasks * (sizeof(PreparedActivations) + 32) + rows * 2 + (1024 + 1) * 16 + 3 * 64;
    size.main_bytes = rows * act_row + tasks * 64 + books;
    return size;
}

}  // namespace offgrid::ops
