// q4_K in 16-row groups (ops/rows16.h): the repack keeps every byte, the AVX-512 rows16 product has the q4_K
// 8-bit entry's bits, and every ops entry point gives a rows16 matrix the plain matrix's bits. In the default
// run the products take the fallback (groups unpacked); CMake runs this suite again with OFFGRID_QUANT_ACT=int8,
// where products of up to 8 tokens take the rows16 product.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "ops/cpu/dispatch.h"
#include "ops/half.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/rows16.h"
#include "ops/thread_pool.h"
#include "random_data.h"

namespace offgrid::ops {
namespace {

using tensor::ElemType;

// Random q4_K blocks with sane f16 scales (d, dmin) and random 6-bit scales and mins.
std::vector<uint8_t> random_q4_k(int64_t cols, int64_t rows, uint32_t seed) {
    std::vector<uint8_t> out(weight_row_bytes(ElemType::Q4_K, cols) * static_cast<size_t>(rows));
    std::mt19937 rng(seed);
    for (auto & b : out) b = static_cast<uint8_t>(rng());
    for (size_t at = 0; at < out.size(); at += 144) {
        const uint16_t d = float_to_half(0.001f * static_cast<float>(1 + rng() % 16));
        const uint16_t dmin = float_to_half(0.0005f * static_cast<float>(1 + rng() % 16));
        std::memcpy(&out[at], &d, 2);
        std::memcpy(&out[at + 2], &dmin, 2);
    }
    return out;
}

bool same_bits(const std::vector<float> & a, const std::vector<float> & b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Random q4_K weights in the file's layout and the same in 16-row groups.
struct BothLayouts {
    std::vector<uint8_t> bytes, packed;
    Matrix plain, grouped;
    BothLayouts(int64_t cols, int64_t rows, uint32_t seed)
        : bytes(random_q4_k(cols, rows, seed)), packed(bytes.size()) {
        plain = make_matrix(ElemType::Q4_K, bytes.data(), cols, rows);
        grouped = repack_rows16(plain, packed.data());
    }
};

TEST(Rows16, TheRepackKeepsEveryByte) {
    const int64_t cols = 768, rows = 48;
    const auto bytes = random_q4_k(cols, rows, 1);
    const Matrix plain = make_matrix(ElemType::Q4_K, bytes.data(), cols, rows);
    ASSERT_TRUE(rows16_eligible(plain));
    std::vector<uint8_t> packed(bytes.size());
    const Matrix m = repack_rows16(plain, packed.data());
    EXPECT_TRUE(m.rows16);
    EXPECT_NE(packed, bytes);
    std::vector<uint8_t> back(bytes.size());
    for (int64_t g = 0; g < rows / kRows16; ++g) {
        unpack_rows16_group(m, g, back.data() + static_cast<size_t>(g) * kRows16 * plain.row_bytes);
    }
    EXPECT_EQ(back, bytes);
    EXPECT_FALSE(rows16_eligible(make_matrix(ElemType::Q4_K, bytes.data(), cols, 40)));  // not whole groups
    EXPECT_FALSE(rows16_eligible(m));                                                      // already grouped
}

TEST(Rows16, TheProductHasTheRowDotsBits) {
    const cpu::TypeKernels * k = cpu::int8_kernels_for(ElemType::Q4_K, cpu::Isa::Avx512);
    bool avx512 = false;
    for (cpu::Isa isa : cpu::available_isas()) avx512 |= isa == cpu::Isa::Avx512;
    if (!avx512 || k == nullptr || k->rows16 == nullptr) GTEST_SKIP() << "no AVX-512 VNNI rows16 product here";
    const int64_t cols = 2560, rows = 32;
    const BothLayouts w(cols, rows, 2);
    const Matrix & plain = w.plain;
    const Matrix & m = w.grouped;
    const size_t stride = cpu::act_row_bytes(k->act_type, cols);
    for (int n_tok = 1; n_tok <= cpu::kTileTokensMax; ++n_tok) {
        const auto x = test_data::random_floats(static_cast<size_t>(n_tok * cols), 10 + n_tok);
        std::vector<uint8_t> act(stride * static_cast<size_t>(n_tok));
        for (int t = 0; t < n_tok; ++t) k->quantize_act(x.data() + t * cols, act.data() + t * stride, cols);
        std::vector<float> want(static_cast<size_t>(n_tok * rows)), got(want.size());
        for (int t = 0; t < n_tok; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
                want[t * rows + r] = k->vec_dot(plain.row(r), act.data() + t * stride, cols);
            }
        }
        for (int64_t g = 0; g < rows / kRows16; ++g) {
            k->rows16(m.data + static_cast<size_t>(g) * kRows16 * m.row_bytes, cols, act.data(), stride, n_tok,
                      got.data() + g * kRows16, static_cast<size_t>(rows));
        }
        EXPECT_TRUE(same_bits(want, got)) << n_tok << " tokens";
    }
}

TEST(Rows16, EveryEntryPointGivesThePlainMatrixsBits) {
    const int64_t cols = 512, rows = 96;
    const BothLayouts w(cols, rows, 3);
    const Matrix & plain = w.plain;
    const Matrix & m = w.grouped;
    for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int64_t n_tok : {1, 2, 3, 4, 5, 8, 9, 17, 40}) {
            const auto seed = 20 + static_cast<uint32_t>(n_tok);
            const auto x = test_data::random_floats(static_cast<size_t>(n_tok * cols), seed);
            std::vector<float> want(static_cast<size_t>(n_tok * rows)), got(want.size());
            matmul(plain, x.data(), n_tok, want.data(), &pool);
            matmul(m, x.data(), n_tok, got.data(), &pool);
            EXPECT_TRUE(same_bits(want, got)) << n_tok << " tokens, " << threads << " threads";
            // A group of products over slices of whole groups (as the experts' rows), cut wherever the group's
            // split falls: each output written once, with the plain matrix's bits.
            std::vector<float> want_g(static_cast<size_t>(n_tok * 32)), got_g(want_g.size());
            std::vector<float> want_h(static_cast<size_t>(n_tok * 64)), got_h(want_h.size());
            const MatmulTask plain_tasks[] = {{plain.row_slice(32, 32), x.data(), n_tok, want_g.data()},
                                              {plain.row_slice(0, 64), x.data(), n_tok, want_h.data()}};
            const MatmulTask tasks[] = {{m.row_slice(32, 32), x.data(), n_tok, got_g.data()},
                                        {m.row_slice(0, 64), x.data(), n_tok, got_h.data()}};
            matmul_group(plain_tasks, &pool);
            matmul_group(tasks, &pool);
            EXPECT_TRUE(same_bits(want_g, got_g)) << n_tok << " tokens, " << threads << " threads";
            EXPECT_TRUE(same_bits(want_h, got_h)) << n_tok << " tokens, " << threads << " threads";
        }
    }
    const auto x = test_data::random_floats(static_cast<size_t>(cols), 30);
    std::vector<float> a(static_cast<size_t>(cols)), b(a.size());
    for (int64_t r : {0, 17, 95}) {
        EXPECT_EQ(dot_row(plain, r, x.data()), dot_row(m, r, x.data())) << r;
        dequantize_matrix_row(plain, r, a.data());
        dequantize_matrix_row(m, r, b.data());
        EXPECT_TRUE(same_bits(a, b)) << r;
    }
    EXPECT_THROW(m.row_slice(8, 16), Error);
    EXPECT_NO_THROW(m.row_slice(16, 32));
}

// Every range of rows that matmul_rows may be handed (cuts at any tile of 4 rows) writes each group once.
TEST(Rows16, RangesCutInsideAGroupWriteEachOutputOnce) {
    const int64_t cols = 256, rows = 64;
    const BothLayouts w(cols, rows, 4);
    const Matrix & plain = w.plain;
    const Matrix & m = w.grouped;
    const auto x = test_data::random_floats(static_cast<size_t>(2 * cols), 40);
    std::vector<float> want(static_cast<size_t>(2 * rows));
    matmul(plain, x.data(), 2, want.data(), nullptr);
    for (int64_t cut = 0; cut <= rows; cut += 4) {
        std::vector<float> got(want.size(), -1.0f);
        const PreparedActivations layout = activation_layout(m, x.data());
        Scope scope(Workspace::scratch());
        PreparedActivations act = layout;
        take_activation_rows(act, 2, scope.arena());
        quantize_activation_rows(act, 0, 2);
        matmul_rows(m, x.data(), act, 2, got.data(), 0, cut);
        matmul_rows(m, x.data(), act, 2, got.data(), cut, rows);
        EXPECT_TRUE(same_bits(want, got)) << "cut at " << cut;
    }
}

}  // namespace
}  // namespace offgrid::ops
