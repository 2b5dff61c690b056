// Twin tests of the quantised dot kernels (src/ops/cpu/kernels_quant*), for every type and every ISA level
// this CPU has, on random blocks (random quants, sane f16 scales) and random activations:
//  - every SIMD row dequantiser is bit-identical to tensor::dequantize_row;
//  - each level's vec_dot (dequantise + that level's F32 dot) agrees with the Scalar twin and with a
//    double-precision dot of the dequantised row; dot_tile is bit-identical to vec_dot for every tile shape;
//  - the 8-bit-activation kernels (OFFGRID_QUANT_ACT=int8, built here into a table of their own) equal the
//    dequantised weights dotted with the dequantised activation blocks, and their quantisers keep every
//    element within half a step and fill the side fields exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_quant_common.h"
#include "ops/matmul.h"
#include "tensor/blocks.h"
#include "tensor/types.h"

namespace {

using namespace offgrid;
using tensor::ElemType;
namespace cpu = ops::cpu;

const ElemType kTypes[] = {ElemType::Q4_0, ElemType::Q4_1, ElemType::Q5_0, ElemType::Q5_1, ElemType::Q2_K,
                           ElemType::Q3_K, ElemType::Q4_K, ElemType::Q5_K, ElemType::Q6_K, ElemType::IQ4_NL,
                           ElemType::IQ4_XS};

// Byte offsets of a block's f16 scale fields (the rest of the block is random quant bits).
std::vector<int> f16_fields(ElemType t) {
    switch (t) {
        case ElemType::Q4_0: case ElemType::Q5_0: case ElemType::IQ4_NL: case ElemType::IQ4_XS: return {0};
        case ElemType::Q4_1: case ElemType::Q5_1: case ElemType::Q4_K: case ElemType::Q5_K: return {0, 2};
        case ElemType::Q2_K: return {80, 82};
        case ElemType::Q3_K: return {108};
        case ElemType::Q6_K: return {208};
        default: return {};
    }
}

std::vector<uint8_t> random_rows(ElemType t, int64_t n, int rows, std::mt19937 & rng) {
    const auto & tr = tensor::traits(t);
    const size_t row_bytes = tensor::row_bytes(t, n);
    std::vector<uint8_t> w(row_bytes * rows);
    for (auto & b : w) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(0.002f, 0.05f);
    for (size_t blk = 0; blk < w.size() / tr.block_bytes; ++blk) {
        for (int off : f16_fields(t)) {
            float v = scale(rng);
            if (t == ElemType::Q4_1 || t == ElemType::Q5_1) v = off == 0 ? v : -8 * v;  // a minimum
            const uint16_t h = tensor::f32_to_f16(v);
            std::memcpy(w.data() + blk * tr.block_bytes + off, &h, 2);
        }
    }
    return w;
}

std::vector<float> random_acts(int64_t n, int n_tok, std::mt19937 & rng) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n) * n_tok);
    for (auto & v : x) v = g(rng) * (1.0f + 3.0f * (rng() % 17 == 0));  // some outliers
    return x;
}

std::vector<uint8_t> quantize_acts(const cpu::TypeKernels & k, const std::vector<float> & x, int64_t n, int n_tok) {
    const size_t stride = cpu::act_row_bytes(k.act_type, n);
    std::vector<uint8_t> a(stride * n_tok);
    if (k.act_type == ElemType::F32) {
        std::memcpy(a.data(), x.data(), a.size());
        return a;
    }
    for (int t = 0; t < n_tok; ++t) k.quantize_act(x.data() + t * n, a.data() + t * stride, n);
    return a;
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

}  // namespace

// The 8-bit-activation kernels, in a table of their own (the dispatch uses them only under OFFGRID_QUANT_ACT).
const cpu::TypeKernels & int8_kernels(ElemType t) {
    static const std::vector<cpu::TypeKernels> table = [] {
        std::vector<cpu::TypeKernels> v(cpu::kTypeTableSize);
        cpu::quant::add_integer_entries(v.data());
        return v;
    }();
    return table[static_cast<uint32_t>(t)];
}

TEST(QuantKernels, EveryTypeHasAnEntryAtEveryLevel) {
    for (ElemType t : kTypes) {
        const auto * k = cpu::kernels_for(t, cpu::Isa::Scalar);
        ASSERT_NE(k, nullptr) << tensor::traits(t).name;
        for (cpu::Isa isa : cpu::available_isas()) {
            const auto * kl = cpu::kernels_for(t, isa);
            ASSERT_NE(kl, nullptr);
            EXPECT_EQ(kl->act_type, k->act_type) << "activations must be the same bytes at every level";
            EXPECT_EQ(kl->quantize_act == nullptr, k->quantize_act == nullptr);  // same bytes: int16_kernels_test
        }
        const auto & k8 = int8_kernels(t);
        ASSERT_NE(k8.vec_dot, nullptr);
        EXPECT_NE(k8.act_type, ElemType::F32);
        EXPECT_NE(k8.quantize_act, nullptr);
    }
}

TEST(QuantKernels, SimdDequantisersBitIdenticalToReference) {
    std::mt19937 rng(99);
    size_t n_checked = 0;
    for (ElemType t : kTypes) {
        for (cpu::Isa isa : cpu::available_isas()) {
            const auto dq = cpu::quant::dequantizer(t, isa);
            if (dq == nullptr) continue;
            SCOPED_TRACE(std::string(tensor::traits(t).name) + " " + cpu::isa_name(isa));
            const int64_t n = 1024;
            const auto w = random_rows(t, n, 1, rng);
            std::vector<float> want(n), got(n, -1.0f);
            tensor::dequantize_row(t, w.data(), want.data(), n);
            dq(w.data(), got.data(), n);
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[i]), bits(want[i])) << "element " << i;
            ++n_checked;
        }
    }
    std::printf("[ twins ] %zu (type, level) SIMD dequantisers checked\n", n_checked);
}

TEST(QuantKernels, Int8KernelsMatchDequantisedDot) {
    std::mt19937 rng(42);
    for (ElemType t : kTypes) {
        SCOPED_TRACE(std::string(tensor::traits(t).name));
        const auto & k = int8_kernels(t);
        for (int64_t n : {256, 512, 1024}) {
            const auto w = random_rows(t, n, 1, rng);
            const auto x = random_acts(n, 1, rng);
            const auto a = quantize_acts(k, x, n, 1);
            std::vector<float> wf(n), af(n);
            double want = 0, mag = 0;
            if (k.act_type == ElemType::Q8_1) {
                // q8_1 carries its block sum as f16(d * sum): the min term uses that stored value, so the
                // reference is d_w q . a plus m * s per block (weights dequantised with the minimum zeroed).
                auto w0 = w;
                const size_t bb = tensor::traits(t).block_bytes;
                for (size_t b = 0; b < w0.size() / bb; ++b) std::memset(w0.data() + b * bb + 2, 0, 2);
                tensor::dequantize_row(t, w0.data(), wf.data(), n);
                for (int64_t b = 0; b < n / 32; ++b) {
                    uint16_t m, s;
                    std::memcpy(&m, w.data() + b * bb + 2, 2);
                    std::memcpy(&s, a.data() + b * sizeof(tensor::BlockQ8_1) + 2, 2);
                    want += static_cast<double>(tensor::f16_to_f32(m)) * tensor::f16_to_f32(s);
                    mag += std::fabs(static_cast<double>(tensor::f16_to_f32(m)) * tensor::f16_to_f32(s));
                }
            } else {
                tensor::dequantize_row(t, w.data(), wf.data(), n);
            }
            tensor::dequantize_row(k.act_type, a.data(), af.data(), n);
            for (int64_t i = 0; i < n; ++i) {
                want += static_cast<double>(wf[i]) * af[i];
                mag += std::fabs(static_cast<double>(wf[i]) * af[i]);
            }
            const float got = k.vec_dot(w.data(), a.data(), n);
            // Scales enter as f16 products in f32 and the sum is f32: a few ulps of the magnitude per block.
            EXPECT_NEAR(got, want, 2e-6 * mag + 1e-6) << "n " << n;
        }
    }
}

TEST(QuantKernels, EveryLevelAgreesWithScalarAndTilesAreBitIdentical) {
    std::mt19937 rng(7);
    for (ElemType t : kTypes) {
        SCOPED_TRACE(std::string(tensor::traits(t).name));
        // The exact entries (OFFGRID_QUANT_ACT=f32, and the driver's fallback): f32 activations.
        const auto & ks = *cpu::exact_kernels_for(t, cpu::Isa::Scalar);
        const int64_t n = 2048;
        const int rows = 6, n_tok = 5;
        const auto w = random_rows(t, n, rows, rng);
        const auto x = random_acts(n, n_tok, rng);
        const auto a = quantize_acts(ks, x, n, n_tok);
        const size_t wst = tensor::row_bytes(t, n), ast = cpu::act_row_bytes(ks.act_type, n);
        for (cpu::Isa isa : cpu::available_isas()) {
            SCOPED_TRACE(cpu::isa_name(isa));
            const auto & k = *cpu::exact_kernels_for(t, isa);
            ASSERT_EQ(k.act_type, ElemType::F32);
            for (int r = 0; r < rows; ++r) {
                for (int tok = 0; tok < n_tok; ++tok) {
                    // The levels' F32 dots sum in different orders: agreement to f32 rounding of the sum.
                    const float want = ks.vec_dot(w.data() + r * wst, a.data() + tok * ast, n);
                    std::vector<float> wf(n);
                    tensor::dequantize_row(t, w.data() + r * wst, wf.data(), n);
                    double exact = 0, mag = 0;
                    for (int64_t i = 0; i < n; ++i) {
                        exact += static_cast<double>(wf[i]) * x[tok * n + i];
                        mag += std::fabs(static_cast<double>(wf[i]) * x[tok * n + i]);
                    }
                    const float got = k.vec_dot(w.data() + r * wst, a.data() + tok * ast, n);
                    EXPECT_NEAR(got, want, 1e-6 * mag) << "row " << r << " token " << tok;
                    EXPECT_NEAR(got, exact, 1e-6 * mag) << "row " << r << " token " << tok;
                }
            }
            if (k.dot_tile == nullptr) continue;
            for (int nr = 1; nr <= cpu::kTileMax; ++nr) {
                for (int nt = 1; nt <= cpu::kTileMax; ++nt) {
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

TEST(QuantKernels, MatmulThroughTheTableMatchesReference) {
    // The driver path (tiles, the active level's kernels) against the scalar reference twin of matmul. With f32
    // activations both dequantise exactly and dot in f32, so they agree to f32 rounding of the sum; with the
    // int16 kernels the reference takes the activations the kernel sees (each token row quantised to Q16_K and
    // dequantised), so the same bound holds.
    std::mt19937 rng(3);
    for (ElemType t : kTypes) {
        SCOPED_TRACE(std::string(tensor::traits(t).name));
        const int64_t n = 512;
        const int rows = 9, n_tok = 3;
        const auto w = random_rows(t, n, rows, rng);
        auto x = random_acts(n, n_tok, rng);
        const ops::Matrix m = ops::make_matrix(t, w.data(), n, rows);
        std::vector<float> y(rows * n_tok), yref(rows * n_tok);
        ops::matmul(m, x.data(), n_tok, y.data());
        const auto * k = cpu::kernels_for(t, cpu::active_isa());
        ASSERT_NE(k, nullptr);
        if (k->act_type == ElemType::Q8_1) {
            // Only under OFFGRID_QUANT_ACT=int8 (q4_1, q5_1): q8_1 carries its block sums as f16, which the
            // dequantised activations do not reproduce, so no f32 reference applies; the kernel's accuracy is
            // Int8KernelsMatchDequantisedDot's. Here the driver must give each output the entry's own dot.
            std::vector<uint8_t> q(cpu::act_row_bytes(k->act_type, n));
            for (int tok = 0; tok < n_tok; ++tok) {
                k->quantize_act(x.data() + tok * n, q.data(), n);
                for (int r = 0; r < rows; ++r) {
                    ASSERT_EQ(bits(y[tok * rows + r]), bits(k->vec_dot(m.row(r), q.data(), n))) << "row " << r << " token " << tok;
                }
            }
            continue;
        }
        if (k->act_type != ElemType::F32) {
            std::vector<uint8_t> q(cpu::act_row_bytes(k->act_type, n));
            for (int tok = 0; tok < n_tok; ++tok) {
                k->quantize_act(x.data() + tok * n, q.data(), n);
                tensor::dequantize_row(k->act_type, q.data(), x.data() + tok * n, n);
            }
        }
        ops::matmul_ref(m, x.data(), n_tok, yref.data());
        for (int i = 0; i < rows * n_tok; ++i) {
            const int r = i % rows, tok = i / rows;
            std::vector<float> wf(n);
            tensor::dequantize_row(t, m.row(r), wf.data(), n);
            double mag = 0;
            for (int64_t j = 0; j < n; ++j) mag += std::fabs(wf[j] * x[tok * n + j]);
            EXPECT_NEAR(y[i], yref[i], 2e-6 * mag + 1e-7) << "row " << r << " token " << tok;
        }
    }
}

TEST(QuantKernels, ActivationQuantisers) {
    std::mt19937 rng(11);
    const int64_t n = 512;
    const auto x = random_acts(n, 1, rng);
    for (ElemType act : {ElemType::Q8_0, ElemType::Q8_1, ElemType::Q8_K}) {
        SCOPED_TRACE(std::string(tensor::traits(act).name));
        const cpu::TypeKernels * k = nullptr;
        for (ElemType t : kTypes) {
            if (int8_kernels(t).act_type == act) k = &int8_kernels(t);
        }
        if (k == nullptr) continue;  // no type reads this format
        std::vector<uint8_t> a(cpu::act_row_bytes(act, n));
        k->quantize_act(x.data(), a.data(), n);
        std::vector<float> back(n);
        tensor::dequantize_row(act, a.data(), back.data(), n);
        const int block = static_cast<int>(tensor::traits(act).block_size);
        for (int64_t b = 0; b < n / block; ++b) {
            float amax = 0;
            for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(x[b * block + j]));
            // Half a step of rounding; a scale stored as f16 (q8_0, q8_1) adds up to 127 x its rounding, 2^-11.
            const float step = amax / 127.0f;
            const float bound = 0.5f * step * 1.0001f + (act == ElemType::Q8_K ? 0.0f : 127.0f * step / 2048.0f);
            for (int j = 0; j < block; ++j) EXPECT_LE(std::fabs(back[b * block + j] - x[b * block + j]), bound + 1e-7f);
            if (act == ElemType::Q8_K) {
                const auto * q = reinterpret_cast<const tensor::BlockQ8_K *>(a.data()) + b;
                for (int g = 0; g < 16; ++g) {
                    int s = 0;
                    for (int j = 0; j < 16; ++j) s += q->qs[16 * g + j];
                    EXPECT_EQ(q->bsums[g], s);
                }
            }
            if (act == ElemType::Q8_1) {
                const auto * q = reinterpret_cast<const tensor::BlockQ8_1 *>(a.data()) + b;
                int s = 0;
                for (int j = 0; j < 32; ++j) s += q->qs[j];
                EXPECT_EQ(q->s, tensor::f32_to_f16(static_cast<float>(s) * (amax / 127.0f)));
            }
        }
    }
}
