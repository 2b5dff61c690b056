// The prompt products of F32 weights (TypeKernels::gemm, ops/cpu/gemm_float.h): every blocking variant, and the
// table's entry at every level that has one, gives every output exactly the bits of the level's one-token vec_dot,
// for 9-70 tokens, row counts that leave partial register tiles and row widths with partial vectors and several
// column chunks, writing nothing outside its rows and tokens; and ops::matmul of 9-70 tokens (which takes the
// gemm when the active level has one, OFFGRID_ISA) gives each output the bits of that level's vec_dot with 1 and
// 2 threads, so a prompt token's result never depends on the thread count or the other tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/gemm_float.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/thread_pool.h"
#include "random_data.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu {
namespace {

using tensor::ElemType;
using test_data::random_floats;

// Rows of n floats at a stride longer than the row (the kernels must follow the stride, not n).
struct Rows {
    std::vector<float> data;
    size_t stride = 0;  // in floats
    const float * row(int64_t i) const { return data.data() + i * stride; }
};
Rows random_rows(int64_t n, int64_t count, uint32_t seed) {
    Rows r;
    r.stride = static_cast<size_t>(n) + 3;
    r.data = random_floats(r.stride * static_cast<size_t>(count), seed);
    return r;
}

using GemmFn = void (*)(const void *, size_t, const void *, size_t, int64_t, int64_t, int64_t, float *, size_t,
                        uint64_t);

// Runs one product through `gemm` and checks every output against vec_dot bit for bit, and the padding of y.
void expect_gemm_matches(GemmFn gemm, const TypeKernels & k, int64_t n, int64_t rows, int64_t tokens,
                         const std::string & what) {
    const Rows w = random_rows(n, rows, static_cast<uint32_t>(100 + n + rows));
    const Rows x = random_rows(n, tokens, static_cast<uint32_t>(200 + n + tokens));
    const size_t y_stride = static_cast<size_t>(rows) + 5;
    std::vector<float> y(y_stride * static_cast<size_t>(tokens + 1), -7.0f);
    gemm(w.data.data(), w.stride * 4, x.data.data(), x.stride * 4, n, rows, tokens, y.data(), y_stride, 0);
    for (int64_t t = 0; t <= tokens; ++t) {
        for (size_t r = 0; r < y_stride; ++r) {
            const float v = y[t * y_stride + r];
            if (t < tokens && r < static_cast<size_t>(rows)) {
                const float one = k.vec_dot(w.row(static_cast<int64_t>(r)), x.row(t), n);
                ASSERT_EQ(std::memcmp(&v, &one, 4), 0)
                    << what << " n=" << n << " " << rows << "x" << tokens << " at (" << r << "," << t << "): " << v
                    << " vs vec_dot " << one;
            } else {
                ASSERT_EQ(v, -7.0f) << what << ": wrote outside its " << rows << "x" << tokens;
            }
        }
    }
}

const int64_t kWidths[] = {1, 29, 257, 333, 1040, 16, 100};

TEST(Gemm, EveryVariantIsBitIdenticalToVecDot) {
    const auto levels = available_isas();
    if (std::find(levels.begin(), levels.end(), Isa::Avx512) == levels.end()) GTEST_SKIP() << "no AVX-512 on this CPU";
    const TypeKernels & k = *kernels_for(ElemType::F32, Isa::Avx512);
    for (const GemmVariant & v : f32_gemm_variants_avx512()) {
        // Every token count 9-70 (register tiles of 6 tokens cut at every offset, token blocks of 48 crossed),
        // rows 13 (three 4-row tiles and one row), the widths in turn.
        for (int64_t tokens = 9; tokens <= 70; ++tokens) {
            const int64_t n = kWidths[tokens % std::size(kWidths)];
            expect_gemm_matches(v.gemm, k, n, 13, tokens, v.name);
        }
        // Row blocks crossed too, and every partial row tile.
        for (int64_t rows : {1, 2, 3, 70, 150}) expect_gemm_matches(v.gemm, k, 1040, rows, 61, v.name);
    }
}

TEST(Gemm, TableEntriesAreBitIdenticalToVecDot) {
    int checked = 0;
    for (Isa isa : available_isas()) {
        const TypeKernels & k = *kernels_for(ElemType::F32, isa);
        if (k.gemm == nullptr) continue;
        ++checked;
        for (int64_t tokens : {9, 10, 31, 32, 47, 48, 49, 70}) {
            for (int64_t n : kWidths) expect_gemm_matches(k.gemm, k, n, 37, tokens, isa_name(isa));
        }
    }
    const auto levels = available_isas();
    if (std::find(levels.begin(), levels.end(), Isa::Avx512) != levels.end()) {
        EXPECT_GT(checked, 0) << "the AVX-512 level has no F32 gemm";
    }
}

// A key names the activations for the row ranges of one product (the entry packs them once per thread): ranges
// with one key give vec_dot's bits, and a new key over rows changed in place gives the new rows' bits.
TEST(Gemm, ActivationKeyCoversOneProductOnly) {
    const TypeKernels & k = *kernels_for(ElemType::F32, detected_isa());
    if (k.gemm == nullptr) GTEST_SKIP() << "no gemm entry at " << isa_name(detected_isa());
    const int64_t n = 333, rows = 40, tokens = 23;
    const Rows w = random_rows(n, rows, 7);
    Rows x = random_rows(n, tokens, 8);
    std::vector<float> y(static_cast<size_t>(rows * tokens));
    auto check = [&](uint64_t key, const char * what) {
        for (int64_t r0 = 0; r0 < rows; r0 += 12) {
            const int64_t nr = std::min<int64_t>(12, rows - r0);
            k.gemm(w.row(r0), w.stride * 4, x.data.data(), x.stride * 4, n, nr, tokens, y.data() + r0,
                   static_cast<size_t>(rows), key);
        }
        for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
                const float one = k.vec_dot(w.row(r), x.row(t), n);
                ASSERT_EQ(std::memcmp(&y[t * rows + r], &one, 4), 0) << what << " at (" << r << "," << t << ")";
            }
        }
    };
    check(1001, "first key");
    for (float & v : x.data) v = -0.5f * v + 0.25f;
    check(1002, "new key after the rows changed");
}

// Through the driver at the process's level: every output is that level's vec_dot, at 1 and 2 threads.
TEST(Gemm, MatmulOfPromptsEqualsVecDotAtOneAndTwoThreads) {
    const TypeKernels & k = *kernels_for(ElemType::F32, active_isa());
    ThreadPool pool(2);
    const int64_t rows = 77;
    for (int64_t tokens = 9; tokens <= 70; tokens += 3) {
        const int64_t n = kWidths[tokens % std::size(kWidths)];
        const auto w = random_floats(static_cast<size_t>(n * rows), static_cast<uint32_t>(300 + tokens));
        const auto x = random_floats(static_cast<size_t>(n * tokens), static_cast<uint32_t>(400 + tokens));
        const Matrix m = make_matrix(ElemType::F32, w.data(), n, rows);
        for (ThreadPool * p : {static_cast<ThreadPool *>(nullptr), &pool}) {
            std::vector<float> y(static_cast<size_t>(rows * tokens));
            matmul(m, x.data(), tokens, y.data(), p);
            for (int64_t t = 0; t < tokens; ++t) {
                for (int64_t r = 0; r < rows; ++r) {
                    const float one = k.vec_dot(w.data() + r * n, x.data() + t * n, n);
                    ASSERT_EQ(std::memcmp(&y[t * rows + r], &one, 4), 0)
                        << isa_name(active_isa()) << (p ? " 2 threads" : " 1 thread") << " n=" << n
                        << " tokens=" << tokens << " at (" << r << "," << t << ")";
                }
            }
        }
    }
}

// matmul_group of F32 tasks on one input (q / k / v: one activation key, packed once per thread) and on the same
// rows with fewer tokens or another width (their own keys): every task's output is its matmul alone, bit for bit.
TEST(Gemm, GroupTasksSharingAnInputEqualTheirMatmuls) {
    const int64_t n = 1040, tokens = 40;
    const auto x = random_floats(static_cast<size_t>(n * tokens), 501);
    struct Shape {
        int64_t cols, rows, tokens;
    };
    const Shape shapes[] = {{n, 96, tokens}, {n, 37, tokens}, {n, 64, tokens}, {n, 50, 23}, {520, 41, tokens}};
    std::vector<std::vector<float>> weights, got, want;
    std::vector<MatmulTask> tasks;
    for (size_t i = 0; i < std::size(shapes); ++i) {
        const Shape & sh = shapes[i];
        weights.push_back(random_floats(static_cast<size_t>(sh.cols * sh.rows), 600 + static_cast<uint32_t>(i)));
        got.emplace_back(static_cast<size_t>(sh.rows * sh.tokens), -1.0f);
        want.emplace_back(static_cast<size_t>(sh.rows * sh.tokens), -2.0f);
    }
    for (size_t i = 0; i < std::size(shapes); ++i) {
        const Matrix m = make_matrix(ElemType::F32, weights[i].data(), shapes[i].cols, shapes[i].rows);
        matmul(m, x.data(), shapes[i].tokens, want[i].data(), nullptr);
        tasks.push_back({m, x.data(), shapes[i].tokens, got[i].data()});
    }
    ThreadPool pool(2);
    matmul_group(tasks, &pool);
    for (size_t i = 0; i < std::size(shapes); ++i) {
        ASSERT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * 4), 0) << "task " << i;
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu
