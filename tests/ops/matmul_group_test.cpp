// matmul_group against one matmul per task (bit for bit, any thread count), and the pool's run_parts.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/half.h"
#include "random_data.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/thread_pool.h"
#include "tensor/quantize.h"

namespace offgrid::ops {
namespace {

using tensor::ElemType;

using test_data::random_floats;

// Weight bytes of a rows x cols matrix: encoded floats, or (Q4_K, Q6_K: no encoder) random blocks with small
// f16 scales.
std::vector<uint8_t> weight_bytes(ElemType type, int64_t cols, int64_t rows, uint32_t seed) {
    if (type != ElemType::Q4_K && type != ElemType::Q6_K) {
        const auto w = random_floats(static_cast<size_t>(cols * rows), seed);
        return tensor::quantize(type, w);
    }
    const size_t bytes = weight_row_bytes(type, cols) * static_cast<size_t>(rows);
    std::vector<uint8_t> out(bytes);
    std::mt19937 rng(seed);
    for (auto & b : out) b = static_cast<uint8_t>(rng());
    // Q4_K: f16 d, f16 dmin, 12 bytes of scales, 128 of quants; Q6_K: 128 + 64 bytes of quants, 16 scales, f16 d.
    const size_t block = type == ElemType::Q4_K ? 144 : 210;
    for (size_t at = 0; at < bytes; at += block) {
        const uint16_t d = float_to_half(0.01f), dmin = float_to_half(0.005f);
        if (type == ElemType::Q4_K) {
            std::memcpy(&out[at], &d, 2);
            std::memcpy(&out[at + 2], &dmin, 2);
        } else {
            std::memcpy(&out[at + 208], &d, 2);
        }
    }
    return out;
}

struct Shape {
    int64_t cols, rows, tokens;
};

class MatmulGroup : public ::testing::TestWithParam<ElemType> {};

TEST_P(MatmulGroup, EqualsOneMatmulPerTaskAtEveryThreadCount) {
    const ElemType type = GetParam();
    // Odd row counts (partial tiles), a one-row task, tokens from 1 to 9, one task with no tokens.
    const std::vector<Shape> shapes = {{256, 37, 1}, {256, 8, 3}, {512, 101, 5}, {256, 1, 2},
                                       {256, 64, 0}, {512, 300, 9}, {256, 4, 1}};
    std::vector<std::vector<uint8_t>> weights;
    std::vector<std::vector<float>> inputs, expected;
    std::vector<MatmulTask> tasks;
    for (size_t i = 0; i < shapes.size(); ++i) {
        const Shape & s = shapes[i];
        weights.push_back(weight_bytes(type, s.cols, s.rows, 10 + static_cast<uint32_t>(i)));
        inputs.push_back(random_floats(static_cast<size_t>(s.cols * std::max<int64_t>(1, s.tokens)), 50 + static_cast<uint32_t>(i)));
        expected.emplace_back(static_cast<size_t>(s.rows * std::max<int64_t>(1, s.tokens)), -1.0f);
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
        const Matrix m = make_matrix(type, weights[i].data(), shapes[i].cols, shapes[i].rows);
        matmul(m, inputs[i].data(), shapes[i].tokens, expected[i].data());
        tasks.push_back({m, inputs[i].data(), shapes[i].tokens, nullptr});
    }
    for (int threads : {0, 1, 2, 3, 4}) {
        std::unique_ptr<ThreadPool> pool = threads > 0 ? std::make_unique<ThreadPool>(threads) : nullptr;
        std::vector<std::vector<float>> got;
        for (const auto & e : expected) got.emplace_back(e.size(), -1.0f);
        for (size_t i = 0; i < tasks.size(); ++i) tasks[i].y = got[i].data();
        matmul_group(tasks, pool.get());
        for (size_t i = 0; i < tasks.size(); ++i) {
            ASSERT_EQ(0, std::memcmp(got[i].data(), expected[i].data(), got[i].size() * sizeof(float)))
                << "task " << i << " with " << threads << " threads";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulGroup, ::testing::Values(ElemType::F32, ElemType::F16, ElemType::Q8_0, ElemType::Q4_K),
                         [](const auto & info) { return std::string(tensor::traits(info.param).name); });

TEST(MatmulGroup, LargeGroupSplitsAcrossThreadsWithTheSameBits) {
    // Big enough that every thread gets a share: 8 tasks of 256 rows of 1024 floats.
    const int64_t cols = 1024, rows = 256;
    std::vector<std::vector<uint8_t>> weights;
    std::vector<std::vector<float>> expected, got;
    const auto x = random_floats(static_cast<size_t>(cols * 2), 7);
    std::vector<MatmulTask> tasks;
    for (uint32_t i = 0; i < 8; ++i) weights.push_back(weight_bytes(ElemType::F32, cols, rows, 100 + i));
    for (uint32_t i = 0; i < 8; ++i) {
        const Matrix m = make_matrix(ElemType::F32, weights[i].data(), cols, rows);
        expected.emplace_back(static_cast<size_t>(rows * 2));
        matmul(m, x.data(), 2, expected.back().data());
        got.emplace_back(static_cast<size_t>(rows * 2), -1.0f);
        tasks.push_back({m, x.data(), 2, got.back().data()});
    }
    ThreadPool pool(3);
    matmul_group(tasks, &pool);
    for (size_t i = 0; i < tasks.size(); ++i) EXPECT_EQ(got[i], expected[i]) << i;
}

// matmul of `tokens` tokens at 1 and 2 threads: every output equals the product of its row and token alone.
void expect_each_output_is_its_own_dot(const Matrix & m, const std::vector<float> & x, int64_t tokens) {
    const int64_t rows = m.rows, cols = m.cols;
    for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<float> y(static_cast<size_t>(rows * tokens), -1.0f);
        matmul(m, x.data(), tokens, y.data(), &pool);
        for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
                ASSERT_EQ(y[t * rows + r], dot_row(m, r, x.data() + t * cols))
                    << tokens << " tokens, row " << r << " token " << t << ", " << threads << " threads";
            }
        }
    }
}

TEST(Matmul, PromptProductEqualsOneDotPerOutput) {
    // 503 Q4_K rows of 1024 (more than one 256 KB block of weight rows, a partial last tile) by 21 tokens (two
    // full 8-token groups and a partial one).
    const int64_t cols = 1024, rows = 503, tokens = 21;
    const auto w = weight_bytes(ElemType::Q4_K, cols, rows, 300);
    const auto x = random_floats(static_cast<size_t>(cols * tokens), 301);
    expect_each_output_is_its_own_dot(make_matrix(ElemType::Q4_K, w.data(), cols, rows), x, tokens);
}

TEST(Matmul, FewTokenProductEqualsOneDotPerOutput) {
    // A decode step of 1 to 9 sequences (the few-token path: rows one after another, each a 1 x n tile, and
    // beyond the tile's tokens the prompt order) on the types of the quantised bench file, with a partial last
    // row tile.
    const int64_t cols = 1024, rows = 203;
    for (ElemType type : {ElemType::Q4_K, ElemType::Q6_K, ElemType::Q8_0}) {
        SCOPED_TRACE(static_cast<int>(type));
        const auto w = weight_bytes(type, cols, rows, 400);
        const Matrix m = make_matrix(type, w.data(), cols, rows);
        for (int64_t tokens = 1; tokens <= 9; ++tokens) {
            const auto x = random_floats(static_cast<size_t>(cols * tokens), 401 + static_cast<uint32_t>(tokens));
            expect_each_output_is_its_own_dot(m, x, tokens);
        }
    }
}

TEST(MatmulGroup, SharedInputsAndParallelQuantisationKeepTheBits) {
    // Prompt-sized Q4_K tasks (their activations quantised on the pool: 70 x 1024 elements each), three of them
    // reading the same input (quantised once), one the same input with fewer tokens, one the same floats read
    // as rows of another width.
    const int64_t cols = 1024;
    const auto x = random_floats(static_cast<size_t>(cols * 70), 8);
    const std::vector<Shape> shapes = {{cols, 40, 70}, {cols, 13, 70}, {cols, 64, 33}, {512, 20, 70}, {cols, 9, 70}};
    const std::vector<const float *> inputs = {x.data(), x.data(), x.data(), x.data(), x.data()};  // 512: another layout
    std::vector<std::vector<uint8_t>> weights;
    std::vector<std::vector<float>> expected;
    std::vector<MatmulTask> tasks;
    for (size_t i = 0; i < shapes.size(); ++i) {
        weights.push_back(weight_bytes(ElemType::Q4_K, shapes[i].cols, shapes[i].rows, 200 + static_cast<uint32_t>(i)));
        const Matrix m = make_matrix(ElemType::Q4_K, weights[i].data(), shapes[i].cols, shapes[i].rows);
        expected.emplace_back(static_cast<size_t>(shapes[i].rows * shapes[i].tokens));
        matmul(m, inputs[i], shapes[i].tokens, expected.back().data());  // no pool: quantised on the caller
        tasks.push_back({m, inputs[i], shapes[i].tokens, nullptr});
    }
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<std::vector<float>> got;
        for (const auto & e : expected) got.emplace_back(e.size(), -1.0f);
        for (size_t i = 0; i < tasks.size(); ++i) tasks[i].y = got[i].data();
        matmul_group(tasks, &pool);
        for (size_t i = 0; i < tasks.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "task " << i << ", " << threads << " threads";
        // matmul alone, its activations quantised on the pool too.
        std::vector<float> one(expected[0].size(), -1.0f);
        matmul(tasks[0].w, inputs[0], shapes[0].tokens, one.data(), &pool);
        EXPECT_EQ(one, expected[0]) << threads << " threads";
    }
}

TEST(ThreadPool, RunPartsCallsEachPartOnceAndRethrows) {
    ThreadPool pool(3);
    std::vector<std::atomic<int>> hits(40);
    pool.run_parts(40, [&](int p) { hits[p]++; });
    for (auto & h : hits) EXPECT_EQ(h.load(), 1);
    EXPECT_THROW(pool.run_parts(5, [](int p) {
        if (p == 3) throw std::runtime_error("part 3");
    }), std::runtime_error);
    std::atomic<int> after{0};
    pool.run_parts(4, [&](int) { after++; });
    EXPECT_EQ(after.load(), 4);
}

TEST(ThreadPool, ManyShortJobsBackToBack) {
    // The hot path without locks: thousands of tiny jobs, each must see all its parts done before the next.
    ThreadPool pool(4);
    std::vector<int> cells(4, 0);
    for (int job = 0; job < 20000; ++job) {
        pool.run_parts(4, [&](int p) { cells[p] += 1; });
        if (job % 1000 == 999) {
            for (int p = 0; p < 4; ++p) ASSERT_EQ(cells[p], job + 1);
        }
    }
}

TEST(ThreadPool, WorkersSleepAndWakeUp) {
    // Longer than the spin: the workers go to sleep and the next job wakes them.
    ThreadPool pool(2);
    std::atomic<int> sum{0};
    for (int round = 0; round < 3; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        pool.parallel_for(100, [&](size_t b, size_t e) { sum += static_cast<int>(e - b); });
    }
    EXPECT_EQ(sum.load(), 300);
}

}  // namespace
}  // namespace offgrid::ops
