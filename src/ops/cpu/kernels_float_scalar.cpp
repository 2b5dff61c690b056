// Scalar twins of the float and Q8_0 kernels. Plain C++ with a fixed reduction order: eight partial sums over
// consecutive elements, combined pairwise, then the tail in index order.
#include <cstring>

#include "ops/cpu/kernels_float.h"
#include "ops/half.h"

namespace offgrid::ops::cpu {

namespace {

using tensor::ElemType;

constexpr int kQ8Block = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;  // f16 scale, then 32 int8 quants

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

// Q8_0 weights against f32 activations: per block, eight partial sums of q * x, scaled by the block's d.
float vec_dot_q8_0_f32(const void * w, const void * xv, int64_t n) {
    const auto * row = static_cast<const uint8_t *>(w);
    const auto * x = static_cast<const float *>(xv);
    float s = 0;
    for (int64_t b = 0; b < n / kQ8Block; ++b) {
        const uint8_t * blk = row + b * kQ8BlockBytes;
        uint16_t d_bits;
        std::memcpy(&d_bits, blk, 2);
        const auto * q = reinterpret_cast<const int8_t *>(blk + 2);
        const float * xb = x + b * kQ8Block;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < kQ8Block; i += 8) {
            for (int j = 0; j < 8; ++j) acc[j] += static_cast<float>(q[i + j]) * xb[i + j];
        }
        s += half_to_float(d_bits) * combine8(acc);
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

}  // namespace offgrid::ops::cpu
