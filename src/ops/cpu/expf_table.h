// The constants of glibc's expf algorithm that the vector levels evaluate lane by lane (vec_avx2.cpp,
// vec_avx512.cpp): x = (k + r) ln2 / 32 with k an integer and |r| <= 1/2, exp(x) = 2^(k/32) * p(r), the power
// from a table of 2^(i/32) (i = k mod 32, the exponent added to its bits), p a cubic; all in double, rounded once
// to float at the end. One copy, so the levels cannot drift apart. Everything has internal linkage: the files
// that include it are compiled for different ISA levels, and the linker must not merge their copies.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace offgrid::ops::cpu {
namespace {

constexpr double kExpInvLn2N = 0x1.71547652b82fep0 * 32;  // 32 / ln 2
constexpr double kExpShift = 0x1.8p52;                     // adding it leaves k in the low bits
constexpr double kExpC0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
constexpr double kExpC1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
constexpr double kExpC2 = 0x1.62e42ff0c52d6p-1 / 32;

// Entry i: the bits of 2^(i/32) minus i << 47 (adding k << 47 then gives 2^(k/32)).
struct ExpfTable {
    alignas(64) double t[32];
    ExpfTable() {
        for (int i = 0; i < 32; ++i) {
            const double v = std::exp2(i / 32.0);  // correctly rounded for these arguments
            uint64_t bits;
            std::memcpy(&bits, &v, 8);
            bits -= static_cast<uint64_t>(i) << 47;
            std::memcpy(&t[i], &bits, 8);
        }
    }
};

}  // namespace
}  // namespace offgrid::ops::cpu
