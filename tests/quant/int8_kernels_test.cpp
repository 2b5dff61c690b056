// Twin tests of the 8-bit-activation kernels (OFFGRID_QUANT_ACT=int8): for every type with a SIMD entry and every
// ISA level this CPU has, vec_dot is bit-identical to the Scalar twin (kernels_quant_scalar.cpp) and every
// dot_tile shape to vec_dot, on random blocks and on worst-case ones (largest scales and quants against
// activations all at +-127, where an int32 lane or the signed-weight correction would overflow first). The
// twin itself is checked against the dequantised weights and activations in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "tensor/half.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace {

using namespace offgrid;
using tensor::ElemType;
namespace cpu = ops::cpu;

// Q8_0's int8 variant has its own test (Dispatch.Q8_0Int8VariantMatchesItsTwin): bit-identical to its scalar twin
// at the x86 levels, within 1e-5 of it elsewhere; its prompt products are below.
const ElemType kTypes[] = {ElemType::Q4_K, ElemType::Q5_K, ElemType::Q6_K, ElemType::Q5_0};

int f16_offset(ElemType t) { return t == ElemType::Q6_K ? 208 : 0; }

// Whether a level has an 8-bit kernel of the type: its entry reads the twin's activation format. A level without one
// gives the type its default entry (TypesWithoutAnEightBitKernelTakeTheLevelsDefault, below); every x86 level has
// them for kTypes, the NEON levels have none.
bool eight_bit_at(ElemType t, cpu::Isa isa) {
    const bool has = cpu::int8_kernels_for(t, isa)->act_type == cpu::int8_kernels_for(t, cpu::Isa::Scalar)->act_type;
#if defined(__x86_64__) || defined(__i386__)
    EXPECT_TRUE(has) << tensor::traits(t).name << " has no 8-bit kernel at " << cpu::isa_name(isa);
#endif
    return has;
}

std::vector<uint8_t> random_rows(ElemType t, int64_t n, int rows, std::mt19937 & rng, bool worst) {
    const auto & tr = tensor::traits(t);
    std::vector<uint8_t> w(tensor::row_bytes(t, n) * rows);
    for (auto & b : w) b = worst ? 0xff : static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    for (size_t blk = 0; blk < w.size() / tr.block_bytes; ++blk) {
        uint8_t * b = w.data() + blk * tr.block_bytes;
        if (worst && t == ElemType::Q6_K) {  // scale -128 against quant 0 (value -32): the largest products
            std::memset(b, 0, 192);
            std::memset(b + 192, 0x80, 16);
        }
        const uint16_t h = tensor::f32_to_f16(scale(rng));
        std::memcpy(b + f16_offset(t), &h, 2);
        if (t == ElemType::Q4_K || t == ElemType::Q5_K) std::memcpy(b + 2, &h, 2);  // dmin
    }
    return w;
}

std::vector<uint8_t> random_q8_0_rows(int64_t n, int rows, std::mt19937 & rng, bool worst) {
    std::vector<uint8_t> w(tensor::row_bytes(ElemType::Q8_0, n) * rows);
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    for (size_t blk = 0; blk < w.size() / 34; ++blk) {
        uint8_t * b = w.data() + blk * 34;
        const uint16_t h = tensor::f32_to_f16(scale(rng));
        std::memcpy(b, &h, 2);
        for (int i = 0; i < 32; ++i) b[2 + i] = worst ? 0x81 : static_cast<uint8_t>(rng());  // -127
    }
    return w;
}

std::vector<float> random_acts(int64_t n, int n_tok, std::mt19937 & rng, bool worst) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n) * n_tok);
    // Worst case: every activation at +-127; even tokens all positive (the largest int16 sums of unsigned quants, as
    // q5_K's 31s), odd tokens of mixed signs.
    for (size_t i = 0; i < x.size(); ++i) {
        const bool even = (i / static_cast<size_t>(n)) % 2 == 0;
        x[i] = worst ? (even || i % 3 ? 2.5f : -2.5f) : g(rng) * (1.0f + 3.0f * (rng() % 17 == 0));
    }
    return x;
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

TEST(Int8Kernels, EveryLevelIsBitIdenticalToTheScalarTwin) {
    std::mt19937 rng(5);
    for (ElemType t : kTypes) {
        const cpu::TypeKernels & ref = *cpu::int8_kernels_for(t, cpu::Isa::Scalar);
        ASSERT_NE(ref.quantize_act, nullptr) << tensor::traits(t).name;
        // Widths whose last run of blocks is partial at every length (kernels that reduce runs of blocks
        // together: 8 blocks of 32, 4 super-blocks of 256), and whole numbers of runs; q5_0 past kGemmNarrowRow too
        // (its 4-row tiles fetch wide rows otherwise).
        const std::vector<int64_t> widths = t == ElemType::Q5_0
                                                ? std::vector<int64_t>{32, 96, 128, 160, 192, 224, 256, 320, 480, 1056, 2560}
                                                : std::vector<int64_t>{256, 512, 768, 1024, 2560};
        for (const int64_t n : widths)
        for (const bool worst : {false, true}) {
            const int rows = 4, n_tok = 4;
            const auto w = random_rows(t, n, rows, rng, worst);
            const auto x = random_acts(n, n_tok, rng, worst);
            const size_t w_stride = tensor::row_bytes(t, n);
            const size_t a_stride = cpu::act_row_bytes(ref.act_type, n);
            std::vector<uint8_t> a(a_stride * n_tok);
            for (int k = 0; k < n_tok; ++k) ref.quantize_act(x.data() + k * n, a.data() + k * a_stride, n);
            for (cpu::Isa isa : cpu::available_isas()) {
                if (!eight_bit_at(t, isa)) continue;
                const cpu::TypeKernels & kk = *cpu::int8_kernels_for(t, isa);
                std::vector<uint8_t> a2(a.size());
                for (int k = 0; k < n_tok; ++k) kk.quantize_act(x.data() + k * n, a2.data() + k * a_stride, n);
                EXPECT_EQ(a2, a) << "the quantiser's bytes differ at " << cpu::isa_name(isa);
                for (int r = 0; r < rows; ++r) {
                    for (int k = 0; k < n_tok; ++k) {
                        const float want = ref.vec_dot(w.data() + r * w_stride, a.data() + k * a_stride, n);
                        const float got = kk.vec_dot(w.data() + r * w_stride, a.data() + k * a_stride, n);
                        EXPECT_EQ(bits(got), bits(want)) << tensor::traits(t).name << " " << cpu::isa_name(isa)
                                                         << " worst=" << worst << " row " << r << " token " << k;
                    }
                }
                if (kk.dot_tile == nullptr) continue;
                for (int nr = 1; nr <= rows; ++nr) {
                    for (int nt = 1; nt <= std::min(n_tok, kk.tile_tokens); ++nt) {
                        std::vector<float> y(static_cast<size_t>(nt) * 8, -1.0f);
                        kk.dot_tile(w.data(), w_stride, a.data(), a_stride, n, nr, nt, y.data(), 8);
                        for (int r = 0; r < nr; ++r) {
                            for (int k = 0; k < nt; ++k) {
                                const float want = kk.vec_dot(w.data() + r * w_stride, a.data() + k * a_stride, n);
                                EXPECT_EQ(bits(y[k * 8 + r]), bits(want)) << tensor::traits(t).name << " "
                                    << cpu::isa_name(isa) << " tile " << nr << "x" << nt;
                            }
                        }
                    }
                }
            }
        }
    }
}

// q5_0's activations take the twin's q8_0 bytes at every level with an 8-bit kernel, ties included: with max|x| = 127 the scale is 1,
// so x = k + 0.5 is a tie, which the twin (ggml's reference, lround) rounds away from zero.
TEST(Int8Kernels, TheQ8_0ActivationQuantiserRoundsTiesAsTheTwin) {
    const cpu::TypeKernels & ref = *cpu::int8_kernels_for(ElemType::Q5_0, cpu::Isa::Scalar);
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 ? -1.0f : 1.0f) * (static_cast<float>(i % 7) + 0.5f);
    x[0] = 127.0f;
    x[40] = -127.0f;
    std::vector<uint8_t> want(cpu::act_row_bytes(ref.act_type, 64));
    ref.quantize_act(x.data(), want.data(), 64);
    EXPECT_EQ(static_cast<int8_t>(want[2 + 1]), -2) << "the twin rounds -1.5 away from zero";
    EXPECT_EQ(static_cast<int8_t>(want[2 + 2]), 3) << "and 2.5";
    for (cpu::Isa isa : cpu::available_isas()) {
        if (!eight_bit_at(ElemType::Q5_0, isa)) continue;
        const cpu::TypeKernels & kk = *cpu::int8_kernels_for(ElemType::Q5_0, isa);
        std::vector<uint8_t> got(want.size());
        kk.quantize_act(x.data(), got.data(), 64);
        EXPECT_EQ(got, want) << cpu::isa_name(isa);
    }
}

// The prompt products (TypeKernels::gemm: the tile unit's where the CPU has it, the AVX2 tokens-in-lanes ones) give
// every (row, token) the bits of vec_dot, for row and token counts that fill their 16 x 16 tiles (or 2-row x
// 8-token groups) or leave them partial, with the tokens packed afresh (key 0) or reused from the previous row
// range of the same product (the same key).
TEST(Int8Kernels, PromptProductsAreBitIdenticalToVecDot) {
    std::mt19937 rng(11);
    int checked = 0;
    for (ElemType t : {ElemType::Q4_K, ElemType::Q5_K, ElemType::Q6_K, ElemType::Q5_0, ElemType::Q8_0}) {
        for (cpu::Isa isa : cpu::available_isas()) {
            const cpu::TypeKernels & kk = *cpu::int8_kernels_for(t, isa);
            if (kk.gemm == nullptr) continue;
            for (const int variant : {0, 1, 2}) {  // random blocks at two widths, then worst-case blocks
                const bool worst = variant == 2;
                const bool k_quant = t != ElemType::Q5_0 && t != ElemType::Q8_0;
                // 32-element blocks: narrow rows (q5_0's tiles below 4 tokens) and a wide one.
                const int64_t n = variant == 0   ? (k_quant ? 256 : 32)
                                  : variant == 1 ? (k_quant ? 1024 : 1280)
                                                 : (k_quant ? 1024 : 320);
                const int rows = 35, n_tok = 40;
                const auto w = t == ElemType::Q8_0 ? random_q8_0_rows(n, rows, rng, worst) : random_rows(t, n, rows, rng, worst);
                const auto x = random_acts(n, n_tok, rng, worst);
                const size_t w_stride = tensor::row_bytes(t, n);
                const size_t a_stride = cpu::act_row_bytes(kk.act_type, n);
                std::vector<uint8_t> a(a_stride * n_tok);
                for (int k = 0; k < n_tok; ++k) kk.quantize_act(x.data() + k * n, a.data() + k * a_stride, n);
                uint64_t key = 1000 + 100 * checked;  // a key per (variant, token count)
                for (const int nt : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 40}) {
                    ++key;
                    for (const int nr : {1, 15, 16, 17, 35}) {
                        std::vector<float> y(static_cast<size_t>(nt) * rows, -1.0f);
                        // The rows in two ranges, as two threads' shares: the second reuses the packed tokens.
                        const int cut = nr / 2;
                        const uint64_t k2 = nr % 2 == 0 ? 0 : key;
                        kk.gemm(w.data(), w_stride, a.data(), a_stride, n, cut, nt, y.data(), rows, k2);
                        kk.gemm(w.data() + cut * w_stride, w_stride, a.data(), a_stride, n, nr - cut, nt, y.data() + cut,
                                rows, k2);
                        for (int r = 0; r < nr; ++r) {
                            for (int k = 0; k < nt; ++k) {
                                const float want = kk.vec_dot(w.data() + r * w_stride, a.data() + k * a_stride, n);
                                ASSERT_EQ(bits(y[k * rows + r]), bits(want))
                                    << tensor::traits(t).name << " " << cpu::isa_name(isa) << " worst=" << worst << " "
                                    << nr << " rows x " << nt << " tokens: row " << r << " token " << k;
                            }
                        }
                        for (int r = nr; r < rows; ++r) EXPECT_EQ(y[r], -1.0f) << "wrote past its rows";
                    }
                }
                ++checked;
            }
        }
    }
    if (checked == 0) GTEST_SKIP() << "no level of this CPU has an 8-bit prompt product";
}

// The twin computes the dot of the dequantised weights with the dequantised activations, up to f32 rounding.
TEST(Int8Kernels, TheTwinIsTheDotOfTheDequantisedRows) {
    std::mt19937 rng(9);
    for (ElemType t : kTypes) {
        const cpu::TypeKernels & ref = *cpu::int8_kernels_for(t, cpu::Isa::Scalar);
        const int64_t n = 512;
        const auto w = random_rows(t, n, 1, rng, false);
        const auto x = random_acts(n, 1, rng, false);
        std::vector<uint8_t> a(cpu::act_row_bytes(ref.act_type, n));
        ref.quantize_act(x.data(), a.data(), n);
        std::vector<float> wf(n), af(n);
        tensor::dequantize_row(t, w.data(), wf.data(), n);
        if (ref.act_type == ElemType::Q8_K) {
            for (int64_t b = 0; b < n / 256; ++b) {
                float d;
                std::memcpy(&d, a.data() + b * 292, 4);
                for (int j = 0; j < 256; ++j) af[b * 256 + j] = d * static_cast<int8_t>(a[b * 292 + 4 + j]);
            }
        } else {
            tensor::dequantize_row(ref.act_type, a.data(), af.data(), n);
        }
        double want = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
            want += static_cast<double>(wf[i]) * af[i];
            mag += std::fabs(static_cast<double>(wf[i]) * af[i]);
        }
        const float got = ref.vec_dot(w.data(), a.data(), n);
        EXPECT_NEAR(got, want, 1e-5 * mag + 1e-6) << tensor::traits(t).name;
    }
}

// A type with no 8-bit kernel at a level takes the level's default (int16) entry in the 8-bit tables, not the
// scalar twin (ten times slower: a Q3_K_M decode step went from 0.2 to 2.4 s with --act-quant int8): every SIMD
// level's entry is another kernel than the twin, with its own quantiser, and its dot is the weights' dot with the
// activations within their quantisation error.
TEST(Int8Kernels, TypesWithoutAnEightBitKernelTakeTheLevelsDefault) {
    std::mt19937 rng(13);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    struct Case {
        ElemType type;
        std::vector<int> f16;  // byte offsets of a block's f16 scales
    };
    int checked = 0;
    for (const Case & c : {Case{ElemType::Q2_K, {80, 82}}, Case{ElemType::Q3_K, {108}},
                           Case{ElemType::IQ4_XS, {0}}, Case{ElemType::Q4_0, {0}}, Case{ElemType::IQ4_NL, {0}},
                           Case{ElemType::Q4_1, {0, 2}}, Case{ElemType::Q5_1, {0, 2}}}) {
        const ElemType t = c.type;
        const auto & tr = tensor::traits(t);
        const cpu::TypeKernels & twin = *cpu::int8_kernels_for(t, cpu::Isa::Scalar);
        const int64_t n = 1024;
        std::vector<uint8_t> w(tensor::row_bytes(t, n));
        for (auto & b : w) b = static_cast<uint8_t>(rng());
        for (size_t blk = 0; blk < w.size() / tr.block_bytes; ++blk) {
            for (int off : c.f16) {
                const uint16_t h = tensor::f32_to_f16(scale(rng));
                std::memcpy(w.data() + blk * tr.block_bytes + off, &h, 2);
            }
        }
        std::vector<float> x(n), wd(n);
        for (auto & v : x) v = g(rng);
        tensor::dequantize_row(t, w.data(), wd.data(), n);
        double want = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
            want += static_cast<double>(wd[i]) * x[i];
            mag += std::fabs(static_cast<double>(wd[i]) * x[i]);
        }
        for (cpu::Isa isa : cpu::available_isas()) {
            if (isa == cpu::Isa::Scalar) continue;
            const cpu::TypeKernels & kk = *cpu::int8_kernels_for(t, isa);
            EXPECT_NE(kk.vec_dot, twin.vec_dot) << tr.name << " " << cpu::isa_name(isa) << " kept the twin";
            ASSERT_NE(kk.vec_dot, nullptr);
            std::vector<uint8_t> a(cpu::act_row_bytes(kk.act_type, n));
            const void * act = x.data();
            if (kk.quantize_act != nullptr) {
                kk.quantize_act(x.data(), a.data(), n);
                act = a.data();
            }
            // 8-bit activations are within about 1 % of a dot's magnitude; int16 and f32 ones far closer.
            EXPECT_NEAR(kk.vec_dot(w.data(), act, n), want, 1e-2 * mag) << tr.name << " " << cpu::isa_name(isa);
            ++checked;
        }
    }
    if (checked == 0) GTEST_SKIP() << "this CPU has only the scalar level";
}

}  // namespace
