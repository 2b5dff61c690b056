// The dispatch table: every kernel at every ISA level this CPU has against the Scalar entry of its type, the
// Scalar entry against dequantise + double dot, dot_tile bit for bit against vec_dot, and the activation
// quantisers of every level byte for byte against the Scalar one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu {
namespace {

using tensor::ElemType;

std::vector<float> random_floats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto & x : v) x = dist(rng);
    return v;
}

// Weight types with a Scalar entry that the tests can build from floats.
std::vector<ElemType> tested_types() {
    std::vector<ElemType> out;
    for (uint32_t id = 0; id < kTypeTableSize; ++id) {
        const auto t = tensor::type_traits(id);
        if (!t) continue;
        const auto type = static_cast<ElemType>(id);
        if (kernels_for(type, Isa::Scalar) != nullptr && tensor::can_quantize(type)) out.push_back(type);
    }
    return out;
}

// Row widths: whole blocks, and for plain types also widths with a partial SIMD vector at the end.
std::vector<int64_t> widths(ElemType type) {
    const int64_t b = tensor::traits(type).block_size;
    if (b == 1) return {1, 7, 16, 37, 64, 100, 1024};
    return {b, 2 * b, 3 * b, 7 * b, std::max<int64_t>(b, 1024 / b * b)};
}

struct Rows {
    std::vector<uint8_t> bytes;
    size_t stride = 0;
};

Rows encode_rows(ElemType type, const std::vector<float> & x, int64_t n, int count) {
    Rows r;
    r.stride = tensor::row_bytes(type, n) + 16;  // padded: strides need not equal the row size
    r.bytes.assign(r.stride * count, 0);
    for (int i = 0; i < count; ++i) tensor::quantize_row(type, x.data() + i * n, r.bytes.data() + i * r.stride, n);
    return r;
}

Rows activations(const TypeKernels & k, const std::vector<float> & x, int64_t n, int count) {
    Rows r;
    r.stride = act_row_bytes(k.act_type, n) + 8;
    r.bytes.assign(r.stride * count, 0);
    for (int i = 0; i < count; ++i) {
        if (k.act_type == ElemType::F32) {
            std::memcpy(r.bytes.data() + i * r.stride, x.data() + i * n, n * sizeof(float));
        } else {
            k.quantize_act(x.data() + i * n, r.bytes.data() + i * r.stride, n);
        }
    }
    return r;
}

TEST(Dispatch, LevelsAndNames) {
    const auto levels = available_isas();
    ASSERT_FALSE(levels.empty());
    EXPECT_EQ(levels.front(), Isa::Scalar);
    EXPECT_EQ(levels.back(), detected_isa());
    EXPECT_LE(static_cast<int>(active_isa()), static_cast<int>(detected_isa()));
    EXPECT_STREQ(isa_name(Isa::Scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
    EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
    for (ElemType t : {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::Q8_0}) {
        for (Isa isa : levels) EXPECT_NE(kernels_for(t, isa), nullptr) << isa_name(isa);
    }
    EXPECT_EQ(kernels_for(ElemType::I32, Isa::Scalar), nullptr);
}

TEST(Dispatch, ScalarEntriesMatchDequantisedDoubleDot) {
    for (ElemType type : tested_types()) {
        const TypeKernels & k = *kernels_for(type, Isa::Scalar);
        for (int64_t n : widths(type)) {
            const auto wf = random_floats(n, 1 + n);
            const auto xf = random_floats(n, 2 + n);
            const Rows w = encode_rows(type, wf, n, 1);
            const Rows a = activations(k, xf, n, 1);
            std::vector<float> wd(n), xd(n);
            tensor::dequantize_row(type, w.bytes.data(), wd.data(), n);
            if (k.act_type == ElemType::F32) {
                xd = xf;
            } else if (tensor::traits(k.act_type).can_dequantize) {
                tensor::dequantize_row(k.act_type, a.bytes.data(), xd.data(), n);
            } else {
                continue;  // no reference reader of this activation format yet
            }
            double exact = 0, magnitude = 0;
            for (int64_t i = 0; i < n; ++i) {
                exact += double(wd[i]) * xd[i];
                magnitude += std::fabs(double(wd[i]) * xd[i]);
            }
            const float got = k.vec_dot(w.bytes.data(), a.bytes.data(), n);
            EXPECT_NEAR(got, exact, 1e-5 * magnitude + 1e-30) << tensor::traits(type).name << " n=" << n;
        }
    }
}

TEST(Dispatch, EveryLevelMatchesScalarTwin) {
    for (ElemType type : tested_types()) {
        const TypeKernels & ref = *kernels_for(type, Isa::Scalar);
        for (Isa isa : available_isas()) {
            const TypeKernels & k = *kernels_for(type, isa);
            const std::string what = std::string(tensor::traits(type).name) + " " + isa_name(isa);
            ASSERT_EQ(k.act_type, ref.act_type) << what;
            for (int64_t n : widths(type)) {
                const auto wf = random_floats(n, 3 + n);
                const auto xf = random_floats(n, 4 + n);
                const Rows w = encode_rows(type, wf, n, 1);
                const Rows a_ref = activations(ref, xf, n, 1);
                const Rows a = activations(k, xf, n, 1);
                if (k.act_type != ElemType::F32) {
                    ASSERT_EQ(0, std::memcmp(a.bytes.data(), a_ref.bytes.data(), act_row_bytes(k.act_type, n)))
                        << what << ": activation quantisers differ, n=" << n;
                }
                std::vector<float> wd(n);
                tensor::dequantize_row(type, w.bytes.data(), wd.data(), n);
                double magnitude = 0;
                for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(double(wd[i]) * xf[i]);
                const float want = ref.vec_dot(w.bytes.data(), a_ref.bytes.data(), n);
                const float got = k.vec_dot(w.bytes.data(), a.bytes.data(), n);
                // Only the summation order differs: a few roundings of partial sums of |w x|.
                EXPECT_NEAR(got, want, 1e-5 * magnitude + 1e-30) << what << " n=" << n;
            }
        }
    }
}

TEST(Dispatch, TileIsBitIdenticalToVecDot) {
    for (ElemType type : tested_types()) {
        for (Isa isa : available_isas()) {
            const TypeKernels & k = *kernels_for(type, isa);
            if (k.dot_tile == nullptr) continue;
            const std::string what = std::string(tensor::traits(type).name) + " " + isa_name(isa);
            for (int64_t n : widths(type)) {
                const Rows w = encode_rows(type, random_floats(n * kTileMax, 5 + n), n, kTileMax);
                const Rows a = activations(k, random_floats(n * kTileMax, 6 + n), n, kTileMax);
                for (int nr = 1; nr <= kTileMax; ++nr) {
                    for (int nt = 1; nt <= kTileMax; ++nt) {
                        const size_t y_stride = kTileMax + 3;
                        std::vector<float> y(y_stride * kTileMax, -1.0f);
                        k.dot_tile(w.bytes.data(), w.stride, a.bytes.data(), a.stride, n, nr, nt, y.data(), y_stride);
                        for (int t = 0; t < kTileMax; ++t) {
                            for (size_t r = 0; r < y_stride; ++r) {
                                const float v = y[t * y_stride + r];
                                if (t < nt && r < static_cast<size_t>(nr)) {
                                    const float one = k.vec_dot(w.bytes.data() + r * w.stride,
                                                                a.bytes.data() + t * a.stride, n);
                                    ASSERT_EQ(std::memcmp(&v, &one, 4), 0)
                                        << what << " n=" << n << " tile " << nr << "x" << nt << " (" << r << "," << t << ")";
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

TEST(Dispatch, Q8_0ActivationQuantiser) {
    // Hand-checked block: max |x| = 127 gives d = 1, so the quants are x rounded to nearest even.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = -2.5f;  // tie: to even, -2
    x[2] = 3.5f;   // tie: to even, 4
    x[3] = -127.0f;
    x[4] = 0.49f;
    for (Isa isa : available_isas()) {
        const TypeKernels & k = *kernels_for(ElemType::Q8_0, isa);
        ASSERT_EQ(k.act_type, ElemType::Q8_0);
        std::vector<uint8_t> out(34);
        k.quantize_act(x.data(), out.data(), 32);
        uint16_t d;
        std::memcpy(&d, out.data(), 2);
        EXPECT_EQ(d, 0x3c00) << isa_name(isa);  // 1.0 in f16
        const auto * q = reinterpret_cast<const int8_t *>(out.data() + 2);
        EXPECT_EQ(q[0], 127);
        EXPECT_EQ(q[1], -2);
        EXPECT_EQ(q[2], 4);
        EXPECT_EQ(q[3], -127);
        EXPECT_EQ(q[4], 0);
        std::vector<float> zeros(64, 0.0f);
        std::vector<uint8_t> z(68, 0xff);
        k.quantize_act(zeros.data(), z.data(), 64);
        for (uint8_t byte : z) EXPECT_EQ(byte, 0);  // d = 0 and q = 0
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu
