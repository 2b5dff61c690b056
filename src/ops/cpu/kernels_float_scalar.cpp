// Scalar twins of the float and Q8_0 kernels, and the Q8_0 activation quantiser. Plain C++ with a fixed
// reduction order: for the float types eight partial sums over consecutive elements, combined pairwise, then
// the tail in index order; for Q8_0 one exact integer dot per block, blocks summed in order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/kernels_float.h"
#include "ops/half.h"

namespace offgrid::ops::cpu {

namespace {

using tensor::ElemType;

constexpr int kQ8Block = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;  // f16 scale, then 32 int8 quants

inline float q8_scale(const uint8_t * block) {
    uint16_t d_bits;
    std::memcpy(&d_bits, block, 2);
    return half_to_float(d_bits);
}

inline float combine8(const float * acc) {
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

template <typename Load>
inline float dot8(Load load, const float * x, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += load(i + j) * x[i + j];
    }
    float s = combine8(acc);
    for (; i < n; ++i) s += load(i) * x[i];
    return s;
}

float vec_dot_f32(const void * w, const void * x, int64_t n) {
    const auto * a = static_cast<const float *>(w);
    return dot8([a](int64_t i) { return a[i]; }, static_cast<const float *>(x), n);
}

float vec_dot_f16(const void * w, const void * x, int64_t n) {
    const auto * h = static_cast<const uint16_t *>(w);
    return dot8([h](int64_t i) { return half_to_float(h[i]); }, static_cast<const float *>(x), n);
}

float vec_dot_bf16(const void * w, const void * x, int64_t n) {
    const auto * h = static_cast<const uint16_t *>(w);
    return dot8([h](int64_t i) { return bf16_to_float(h[i]); }, static_cast<const float *>(x), n);
}

// Q8_0 weights against f32 activations: each weight is d * q (exactly dequantize_row's value), then the float
// order above.
float vec_dot_q8_0_f32(const void * w, const void * xv, int64_t n) {
    // dot8's order (eight partial sums over consecutive elements; n is whole blocks, so no tail), walked block
    // by block so the scale is read once per block.
    const auto * row = static_cast<const uint8_t *>(w);
    const auto * x = static_cast<const float *>(xv);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < n / kQ8Block; ++b) {
        const uint8_t * blk = row + b * kQ8BlockBytes;
        const float d = q8_scale(blk);
        const auto * q = reinterpret_cast<const int8_t *>(blk + 2);
        const float * xb = x + b * kQ8Block;
        for (int i = 0; i < kQ8Block; i += 8) {
            for (int j = 0; j < 8; ++j) acc[j] += (d * static_cast<float>(q[i + j])) * xb[i + j];
        }
    }
    return combine8(acc);
}

// Q8_0 weights against Q8_0 activations: an exact integer dot per block, scaled by d_w * d_x, blocks summed in
// order.
float vec_dot_q8_0(const void * w, const void * x, int64_t n) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * xb = static_cast<const uint8_t *>(x);
    float s = 0;
    for (int64_t b = 0; b < n / kQ8Block; ++b, wb += kQ8BlockBytes, xb += kQ8BlockBytes) {
        const auto * qw = reinterpret_cast<const int8_t *>(wb + 2);
        const auto * qx = reinterpret_cast<const int8_t *>(xb + 2);
        int32_t isum = 0;
        for (int i = 0; i < kQ8Block; ++i) isum += int32_t(qw[i]) * int32_t(qx[i]);
        s += (q8_scale(wb) * q8_scale(xb)) * static_cast<float>(isum);
    }
    return s;
}

}  // namespace

void add_float_kernels_scalar(TypeKernels * table) {
    table[static_cast<uint32_t>(ElemType::F32)].vec_dot = vec_dot_f32;
    table[static_cast<uint32_t>(ElemType::F16)].vec_dot = vec_dot_f16;
    table[static_cast<uint32_t>(ElemType::BF16)].vec_dot = vec_dot_bf16;
    table[static_cast<uint32_t>(ElemType::Q8_0)].vec_dot = vec_dot_q8_0_f32;
}

void add_q8_0_int8_kernels_scalar(TypeKernels & k) {
    k.act_type = ElemType::Q8_0;
    k.quantize_act = quantize_row_q8_0;
    k.vec_dot = vec_dot_q8_0;
    k.dot_tile = nullptr;
}

void quantize_row_q8_0(const float * x, void * dst, int64_t n) {
    auto * out = static_cast<uint8_t *>(dst);
    for (int64_t b = 0; b < n / kQ8Block; ++b, x += kQ8Block, out += kQ8BlockBytes) {
        float amax = 0;
        for (int i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const uint16_t d_bits = float_to_half(d);
        std::memcpy(out, &d_bits, 2);
        for (int i = 0; i < kQ8Block; ++i) {
            // Nearest, ties to even (the SIMD conversions round the same way); |x * id| <= 127.
            out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(x[i] * id)));
        }
    }
}

}  // namespace offgrid::ops::cpu
