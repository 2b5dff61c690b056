// The float tiles of batched decode (F32, F16, BF16 weights; up to tile_tokens tokens per call): at every ISA
// level, every output of a tile is bit for bit the level's one-token vec_dot, for every row count 1-4, every
// token count up to the entry's tile_tokens and row widths with partial vectors; and ops::matmul of 1-9 tokens
// (so 9 = a full group of 8 and one more) gives each token exactly the bits of that token alone, with 1 and 2
// threads, within float rounding of the Scalar twin. The level of ops::matmul is the process's (OFFGRID_ISA). Widths
// around 512 cross the 8-token tile's column chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_float.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "random_data.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu {
namespace {

using tensor::ElemType;
using test_data::random_floats;

const ElemType kFloatTypes[] = {ElemType::F32, ElemType::F16, ElemType::BF16};
const int64_t kWidths[] = {1, 7, 16, 29, 100, 255, 256, 257, 333, 511, 512, 513, 1024, 1040, 1543};

struct Rows {
    std::vector<uint8_t> bytes;
    size_t stride = 0;
};

// count rows of n elements in `type`, each row padded (strides need not equal the row size).
Rows encode(ElemType type, int64_t n, int count, uint32_t seed, size_t pad) {
    Rows r;
    r.stride = tensor::row_bytes(type, n) + pad;
    r.bytes.assign(r.stride * count, 0);
    const auto x = random_floats(static_cast<size_t>(n * count), seed);
    for (int i = 0; i < count; ++i) tensor::quantize_row(type, x.data() + i * n, r.bytes.data() + i * r.stride, n);
    return r;
}

Rows activations(int64_t n, int count, uint32_t seed) {
    Rows r;
    r.stride = static_cast<size_t>(n) * sizeof(float) + 12;
    r.bytes.assign(r.stride * count, 0);
    const auto x = random_floats(static_cast<size_t>(n * count), seed);
    for (int i = 0; i < count; ++i) std::memcpy(r.bytes.data() + i * r.stride, x.data() + i * n, n * sizeof(float));
    return r;
}

TEST(FloatTiles, EveryShapeIsBitIdenticalToVecDot) {
    for (ElemType type : kFloatTypes) {
        for (Isa isa : available_isas()) {
            const TypeKernels & k = *kernels_for(type, isa);
            if (k.dot_tile == nullptr) continue;
            ASSERT_LE(k.tile_tokens, kTileTokensMax);
            const std::string what = std::string(tensor::traits(type).name) + " " + isa_name(isa);
            for (int64_t n : kWidths) {
                const Rows w = encode(type, n, kTileMax, static_cast<uint32_t>(11 + n), 8);
                const Rows a = activations(n, k.tile_tokens, static_cast<uint32_t>(12 + n));
                for (int nr = 1; nr <= kTileMax; ++nr) {
                    for (int nt = 1; nt <= k.tile_tokens; ++nt) {
                        const size_t y_stride = kTileMax + 5;
                        std::vector<float> y(y_stride * (k.tile_tokens + 1), -1.0f);
                        k.dot_tile(w.bytes.data(), w.stride, a.bytes.data(), a.stride, n, nr, nt, y.data(), y_stride);
                        for (int t = 0; t <= k.tile_tokens; ++t) {
                            for (size_t r = 0; r < y_stride; ++r) {
                                const float v = y[t * y_stride + r];
                                if (t < nt && r < static_cast<size_t>(nr)) {
                                    const float one = k.vec_dot(w.bytes.data() + r * w.stride,
                                                                a.bytes.data() + t * a.stride, n);
                                    ASSERT_EQ(std::memcmp(&v, &one, 4), 0) << what << " n=" << n << " tile " << nr
                                                                           << "x" << nt << " (" << r << "," << t << ")";
                                } else {
                                    ASSERT_EQ(v, -1.0f) << what << ": the tile wrote outside its " << nr << "x" << nt;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// Every F32 tile variant bench_float_tiles compares (the table's tile and the ones it replaced), 4 rows by 1 to
// tile_tokens tokens, each called twice in a row on the same rows (an 8-token tile prefetches on a tile's first
// visit only, so both paths run): every output bit for bit the level's vec_dot.
TEST(FloatTiles, EveryF32VariantOnFirstAndLaterVisitsIsBitIdenticalToVecDot) {
    int checked = 0;
    for (Isa isa : available_isas()) {
        const auto variants = isa == Isa::Avx512 ? f32_tile_variants_avx512()
                              : isa == Isa::Avx2 ? f32_tile_variants_avx2()
                                                 : std::vector<FloatTileVariant>{};
        const TypeKernels & k = *kernels_for(ElemType::F32, isa);
        for (const FloatTileVariant & v : variants) {
            for (int64_t n : kWidths) {
                const Rows w = encode(ElemType::F32, n, kTileMax, static_cast<uint32_t>(31 + n), 4);
                const Rows a = activations(n, v.tile_tokens, static_cast<uint32_t>(32 + n));
                for (int nt = 1; nt <= v.tile_tokens; ++nt) {
                    for (int visit = 0; visit < 2; ++visit) {
                        const size_t y_stride = kTileMax + 3;
                        std::vector<float> y(y_stride * nt, -1.0f);
                        v.dot_tile(w.bytes.data(), w.stride, a.bytes.data(), a.stride, n, kTileMax, nt, y.data(),
                                   y_stride);
                        for (int t = 0; t < nt; ++t) {
                            for (int r = 0; r < kTileMax; ++r) {
                                const float one =
                                    k.vec_dot(w.bytes.data() + r * w.stride, a.bytes.data() + t * a.stride, n);
                                ASSERT_EQ(std::memcmp(&y[t * y_stride + r], &one, 4), 0)
                                    << isa_name(isa) << " " << v.name << " n=" << n << " tokens=" << nt
                                    << " visit " << visit << " (" << r << "," << t << ")";
                            }
                        }
                        ++checked;
                    }
                }
            }
        }
    }
    if (checked == 0) GTEST_SKIP() << "no SIMD level with F32 tile variants on this CPU";
}

TEST(FloatTiles, MatmulOfSeveralTokensKeepsEachTokensBits) {
    ThreadPool two(2);
    const int64_t rows = 13;  // three full row tiles and one of a single row
    for (ElemType type : kFloatTypes) {
        const TypeKernels & scalar = *kernels_for(type, Isa::Scalar);
        for (int64_t n : {int64_t{7}, int64_t{333}, int64_t{1024}, int64_t{1543}}) {
            const Rows w = encode(type, n, static_cast<int>(rows), static_cast<uint32_t>(21 + n), 0);
            const Matrix m = make_matrix(type, w.bytes.data(), n, rows);
            const auto x = random_floats(static_cast<size_t>(9 * n), static_cast<uint32_t>(22 + n));
            // Each token alone: the reference bits.
            std::vector<float> alone(static_cast<size_t>(9 * rows));
            for (int t = 0; t < 9; ++t) matmul(m, x.data() + t * n, 1, alone.data() + t * rows, nullptr);
            for (int64_t t = 0; t < 9; ++t) {
                for (int64_t r = 0; r < rows; ++r) {
                    std::vector<float> wd(static_cast<size_t>(n));
                    tensor::dequantize_row(type, w.bytes.data() + r * w.stride, wd.data(), static_cast<size_t>(n));
                    double magnitude = 0;
                    for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(double(wd[i]) * x[t * n + i]);
                    const float twin = scalar.vec_dot(w.bytes.data() + r * w.stride, x.data() + t * n, n);
                    EXPECT_NEAR(alone[t * rows + r], twin, 1e-5 * magnitude + 1e-30)
                        << tensor::traits(type).name << " n=" << n << " (" << r << "," << t << ")";
                }
            }
            for (int n_tok = 1; n_tok <= 9; ++n_tok) {
                for (ThreadPool * pool : {static_cast<ThreadPool *>(nullptr), &two}) {
                    std::vector<float> y(static_cast<size_t>(n_tok * rows), -1.0f);
                    matmul(m, x.data(), n_tok, y.data(), pool);
                    ASSERT_EQ(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)), 0)
                        << tensor::traits(type).name << " n=" << n << " tokens=" << n_tok
                        << " threads=" << (pool ? 2 : 1) << " at " << isa_name(active_isa());
                }
            }
        }
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu
