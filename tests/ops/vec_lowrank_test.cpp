// VecKernels::lowrank_interleaved_f32 (ops/cpu/vec.h): every ISA level gives the Scalar twin's bits, and the twin
// gives the bits of the plain k-major loops it replaces (mul_f32 for k = 0, then add_mul_f32 in k order), for
// several ranks, block starts and lengths that are not multiples of the group, without writing outside y.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/vec.h"
#include "ops/elementwise.h"
#include "random_data.h"

namespace offgrid::ops {
namespace {

constexpr size_t G = cpu::kLowrankGroup;

// Output o's weight k at plain[k * dim + o] (k-major, the layout the mixer used before) turned into the grouped
// layout; the padding of the last group is NaN, so a lane mix-up would show.
std::vector<float> interleave(const std::vector<float> & plain, size_t dim, size_t lr) {
    const size_t groups = (dim + G - 1) / G;
    std::vector<float> u(groups * lr * G, std::numeric_limits<float>::quiet_NaN());
    for (size_t o = 0; o < dim; ++o) {
        for (size_t k = 0; k < lr; ++k) u[(o / G) * lr * G + k * G + o % G] = plain[k * dim + o];
    }
    return u;
}

bool same_bits(const float * a, const float * b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

TEST(VecLowrank, EveryLevelGivesThePlainLoopsBits) {
    const cpu::VecKernels & ref = cpu::vec_kernels(cpu::Isa::Scalar);
    size_t fused_differs = 0, checked = 0;
    for (size_t lr : {1u, 3u, 8u}) {
        for (size_t dim : {4096u, 150u}) {
            const std::vector<float> plain = test_data::random_floats(lr * dim, 11 + static_cast<uint32_t>(lr));
            const std::vector<float> u = interleave(plain, dim, lr);
            const std::vector<float> l = test_data::random_floats(lr, 97 + static_cast<uint32_t>(dim));
            for (size_t o0 : {0u, 5u, 16u, 23u, 130u}) {
                for (size_t n : {1u, 7u, 11u, 16u, 20u, 33u, 128u, 256u, 1000u}) {
                    if (o0 + n > dim) continue;
                    // The mul_f32 / add_mul_f32 loops over the plain layout (scalar twins: no fused multiply-add).
                    std::vector<float> want(n);
                    ref.mul_f32(l[0], plain.data() + o0, want.data(), n);
                    for (size_t k = 1; k < lr; ++k) ref.add_mul_f32(l[k], plain.data() + k * dim + o0, want.data(), n);
                    for (size_t j = 0; j < n; ++j) {  // the inputs are ones where a fused form would round otherwise
                        float f = l[0] * plain[o0 + j];
                        for (size_t k = 1; k < lr; ++k) f = std::fma(l[k], plain[k * dim + o0 + j], f);
                        fused_differs += f != want[j];
                        ++checked;
                    }
                    for (cpu::Isa isa : cpu::available_isas()) {
                        const float guard = -12345.0f;
                        std::vector<float> y(n + 2, guard);
                        cpu::vec_kernels(isa).lowrank_interleaved_f32(u.data(), lr, l.data(), o0, n, y.data() + 1);
                        EXPECT_TRUE(same_bits(y.data() + 1, want.data(), n))
                            << cpu::isa_name(isa) << " lr=" << lr << " dim=" << dim << " o0=" << o0 << " n=" << n;
                        EXPECT_EQ(y[0], guard) << cpu::isa_name(isa) << " wrote before y";
                        EXPECT_EQ(y[n + 1], guard) << cpu::isa_name(isa) << " wrote past y[n - 1]";
                    }
                }
            }
        }
    }
    // The test can tell a fused kernel from the plain loops (rank 1 has no addition, so only ranks 3 and 8 count).
    EXPECT_GT(fused_differs, checked / 10) << fused_differs << " of " << checked;
}

TEST(VecLowrank, WrapperIsTheActiveLevel) {
    const size_t lr = 8, dim = 64;
    const std::vector<float> u = interleave(test_data::random_floats(lr * dim, 5), dim, lr);
    const std::vector<float> l = test_data::random_floats(lr, 6);
    std::vector<float> a(45), b(45);
    lowrank_interleaved_n(u.data(), lr, l.data(), 3, a.size(), a.data());
    cpu::vec_kernels().lowrank_interleaved_f32(u.data(), lr, l.data(), 3, b.size(), b.data());
    EXPECT_TRUE(same_bits(a.data(), b.data(), a.size()));
}

}  // namespace
}  // namespace offgrid::ops
