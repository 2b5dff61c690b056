// The NEON levels keep the Scalar twins' lane contracts bit for bit where they state so (ops/cpu/*_neon.cpp):
// the float types' dots and the Q8_0 f32 dot (the twin's eight partial sums), the element-wise vector updates,
// the int8 Q8_0 block dot with the dot-product instructions. (The int16 kernels and the attention scores are
// checked bit for bit at every level by their own tests; the other NEON entries are checked against the twin
// within the usual bounds.) Skips on a CPU without a NEON level (any x86 build).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/vec.h"
#include "ops/half.h"
#include "random_data.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu {
namespace {

using tensor::ElemType;

std::vector<Isa> neon_levels() {
    std::vector<Isa> out;
    for (Isa isa : available_isas()) {
        if (isa == Isa::Neon || isa == Isa::NeonDot) out.push_back(isa);
    }
    return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(NeonTwins, FloatDotsHaveTheScalarTwinsBits) {
    if (neon_levels().empty()) GTEST_SKIP() << "no NEON level on this CPU";
    size_t checked = 0;
    for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::Q8_0}) {
        const TypeKernels & twin = *exact_kernels_for(type, Isa::Scalar);
        const int64_t block = tensor::traits(type).block_size;
        for (int64_t n : {1, 7, 8, 9, 16, 31, 100, 333, 1024, 4096}) {
            const int64_t width = (n + block - 1) / block * block;
            const auto wf = test_data::random_floats(width * 4, 31 + static_cast<uint32_t>(n));
            const auto x = test_data::random_floats(width * 4, 32 + static_cast<uint32_t>(n));
            const size_t stride = tensor::row_bytes(type, width);
            std::vector<uint8_t> w(stride * 4);
            for (int r = 0; r < 4; ++r) tensor::quantize_row(type, wf.data() + r * width, w.data() + r * stride, width);
            for (Isa isa : neon_levels()) {
                const TypeKernels & k = *exact_kernels_for(type, isa);
                const std::string what = std::string(tensor::traits(type).name) + " " + isa_name(isa);
                for (int r = 0; r < 4; ++r) {
                    const float want = twin.vec_dot(w.data() + r * stride, x.data(), width);
                    const float got = k.vec_dot(w.data() + r * stride, x.data(), width);
                    EXPECT_TRUE(same_bits(got, want)) << what << " n=" << width << ": " << got << " vs " << want;
                    ++checked;
                }
                if (k.dot_tile == nullptr) continue;
                float y[4 * 4];
                k.dot_tile(w.data(), stride, x.data(), width * sizeof(float), width, 4, 4, y, 4);
                for (int t = 0; t < 4; ++t) {
                    for (int r = 0; r < 4; ++r) {
                        const float want = twin.vec_dot(w.data() + r * stride, x.data() + t * width, width);
                        EXPECT_TRUE(same_bits(y[t * 4 + r], want)) << what << " tile (" << r << ", " << t << ")";
                    }
                }
            }
        }
    }
    EXPECT_GT(checked, 0u);
}

TEST(NeonTwins, ElementwiseVectorUpdatesHaveTheScalarTwinsBits) {
    if (neon_levels().empty()) GTEST_SKIP() << "no NEON level on this CPU";
    const VecKernels & twin = vec_kernels(Isa::Scalar);
    for (size_t n : {1u, 3u, 4u, 5u, 17u, 64u, 100u}) {
        const auto x = test_data::random_floats(n, 41 + static_cast<uint32_t>(n));
        const auto g = test_data::random_floats(n, 42 + static_cast<uint32_t>(n));
        const auto y0 = test_data::random_floats(n, 43 + static_cast<uint32_t>(n));
        std::vector<uint16_t> xh(n);
        for (size_t i = 0; i < n; ++i) xh[i] = float_to_half(x[i]);
        for (Isa isa : neon_levels()) {
            const VecKernels & k = vec_kernels(isa);
            auto check = [&](const char * what, auto && op) {
                std::vector<float> want = y0, got = y0;
                op(twin, want.data());
                op(k, got.data());
                EXPECT_EQ(0, std::memcmp(want.data(), got.data(), n * sizeof(float))) << what << " " << isa_name(isa)
                                                                                      << " n=" << n;
            };
            check("axpy_f32", [&](const VecKernels & v, float * y) { v.axpy_f32(0.37f, x.data(), y, n); });
            check("axpy_f16", [&](const VecKernels & v, float * y) { v.axpy_f16(-1.3f, xh.data(), y, n); });
            check("scale", [&](const VecKernels & v, float * y) { v.scale(0.77f, y, n); });
            check("mul_f32", [&](const VecKernels & v, float * y) { v.mul_f32(2.1f, x.data(), y, n); });
            check("add_mul_f32", [&](const VecKernels & v, float * y) { v.add_mul_f32(-0.4f, x.data(), y, n); });
            check("add_prod_f32", [&](const VecKernels & v, float * y) { v.add_prod_f32(x.data(), g.data(), y, n); });
        }
    }
}

TEST(NeonTwins, Int8Q8_0BlockDotHasTheScalarTwinsBits) {
    if (neon_levels().empty()) GTEST_SKIP() << "no NEON level on this CPU";
    const TypeKernels & twin = *q8_0_int8_kernels(Isa::Scalar);
    for (int64_t n : {32, 64, 320, 4096}) {
        const auto wf = test_data::random_floats(n, 51 + static_cast<uint32_t>(n));
        const auto xf = test_data::random_floats(n, 52 + static_cast<uint32_t>(n));
        std::vector<uint8_t> w(tensor::row_bytes(ElemType::Q8_0, n)), a(w.size());
        tensor::quantize_row(ElemType::Q8_0, wf.data(), w.data(), n);
        twin.quantize_act(xf.data(), a.data(), n);
        const float want = twin.vec_dot(w.data(), a.data(), n);
        for (Isa isa : neon_levels()) {
            const TypeKernels & k = *q8_0_int8_kernels(isa);
            std::vector<uint8_t> a2(a.size());
            k.quantize_act(xf.data(), a2.data(), n);
            ASSERT_EQ(a, a2) << isa_name(isa);
            EXPECT_TRUE(same_bits(k.vec_dot(w.data(), a.data(), n), want)) << isa_name(isa) << " n=" << n;
        }
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu
