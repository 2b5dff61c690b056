// The vector exp, sigmoid and silu (VecKernels::exp_f32, sigmoid_f32, silu_f32) give libm's bits at every ISA
// level: std::exp, ops::sigmoid and ops::silu are their scalar twins, compared bit for bit over a dense sweep of the float range, special
// values and every tail length. (The vector levels evaluate glibc's expf algorithm; on a libm with another
// expf this test is the one that says so.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/vec.h"
#include "ops/elementwise.h"

namespace offgrid::ops {
namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Every 127th bit pattern from 0 to 110, both signs (about 17 M values), then special values.
std::vector<float> sweep() {
    std::vector<float> xs;
    for (uint32_t u = 0; u <= bits(110.0f); u += 127) {
        xs.push_back(from_bits(u));
        xs.push_back(-from_bits(u));
    }
    const float inf = std::numeric_limits<float>::infinity();
    for (float v : {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 87.0f, -87.0f, 88.0f, 88.5f,
                    88.72283935546875f, 88.72284f, 89.0f, -103.9f, -104.0f, -150.0f, 1e-30f, -1e-30f, 0.5f, 1.0f}) {
        xs.push_back(v);
    }
    return xs;
}

bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

TEST(VecExp, EveryLevelGivesLibmBits) {
    const std::vector<float> xs = sweep();
    std::vector<const cpu::VecKernels *> swept;
    for (cpu::Isa isa : cpu::available_isas()) {
        const cpu::VecKernels & k = cpu::vec_kernels(isa);
        // A level that keeps a lower level's three functions gives that level's bits: swept once (the NEON levels
        // keep the Scalar ones, and the sweep is slow under an emulator).
        bool seen = false;
        for (const cpu::VecKernels * o : swept) {
            seen = seen || (o->exp_f32 == k.exp_f32 && o->sigmoid_f32 == k.sigmoid_f32 && o->silu_f32 == k.silu_f32);
        }
        if (seen) continue;
        swept.push_back(&k);
        std::vector<float> e(xs.size()), s(xs.size()), l(xs.size());
        k.exp_f32(xs.data(), e.data(), xs.size());
        k.sigmoid_f32(xs.data(), s.data(), xs.size());
        k.silu_f32(xs.data(), l.data(), xs.size());
        size_t bad_exp = 0, bad_sig = 0, bad_silu = 0;
        for (size_t i = 0; i < xs.size(); ++i) {
            if (!same(e[i], std::exp(xs[i])) && bad_exp++ < 5) {
                ADD_FAILURE() << cpu::isa_name(isa) << " exp(" << std::hexfloat << xs[i] << ") = " << e[i]
                              << ", libm " << std::exp(xs[i]);
            }
            if (!same(s[i], sigmoid(xs[i])) && bad_sig++ < 5) {
                ADD_FAILURE() << cpu::isa_name(isa) << " sigmoid(" << std::hexfloat << xs[i] << ") = " << s[i]
                              << ", scalar " << sigmoid(xs[i]);
            }
        }
        for (size_t i = 0; i < xs.size(); ++i) {
            if (!same(l[i], silu(xs[i])) && bad_silu++ < 5) {
                ADD_FAILURE() << cpu::isa_name(isa) << " silu(" << std::hexfloat << xs[i] << ") = " << l[i]
                              << ", scalar " << silu(xs[i]);
            }
        }
        EXPECT_EQ(bad_silu, 0u) << cpu::isa_name(isa);
        EXPECT_EQ(bad_exp, 0u) << cpu::isa_name(isa) << " of " << xs.size();
        EXPECT_EQ(bad_sig, 0u) << cpu::isa_name(isa) << " of " << xs.size();
    }
}

TEST(VecExp, TailsAndInPlace) {
    for (cpu::Isa isa : cpu::available_isas()) {
        const cpu::VecKernels & k = cpu::vec_kernels(isa);
        for (size_t n = 0; n <= 40; ++n) {
            std::vector<float> x(n), y(n + 1, 7.0f);
            for (size_t i = 0; i < n; ++i) x[i] = -20.0f + 1.37f * static_cast<float>(i);
            k.sigmoid_f32(x.data(), y.data(), n);
            for (size_t i = 0; i < n; ++i) EXPECT_TRUE(same(y[i], sigmoid(x[i]))) << cpu::isa_name(isa) << " n=" << n;
            EXPECT_EQ(y[n], 7.0f) << "wrote past the end";
            k.silu_f32(x.data(), y.data(), n);
            for (size_t i = 0; i < n; ++i) EXPECT_TRUE(same(y[i], silu(x[i]))) << cpu::isa_name(isa) << " n=" << n;
            EXPECT_EQ(y[n], 7.0f) << "wrote past the end";
            std::vector<float> z = x;
            k.exp_f32(z.data(), z.data(), n);  // in place
            for (size_t i = 0; i < n; ++i) EXPECT_TRUE(same(z[i], std::exp(x[i]))) << cpu::isa_name(isa);
        }
    }
}

TEST(VecElementwise, UnfusedProductsAndSumsHaveTheScalarBits) {
    const cpu::VecKernels & ref = cpu::vec_kernels(cpu::Isa::Scalar);
    for (cpu::Isa isa : cpu::available_isas()) {
        const cpu::VecKernels & k = cpu::vec_kernels(isa);
        for (size_t n : {0u, 1u, 15u, 16u, 17u, 100u, 256u}) {
            std::vector<float> x(n), g(n), y0(n);
            for (size_t i = 0; i < n; ++i) {  // values whose products and sums round (a fused form would differ)
                x[i] = 1.0f / static_cast<float>(3 + i);
                g[i] = 0.1f * static_cast<float>(i) - 2.7f;
                y0[i] = 1e3f / static_cast<float>(7 + i);
            }
            auto a1 = y0, a2 = y0;
            k.mul_f32(0.37f, x.data(), a1.data(), n);
            ref.mul_f32(0.37f, x.data(), a2.data(), n);
            EXPECT_EQ(a1, a2) << cpu::isa_name(isa) << " n=" << n;
            a1 = y0, a2 = y0;
            k.add_mul_f32(-1.3f, x.data(), a1.data(), n);
            ref.add_mul_f32(-1.3f, x.data(), a2.data(), n);
            EXPECT_EQ(a1, a2) << cpu::isa_name(isa) << " n=" << n;
            a1 = y0, a2 = y0;
            k.add_prod_f32(x.data(), g.data(), a1.data(), n);
            ref.add_prod_f32(x.data(), g.data(), a2.data(), n);
            EXPECT_EQ(a1, a2) << cpu::isa_name(isa) << " n=" << n;
            for (size_t i = 0; i < n; ++i) EXPECT_EQ(a2[i], y0[i] + x[i] * g[i]);
        }
    }
}

}  // namespace
}  // namespace offgrid::ops
