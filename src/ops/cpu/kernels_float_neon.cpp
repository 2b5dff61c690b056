// NEON float and Q8_0 kernels (aarch64 only): the Scalar twin's order (kernels_float_scalar.cpp) in registers,
// so every result has the twin's bits. The twin's eight partial sums are two 4-lane accumulators (lanes 0..3 and
// 4..7 of each group of 8 consecutive elements), each product rounded before its addition (fmul, fadd: the tree
// is compiled without contraction on aarch64); then combine8 (pairwise adds: addp) and the tail in index order.
// Q8_0 against f32 activations: each weight widened to d * q (one rounding, as dequantize_row) in the same order.
// A tile computes each (row, token) with vec_dot's operations, sharing the activation loads between rows.
#include <arm_neon.h>

#include <cstring>

#include "ops/cpu/kernels_float.h"
#include "ops/half.h"

namespace offgrid::ops::cpu {

namespace {

using tensor::ElemType;

constexpr int kQ8Block = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;

// Loaders of 8 weights at element i as two 4-lane vectors, and of one weight (the tail).
struct LoadF32 {
    static float32x4x2_t eight(const void * w, int64_t i) {
        const float * p = static_cast<const float *>(w) + i;
        return {vld1q_f32(p), vld1q_f32(p + 4)};
    }
    static float one(const void * w, int64_t i) { return static_cast<const float *>(w)[i]; }
};
struct LoadF16 {
    static float32x4x2_t eight(const void * w, int64_t i) {
        const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(static_cast<const uint16_t *>(w) + i));
        return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};  // exact widening
    }
    static float one(const void * w, int64_t i) { return half_to_float(static_cast<const uint16_t *>(w)[i]); }
};
struct LoadBF16 {
    static float32x4x2_t eight(const void * w, int64_t i) {
        const uint16x8_t h = vld1q_u16(static_cast<const uint16_t *>(w) + i);
        return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)), vreinterpretq_f32_u32(vshll_high_n_u16(h, 16))};
    }
    static float one(const void * w, int64_t i) { return bf16_to_float(static_cast<const uint16_t *>(w)[i]); }
};

// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)), the twin's combine8.
inline float combine8(float32x4_t lo, float32x4_t hi) {
    const float32x4_t p = vpaddq_f32(lo, hi);  // a0+a1, a2+a3, a4+a5, a6+a7
    const float32x4_t q = vpaddq_f32(p, p);    // (a0+a1)+(a2+a3), (a4+a5)+(a6+a7), ...
    return vgetq_lane_f32(q, 0) + vgetq_lane_f32(q, 1);
}

// acc += w * x, the product rounded on its own.
inline void mul_add(float32x4_t & acc, float32x4_t w, float32x4_t x) { acc = vaddq_f32(acc, vmulq_f32(w, x)); }

// Rows r < NR of w against tokens t < NT of act: out[t * NR + r] = vec_dot(row r, token t).
template <typename L, int NR, int NT>
void dot_block(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * out) {
    float32x4_t lo[NR][NT], hi[NR][NT];
    for (int r = 0; r < NR; ++r)
        for (int t = 0; t < NT; ++t) lo[r][t] = hi[r][t] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t x0[NT], x1[NT];
        for (int t = 0; t < NT; ++t) {
            const float * x = reinterpret_cast<const float *>(act + t * act_stride) + i;
            x0[t] = vld1q_f32(x);
            x1[t] = vld1q_f32(x + 4);
        }
        for (int r = 0; r < NR; ++r) {
            const float32x4x2_t wv = L::eight(w + r * w_stride, i);
            for (int t = 0; t < NT; ++t) {
                mul_add(lo[r][t], wv.val[0], x0[t]);
                mul_add(hi[r][t], wv.val[1], x1[t]);
            }
        }
    }
    for (int r = 0; r < NR; ++r) {
        for (int t = 0; t < NT; ++t) {
            const float * x = reinterpret_cast<const float *>(act + t * act_stride);
            float s = combine8(lo[r][t], hi[r][t]);
            for (int64_t j = i; j < n; ++j) s += L::one(w + r * w_stride, j) * x[j];
            out[t * NR + r] = s;
        }
    }
}

template <typename L>
float vec_dot_float(const void * w, const void * x, int64_t n) {
    float out;
    dot_block<L, 1, 1>(static_cast<const uint8_t *>(w), 0, static_cast<const uint8_t *>(x), 0, n, &out);
    return out;
}

// Q8_0 weights, whole blocks: the 32 weights d * q of a block as 8 vectors.
template <int NR, int NT>
void dot_block_q8_0(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n,
                    float * out) {
    float32x4_t lo[NR][NT], hi[NR][NT];
    for (int r = 0; r < NR; ++r)
        for (int t = 0; t < NT; ++t) lo[r][t] = hi[r][t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQ8Block; ++b) {
        for (int r = 0; r < NR; ++r) {
            const uint8_t * blk = w + r * w_stride + b * kQ8BlockBytes;
            uint16_t d_bits;
            std::memcpy(&d_bits, blk, 2);
            const float d = half_to_float(d_bits);
            const int8x16_t q0 = vld1q_s8(reinterpret_cast<const int8_t *>(blk + 2));
            const int8x16_t q1 = vld1q_s8(reinterpret_cast<const int8_t *>(blk + 18));
            const int16x8_t h[4] = {vmovl_s8(vget_low_s8(q0)), vmovl_high_s8(q0), vmovl_s8(vget_low_s8(q1)),
                                    vmovl_high_s8(q1)};
            for (int k = 0; k < 4; ++k) {  // elements 8k..8k+7 of the block
                const float32x4_t w0 = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(h[k]))), d);
                const float32x4_t w1 = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(h[k])), d);
                for (int t = 0; t < NT; ++t) {
                    const float * x = reinterpret_cast<const float *>(act + t * act_stride) + b * kQ8Block + 8 * k;
                    mul_add(lo[r][t], w0, vld1q_f32(x));
                    mul_add(hi[r][t], w1, vld1q_f32(x + 4));
                }
            }
        }
    }
    for (int r = 0; r < NR; ++r)
        for (int t = 0; t < NT; ++t) out[t * NR + r] = combine8(lo[r][t], hi[r][t]);
}

float vec_dot_q8_0_f32(const void * w, const void * x, int64_t n) {
    float out;
    dot_block_q8_0<1, 1>(static_cast<const uint8_t *>(w), 0, static_cast<const uint8_t *>(x), 0, n, &out);
    return out;
}

// Full tiles of 4 rows as passes of 2 tokens (and 1); other shapes row by row. Bit-identical to vec_dot.
template <void (*Block4x2)(const uint8_t *, size_t, const uint8_t *, size_t, int64_t, float *),
          void (*Block4x1)(const uint8_t *, size_t, const uint8_t *, size_t, int64_t, float *),
          float (*Dot)(const void *, const void *, int64_t)>
void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows, int n_tok,
              float * y, size_t y_stride) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    if (n_rows == 4) {
        int t = 0;
        for (; t < n_tok; ) {
            float out[8];
            const int nt = n_tok - t >= 2 ? 2 : 1;
            (nt == 2 ? Block4x2 : Block4x1)(wb, w_stride, ab + t * act_stride, act_stride, n, out);
            for (int u = 0; u < nt; ++u)
                for (int r = 0; r < 4; ++r) y[(t + u) * y_stride + r] = out[u * 4 + r];
            t += nt;
        }
        return;
    }
    for (int t = 0; t < n_tok; ++t)
        for (int r = 0; r < n_rows; ++r) y[t * y_stride + r] = Dot(wb + r * w_stride, ab + t * act_stride, n);
}

template <typename L>
void set_float(TypeKernels * table, ElemType type) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.vec_dot = vec_dot_float<L>;
    k.dot_tile = dot_tile<dot_block<L, 4, 2>, dot_block<L, 4, 1>, vec_dot_float<L>>;
}

}  // namespace

void add_float_kernels_neon(TypeKernels * table) {
    set_float<LoadF32>(table, ElemType::F32);
    set_float<LoadF16>(table, ElemType::F16);
    set_float<LoadBF16>(table, ElemType::BF16);
    TypeKernels & q8 = table[static_cast<uint32_t>(ElemType::Q8_0)];
    q8.vec_dot = vec_dot_q8_0_f32;
    q8.dot_tile = dot_tile<dot_block_q8_0<4, 2>, dot_block_q8_0<4, 1>, vec_dot_q8_0_f32>;
}

}  // namespace offgrid::ops::cpu
