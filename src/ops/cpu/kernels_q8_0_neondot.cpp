// The int8 variant of Q8_0 (Q8_0 weights against Q8_0 activations) with the dot-product instructions (SDOT,
// compiled with +dotprod, reached only when the CPU announces them: Isa::NeonDot). Per block the exact integer
// dot (two SDOTs into 4 int32 lanes, then their sum: integers, so any grouping is exact), scaled by d_w * d_x
// and added block after block: the Scalar twin's bits (kernels_float_scalar.cpp). The activation quantiser is
// the base level's.
#include <arm_neon.h>

#include <cstring>

#include "ops/cpu/kernels_float.h"
#include "ops/half.h"

namespace offgrid::ops::cpu {

namespace {

constexpr int kQ8Block = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;

inline float q8_scale(const uint8_t * block) {
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    return half_to_float(bits);
}

float vec_dot_q8_0_dot(const void * w, const void * x, int64_t n) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * xb = static_cast<const uint8_t *>(x);
    float s = 0;
    for (int64_t b = 0; b < n / kQ8Block; ++b, wb += kQ8BlockBytes, xb += kQ8BlockBytes) {
        const auto * qw = reinterpret_cast<const int8_t *>(wb + 2);
        const auto * qx = reinterpret_cast<const int8_t *>(xb + 2);
        int32x4_t acc = vdotq_s32(vdupq_n_s32(0), vld1q_s8(qw), vld1q_s8(qx));
        acc = vdotq_s32(acc, vld1q_s8(qw + 16), vld1q_s8(qx + 16));
        s += (q8_scale(wb) * q8_scale(xb)) * static_cast<float>(vaddvq_s32(acc));
    }
    return s;
}

}  // namespace

void add_q8_0_int8_kernels_neondot(TypeKernels & k) {
    k.vec_dot = vec_dot_q8_0_dot;
    k.dot_tile = nullptr;  // the driver calls vec_dot
}

}  // namespace offgrid::ops::cpu
