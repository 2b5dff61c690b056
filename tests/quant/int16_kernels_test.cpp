// Twin tests of the 16-bit-activation integer kernels (src/ops/cpu/kernels_quant_int16*), for every type they
// serve and every ISA level this CPU has:
//  - the Scalar twin equals the dequantised weights dotted with the dequantised Q16_K activations (in
//    double) to f32 rounding of the sum, also on worst-case blocks (largest scales and quants against
//    activations all at +-max|x|: the int32 lanes must not overflow);
//  - every level's vec_dot is bit-identical to the Scalar twin, and every dot_tile shape to vec_dot;
//  - the Q16_K quantiser keeps every element within half a step and fills the sums exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_quant_int16.h"
#include "ops/cpu/levels.h"
#include "tensor/blocks.h"
#include "tensor/half.h"
#include "tensor/types.h"

namespace {

using namespace offgrid;
using tensor::ElemType;
namespace cpu = ops::cpu;

const ElemType kInt16Types[] = {ElemType::Q4_K, ElemType::Q5_K, ElemType::Q6_K,  ElemType::Q3_K,  ElemType::Q2_K,
                                ElemType::IQ4_XS, ElemType::Q8_0, ElemType::Q4_0, ElemType::Q5_0, ElemType::IQ4_NL,
                                ElemType::Q4_1, ElemType::Q5_1};

std::vector<int> f16_fields(ElemType t) {
    switch (t) {
        case ElemType::Q4_0: case ElemType::Q5_0: case ElemType::IQ4_NL: case ElemType::IQ4_XS: case ElemType::Q8_0:
            return {0};
        case ElemType::Q4_K: case ElemType::Q5_K: case ElemType::Q4_1: case ElemType::Q5_1: return {0, 2};
        case ElemType::Q2_K: return {80, 82};
        case ElemType::Q3_K: return {108};
        case ElemType::Q6_K: return {208};
        default: return {};
    }
}

// Random quant bits with sane f16 scales; `worst` sets every quant and scale bit (largest magnitudes).
std::vector<uint8_t> random_rows(ElemType t, int64_t n, int rows, std::mt19937 & rng, bool worst = false) {
    const auto & tr = tensor::traits(t);
    std::vector<uint8_t> w(tensor::row_bytes(t, n) * rows);
    for (auto & b : w) b = worst ? 0xff : static_cast<uint8_t>(rng());
    if (worst && t == ElemType::Q6_K) {
        // q6_K's largest product: scale -128 against quant 0 (value -32).
        for (size_t blk = 0; blk < w.size() / tr.block_bytes; ++blk) {
            uint8_t * b = w.data() + blk * tr.block_bytes;
            std::memset(b, 0, 192);
            std::memset(b + 192, 0x80, 16);
        }
    }
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    for (size_t blk = 0; blk < w.size() / tr.block_bytes; ++blk) {
        for (int off : f16_fields(t)) {
            const uint16_t h = tensor::f32_to_f16(scale(rng));
            std::memcpy(w.data() + blk * tr.block_bytes + off, &h, 2);
        }
    }
    return w;
}

std::vector<float> random_acts(int64_t n, int n_tok, std::mt19937 & rng, bool worst = false) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n) * n_tok);
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = worst ? 2.5f : g(rng) * (1.0f + 3.0f * (rng() % 17 == 0));
    }
    return x;
}

std::vector<uint8_t> quantize(const std::vector<float> & x, int64_t n, int n_tok) {
    const size_t stride = cpu::act_row_bytes(ElemType::Q16_K, n);
    std::vector<uint8_t> a(stride * n_tok);
    for (int t = 0; t < n_tok; ++t) cpu::quant::quantize_row_q16_K(x.data() + t * n, a.data() + t * stride, n);
    return a;
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// The int16 entries of a level alone (whatever OFFGRID_QUANT_ACT says), built as the dispatch builds them from the
// list of levels: the base level's entries, then the level's own.
std::vector<cpu::TypeKernels> int16_table(cpu::Isa isa) {
    const cpu::LevelFills * lv = cpu::level_fills(isa);
    std::vector<cpu::TypeKernels> t =
        lv->isa == lv->base ? std::vector<cpu::TypeKernels>(cpu::kTypeTableSize) : int16_table(lv->base);
    if (lv->int16 != nullptr) lv->int16(t.data());
    return t;
}

TEST(Int16Kernels, EveryLevelHasTheEntry) {
    for (ElemType t : kInt16Types) {
        for (cpu::Isa isa : cpu::available_isas()) {
            const std::vector<cpu::TypeKernels> table = int16_table(isa);
            const auto & k = table[static_cast<uint32_t>(t)];
            ASSERT_NE(k.vec_dot, nullptr) << tensor::traits(t).name << " " << cpu::isa_name(isa);
            EXPECT_EQ(k.act_type, ElemType::Q16_K);
            ASSERT_NE(k.quantize_act, nullptr);
        }
    }
}

TEST(Int16Kernels, EveryLevelQuantisesToTheSameBytes) {
    std::mt19937 rng(21);
    const int64_t n = 1024;
    auto x = random_acts(n, 1, rng);
    for (int j = 256; j < 512; ++j) x[j] = 0.0f;                        // an all-zero block
    for (int j = 512; j < 768; ++j) x[j] = (j % 2 ? 1.0f : -1.0f) * 3.0f;  // every element at +-max
    for (int j = 768; j < 1024; ++j) x[j] = 1e-30f * (j - 900);           // tiny values
    for (int64_t n : {1024, 800}) {  // 800: a partial last block, zero-padded
    std::vector<uint8_t> want(cpu::act_row_bytes(ElemType::Q16_K, n));
    cpu::quant::quantize_row_q16_K(x.data(), want.data(), n);
    for (cpu::Isa isa : cpu::available_isas()) {
        const std::vector<cpu::TypeKernels> table = int16_table(isa);
        std::vector<uint8_t> got(want.size(), 0xaa);
        table[static_cast<uint32_t>(ElemType::Q4_K)].quantize_act(x.data(), got.data(), n);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size())) << cpu::isa_name(isa) << " n " << n;
    }
    }
    std::vector<uint8_t> a(cpu::act_row_bytes(ElemType::Q16_K, 800));
    cpu::quant::quantize_row_q16_K(x.data(), a.data(), 800);
    std::vector<float> back(800);
    tensor::dequantize_row(ElemType::Q16_K, a.data(), back.data(), 800);
    const auto * last = reinterpret_cast<const tensor::BlockQ16_K *>(a.data()) + 3;
    for (int j = 800 - 768; j < 256; ++j) EXPECT_EQ(last->qs[j], 0) << "padding " << j;
    for (int j = 768; j < 800; ++j) EXPECT_LE(std::fabs(back[j] - x[j]), 0.5f * last->d * 1.001f);
}

// The kernels of one level, built into a table of their own (the dispatch's table depends on OFFGRID_QUANT_ACT).
const cpu::TypeKernels & int16_kernels(ElemType t, cpu::Isa isa) {
    static const std::vector<std::vector<cpu::TypeKernels>> tables = [] {
        std::vector<std::vector<cpu::TypeKernels>> v(cpu::kIsaCount);
        for (cpu::Isa level : cpu::available_isas()) v[static_cast<int>(level)] = int16_table(level);
        return v;
    }();
    return tables[static_cast<int>(isa)][static_cast<uint32_t>(t)];
}

TEST(Int16Kernels, ScalarTwinEqualsDequantisedDot) {
    std::mt19937 rng(5);
    for (bool worst : {false, true}) {
        for (ElemType t : kInt16Types) {
            SCOPED_TRACE(std::string(tensor::traits(t).name) + (worst ? " worst case" : ""));
            const auto & k = int16_kernels(t, cpu::Isa::Scalar);
            for (int64_t n : {256, 512, 1024, 288}) {
                if (n % tensor::traits(t).block_size != 0) continue;
                const auto w = random_rows(t, n, 1, rng, worst);
                const auto x = random_acts(n, 1, rng, worst);
                const auto a = quantize(x, n, 1);
                std::vector<float> wf(n), af(n);
                tensor::dequantize_row(t, w.data(), wf.data(), n);
                tensor::dequantize_row(ElemType::Q16_K, a.data(), af.data(), n);
                double want = 0, mag = 0;
                for (int64_t i = 0; i < n; ++i) {
                    want += static_cast<double>(wf[i]) * af[i];
                    mag += std::fabs(static_cast<double>(wf[i]) * af[i]);
                }
                const float got = k.vec_dot(w.data(), a.data(), n);
                // The scales enter as f32 products and the lanes are summed in f32: a few ulps of the magnitude.
                EXPECT_NEAR(got, want, 2e-6 * mag + 1e-6) << "n " << n;
            }
        }
    }
}

TEST(Int16Kernels, EveryLevelBitIdenticalToScalarAndTilesToVecDot) {
    std::mt19937 rng(8);
    size_t checked = 0;
    for (bool worst : {false, true}) {
        for (ElemType t : kInt16Types) {
            SCOPED_TRACE(std::string(tensor::traits(t).name) + (worst ? " worst case" : ""));
            const auto & ks = int16_kernels(t, cpu::Isa::Scalar);
            // Blocks of 32: an odd count and a partial last Q16_K block (1312 = 5 x 256 + 32).
            const int64_t n = tensor::traits(t).block_size == 32 ? 1312 : 1536;
            const int rows = 6, n_tok = 9;
            const auto w = random_rows(t, n, rows, rng, worst);
            const auto x = random_acts(n, n_tok, rng, worst);
            const auto a = quantize(x, n, n_tok);
            const size_t wst = tensor::row_bytes(t, n), ast = cpu::act_row_bytes(ElemType::Q16_K, n);
            for (cpu::Isa isa : cpu::available_isas()) {
                SCOPED_TRACE(cpu::isa_name(isa));
                const auto & k = int16_kernels(t, isa);
                for (int r = 0; r < rows; ++r) {
                    for (int tok = 0; tok < n_tok; ++tok) {
                        const float want = ks.vec_dot(w.data() + r * wst, a.data() + tok * ast, n);
                        const float got = k.vec_dot(w.data() + r * wst, a.data() + tok * ast, n);
                        ASSERT_EQ(bits(got), bits(want)) << "row " << r << " token " << tok << ": " << got << " vs " << want;
                        ++checked;
                    }
                }
                ASSERT_LE(k.tile_tokens, cpu::kTileTokensMax);
                for (int nr = 1; nr <= cpu::kTileMax; ++nr) {
                    for (int nt = 1; nt <= k.tile_tokens; ++nt) {
                        std::vector<float> y(nt * 16, -1.0f);
                        k.dot_tile(w.data() + wst, wst, a.data() + ast, ast, n, nr, nt, y.data(), 16);
                        for (int tok = 0; tok < nt; ++tok) {
                            for (int r = 0; r < nr; ++r) {
                                const float want = k.vec_dot(w.data() + (1 + r) * wst, a.data() + (1 + tok) * ast, n);
                                ASSERT_EQ(bits(y[tok * 16 + r]), bits(want)) << nr << "x" << nt << " tile (" << r << ", " << tok << ")";
                            }
                        }
                    }
                }
            }
        }
    }
    std::printf("[ twins ] %zu int16 (type, level, row, token) dots bit-identical to the Scalar twin\n", checked);
}

TEST(Int16Kernels, Q16KQuantiser) {
    std::mt19937 rng(12);
    const int64_t n = 768;
    auto x = random_acts(n, 1, rng);
    for (int j = 256; j < 512; ++j) x[j] = 0.0f;  // an all-zero block
    const auto a = quantize(x, n, 1);
    std::vector<float> back(n);
    tensor::dequantize_row(ElemType::Q16_K, a.data(), back.data(), n);
    const auto * blk = reinterpret_cast<const tensor::BlockQ16_K *>(a.data());
    for (int64_t b = 0; b < n / 256; ++b) {
        float amax = 0;
        for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[b * 256 + j]));
        EXPECT_EQ(blk[b].d, amax / 16383.0f);
        for (int j = 0; j < 256; ++j) {
            EXPECT_LE(std::fabs(back[b * 256 + j] - x[b * 256 + j]), 0.5f * blk[b].d * 1.001f + 1e-12f);
            EXPECT_LE(std::abs(blk[b].qs[j]), 16383);
        }
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int j = 0; j < 16; ++j) s += blk[b].qs[16 * g + j];
            EXPECT_EQ(blk[b].dsum16[g], blk[b].d * static_cast<float>(s));
        }
        for (int g = 0; g < 8; ++g) {
            int s = 0;
            for (int j = 0; j < 32; ++j) s += blk[b].qs[32 * g + j];
            EXPECT_EQ(blk[b].dsum32[g], blk[b].d * static_cast<float>(s));
        }
    }
}

}  // namespace
