// NEON int16 kernels (aarch64 only). Each group of 32 weights is decoded to 32 signed bytes (the scalar twin's
// values), widened to int16 and multiplied by its per-16 scale; a widening multiply (smull) of 4 weights by 4
// Q16_K quants and a pairwise add (addp) of two such products give the sums of element pairs 2l, 2l + 1: the
// elements 0..7 of a 16-half fill the contract's lanes 0..3 and the elements 8..15 its lanes 4..7
// (kernels_quant_int16.h). The integer lanes are exact, and the float part is the contract's fused multiply-adds
// (fmla / fmls) and reduce8, so the bits equal the Scalar twin's at every tile. A tile decodes each weight block
// once for all its tokens. The activation quantiser is the Scalar twin's (the same bytes by definition).
#include <arm_neon.h>

#include <cstring>

#include "ops/cpu/kernels_quant_common.h"
#include "ops/cpu/kernels_quant_int16.h"

namespace offgrid::ops::cpu::quant {

namespace {

using namespace tensor;

enum class Mins { None, Per32, Per16 };

// A weight super-block decoded: 8 groups of 32 signed values (lo = elements 0..15, hi = 16..31), the per-16
// scales, and the min multipliers (q4_K / q5_K: 8, one per 32; q2_K: 16, one per 16).
struct KDecoded {
    int8x16_t lo[8], hi[8];
    int16_t sc[16];
    float mins[16];
    float d, dmin;
};

inline int8x16_t s8(uint8x16_t v) { return vreinterpretq_s8_u8(v); }

// q4_K / q5_K scales and mins (tensor::k4_scale_min), the scale of each 16-half.
inline void k4_scales(const uint8_t * packed, KDecoded & k) {
    uint8_t sc[8], mn[8];
    k4_scales_mins(packed, sc, mn);
    for (int j = 0; j < 16; ++j) k.sc[j] = sc[j / 2];
    for (int j = 0; j < 8; ++j) k.mins[j] = static_cast<float>(mn[j]);
}

struct NQ4K {
    using Block = BlockQ4_K;
    static constexpr Mins kMins = Mins::Per32;
    static void decode(const Block & b, KDecoded & k) {
        k4_scales(b.scales, k);
        const uint8x16_t m4 = vdupq_n_u8(0x0f);
        for (int c = 0; c < 4; ++c) {  // per 64: 32 bytes, low nibbles the first group, high the second
            const uint8x16_t q0 = vld1q_u8(b.qs + 32 * c), q1 = vld1q_u8(b.qs + 32 * c + 16);
            k.lo[2 * c] = s8(vandq_u8(q0, m4));
            k.hi[2 * c] = s8(vandq_u8(q1, m4));
            k.lo[2 * c + 1] = s8(vshrq_n_u8(q0, 4));
            k.hi[2 * c + 1] = s8(vshrq_n_u8(q1, 4));
        }
        k.d = f16_to_f32(b.d);
        k.dmin = f16_to_f32(b.dmin);
    }
};

struct NQ5K {
    using Block = BlockQ5_K;
    static constexpr Mins kMins = Mins::Per32;
    static void decode(const Block & b, KDecoded & k) {
        k4_scales(b.scales, k);
        const uint8x16_t m4 = vdupq_n_u8(0x0f), one = vdupq_n_u8(1);
        const uint8x16_t h0 = vld1q_u8(b.qh), h1 = vld1q_u8(b.qh + 16);
        for (int g = 0; g < 8; ++g) {  // group g's fifth bit is bit g of qh[l]
            const int8x16_t shift = vdupq_n_s8(static_cast<int8_t>(-g));
            const uint8x16_t f0 = vshlq_n_u8(vandq_u8(vshlq_u8(h0, shift), one), 4);
            const uint8x16_t f1 = vshlq_n_u8(vandq_u8(vshlq_u8(h1, shift), one), 4);
            const uint8x16_t q0 = vld1q_u8(b.qs + 32 * (g / 2)), q1 = vld1q_u8(b.qs + 32 * (g / 2) + 16);
            const uint8x16_t n0 = g % 2 == 0 ? vandq_u8(q0, m4) : vshrq_n_u8(q0, 4);
            const uint8x16_t n1 = g % 2 == 0 ? vandq_u8(q1, m4) : vshrq_n_u8(q1, 4);
            k.lo[g] = s8(vorrq_u8(n0, f0));
            k.hi[g] = s8(vorrq_u8(n1, f1));
        }
        k.d = f16_to_f32(b.d);
        k.dmin = f16_to_f32(b.dmin);
    }
};

struct NQ6K {
    using Block = BlockQ6_K;
    static constexpr Mins kMins = Mins::None;
    static void decode(const Block & b, KDecoded & k) {
        for (int j = 0; j < 16; ++j) k.sc[j] = b.scales[j];
        const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(3);
        const int8x16_t b32 = vdupq_n_s8(32);
        for (int h = 0; h < 2; ++h) {
            for (int part = 0; part < 2; ++part) {  // elements l = 16 part .. 16 part + 15 of each 32-group
                const uint8x16_t a = vld1q_u8(b.ql + 64 * h + 16 * part);       // groups 0 (low) and 2 (high)
                const uint8x16_t c = vld1q_u8(b.ql + 64 * h + 32 + 16 * part);  // groups 1 and 3
                const uint8x16_t hb = vld1q_u8(b.qh + 32 * h + 16 * part);
                const uint8x16_t low[4] = {vandq_u8(a, m4), vandq_u8(c, m4), vshrq_n_u8(a, 4), vshrq_n_u8(c, 4)};
                const uint8x16_t high[4] = {vandq_u8(hb, m3), vandq_u8(vshrq_n_u8(hb, 2), m3),
                                            vandq_u8(vshrq_n_u8(hb, 4), m3), vshrq_n_u8(hb, 6)};
                for (int g = 0; g < 4; ++g) {
                    const int8x16_t v = vsubq_s8(s8(vorrq_u8(low[g], vshlq_n_u8(high[g], 4))), b32);
                    if (part == 0) {
                        k.lo[4 * h + g] = v;
                    } else {
                        k.hi[4 * h + g] = v;
                    }
                }
            }
        }
        k.d = f16_to_f32(b.d);
        k.dmin = 0;
    }
};

// Element i of the 2-bit planes of q2_K / q3_K: per 128, byte l of 32, bits 2g (g = 32-group), as 4 groups.
inline void two_bit_groups(const uint8_t * qs, KDecoded & k) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (int h = 0; h < 2; ++h) {
        const uint8x16_t q0 = vld1q_u8(qs + 32 * h), q1 = vld1q_u8(qs + 32 * h + 16);
        for (int g = 0; g < 4; ++g) {
            const int8x16_t shift = vdupq_n_s8(static_cast<int8_t>(-2 * g));
            k.lo[4 * h + g] = s8(vandq_u8(vshlq_u8(q0, shift), m3));
            k.hi[4 * h + g] = s8(vandq_u8(vshlq_u8(q1, shift), m3));
        }
    }
}

struct NQ2K {
    using Block = BlockQ2_K;
    static constexpr Mins kMins = Mins::Per16;
    static void decode(const Block & b, KDecoded & k) {
        for (int j = 0; j < 16; ++j) {
            k.sc[j] = b.scales[j] & 0x0f;
            k.mins[j] = static_cast<float>(b.scales[j] >> 4);
        }
        two_bit_groups(b.qs, k);
        k.d = f16_to_f32(b.d);
        k.dmin = f16_to_f32(b.dmin);
    }
};

struct NQ3K {
    using Block = BlockQ3_K;
    static constexpr Mins kMins = Mins::None;
    static void decode(const Block & b, KDecoded & k) {
        int8_t s[16];
        unpack_q3_k_scales(b.scales, s);
        for (int j = 0; j < 16; ++j) k.sc[j] = s[j];
        two_bit_groups(b.qs, k);
        // The third bit of element i: bit 4 half + g of hmask[l]; a clear bit subtracts 4.
        const uint8x16_t h0 = vld1q_u8(b.hmask), h1 = vld1q_u8(b.hmask + 16), one = vdupq_n_u8(1);
        const int8x16_t b4 = vdupq_n_s8(4);
        for (int g = 0; g < 8; ++g) {
            const int8x16_t shift = vdupq_n_s8(static_cast<int8_t>(-g));
            const uint8x16_t t0 = vshlq_n_u8(vandq_u8(vshlq_u8(h0, shift), one), 2);
            const uint8x16_t t1 = vshlq_n_u8(vandq_u8(vshlq_u8(h1, shift), one), 2);
            k.lo[g] = vsubq_s8(vaddq_s8(k.lo[g], s8(t0)), b4);
            k.hi[g] = vsubq_s8(vaddq_s8(k.hi[g], s8(t1)), b4);
        }
        k.d = f16_to_f32(b.d);
        k.dmin = 0;
    }
};

// The 16 non-linear values of iq4_nl / iq4_xs looked up by nibble (tbl).
inline void iq4_values(const uint8_t * qs, int8x16_t & lo, int8x16_t & hi) {
    const int8x16_t table = vld1q_s8(kIq4nlValues);
    const uint8x16_t q = vld1q_u8(qs);
    lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0f)));
    hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
}

struct NIQ4XS {
    using Block = BlockIQ4_XS;
    static constexpr Mins kMins = Mins::None;
    static void decode(const Block & b, KDecoded & k) {
        for (int j = 0; j < 16; ++j) k.sc[j] = static_cast<int16_t>(iq4_xs_scale(b, j / 2));
        for (int g = 0; g < 8; ++g) iq4_values(b.qs + 16 * g, k.lo[g], k.hi[g]);
        k.d = f16_to_f32(b.d);
        k.dmin = 0;
    }
};

// Blocks of 32: the block's 32 signed values (lo = elements 0..15, hi = 16..31).
struct NIQ4NL {
    using Block = BlockIQ4_NL;
    static void values(const Block & b, int8x16_t & lo, int8x16_t & hi) { iq4_values(b.qs, lo, hi); }
};
struct NQ80 {
    using Block = BlockQ8_0;
    static void values(const Block & b, int8x16_t & lo, int8x16_t & hi) {
        lo = vld1q_s8(b.qs);
        hi = vld1q_s8(b.qs + 16);
    }
};
struct NQ40 {
    using Block = BlockQ4_0;
    static void values(const Block & b, int8x16_t & lo, int8x16_t & hi) {
        const uint8x16_t q = vld1q_u8(b.qs);
        const int8x16_t b8 = vdupq_n_s8(8);
        lo = vsubq_s8(s8(vandq_u8(q, vdupq_n_u8(0x0f))), b8);
        hi = vsubq_s8(s8(vshrq_n_u8(q, 4)), b8);
    }
};
struct NQ50 {
    using Block = BlockQ5_0;
    static void values(const Block & b, int8x16_t & lo, int8x16_t & hi) {
        const uint8x16_t q = vld1q_u8(b.qs);
        uint32_t h;
        std::memcpy(&h, b.qh, 4);
        // Element j's fifth bit is bit j of h: byte j / 8 of h spread over 8 lanes, tested against 1 << (j % 8).
        static const uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t bits = vld1q_u8(kBit), b16 = vdupq_n_u8(16);
        const uint8x16_t hb_lo = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(h)), vdup_n_u8(static_cast<uint8_t>(h >> 8)));
        const uint8x16_t hb_hi = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(h >> 16)), vdup_n_u8(static_cast<uint8_t>(h >> 24)));
        const uint8x16_t f_lo = vandq_u8(vtstq_u8(hb_lo, bits), b16), f_hi = vandq_u8(vtstq_u8(hb_hi, bits), b16);
        lo = vsubq_s8(s8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), f_lo)), s8(b16));
        hi = vsubq_s8(s8(vorrq_u8(vshrq_n_u8(q, 4), f_hi)), s8(b16));
    }
};

// Lanes 0..3 and 4..7 of the contract for 16 weights w (int16, already scaled) against 16 quants a.
inline void half_lanes(int16x8_t w0, int16x8_t w1, const int16_t * a, int32x4_t & lo, int32x4_t & hi) {
    const int16x8_t a0 = vld1q_s16(a), a1 = vld1q_s16(a + 8);
    lo = vaddq_s32(lo, vpaddq_s32(vmull_s16(vget_low_s16(w0), vget_low_s16(a0)), vmull_high_s16(w0, a0)));
    hi = vaddq_s32(hi, vpaddq_s32(vmull_s16(vget_low_s16(w1), vget_low_s16(a1)), vmull_high_s16(w1, a1)));
}

// reduce8 of the contract over lanes 0..3 (lo) and 4..7 (hi): ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)).
inline float reduce8(float32x4_t lo, float32x4_t hi) {
    const float32x4_t a = vaddq_f32(lo, hi);
    const float32x2_t b = vadd_f32(vget_low_f32(a), vget_high_f32(a));
    return vget_lane_f32(b, 0) + vget_lane_f32(b, 1);
}

template <class T, int NT>
void dot_row_k(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const typename T::Block *>(wrow);
    float32x4_t acc_lo[NT], acc_hi[NT];
    for (int t = 0; t < NT; ++t) acc_lo[t] = acc_hi[t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        KDecoded k;
        T::decode(w[b], k);
        int32x4_t p_lo[NT], p_hi[NT];
        for (int t = 0; t < NT; ++t) p_lo[t] = p_hi[t] = vdupq_n_s32(0);
        for (int g = 0; g < 8; ++g) {
            // Elements 32g..32g+15 (scale sc[2g]) and 32g+16..32g+31 (scale sc[2g + 1]), each as two int16 vectors.
            const int16x8_t s0 = vdupq_n_s16(k.sc[2 * g]), s1 = vdupq_n_s16(k.sc[2 * g + 1]);
            const int16x8_t w00 = vmulq_s16(vmovl_s8(vget_low_s8(k.lo[g])), s0);
            const int16x8_t w01 = vmulq_s16(vmovl_high_s8(k.lo[g]), s0);
            const int16x8_t w10 = vmulq_s16(vmovl_s8(vget_low_s8(k.hi[g])), s1);
            const int16x8_t w11 = vmulq_s16(vmovl_high_s8(k.hi[g]), s1);
            for (int t = 0; t < NT; ++t) {
                const int16_t * q = act[t][b].qs + 32 * g;
                // Elements 0..7 of each 16-half go to lanes 0..3, elements 8..15 to lanes 4..7.
                half_lanes(w00, w01, q, p_lo[t], p_hi[t]);
                half_lanes(w10, w11, q + 16, p_lo[t], p_hi[t]);
            }
        }
        // dmin times the min of lanes 0..3 and 4..7 (q2_K: then of the second 16-halves' lanes, 8..11 and 12..15).
        float32x4_t wm_lo = vdupq_n_f32(0.0f), wm_hi = vdupq_n_f32(0.0f), wm_lo2 = wm_lo, wm_hi2 = wm_hi;
        if constexpr (T::kMins != Mins::None) {
            const float32x4_t dm = vdupq_n_f32(k.dmin);
            wm_lo = vmulq_f32(dm, vld1q_f32(k.mins));
            wm_hi = vmulq_f32(dm, vld1q_f32(k.mins + 4));
            if constexpr (T::kMins == Mins::Per16) {
                wm_lo2 = vmulq_f32(dm, vld1q_f32(k.mins + 8));
                wm_hi2 = vmulq_f32(dm, vld1q_f32(k.mins + 12));
            }
        }
        for (int t = 0; t < NT; ++t) {
            const BlockQ16_K & a = act[t][b];
            const float32x4_t s = vdupq_n_f32(k.d * a.d);
            acc_lo[t] = vfmaq_f32(acc_lo[t], vcvtq_f32_s32(p_lo[t]), s);
            acc_hi[t] = vfmaq_f32(acc_hi[t], vcvtq_f32_s32(p_hi[t]), s);
            if constexpr (T::kMins == Mins::Per32) {
                acc_lo[t] = vfmsq_f32(acc_lo[t], wm_lo, vld1q_f32(a.dsum32));
                acc_hi[t] = vfmsq_f32(acc_hi[t], wm_hi, vld1q_f32(a.dsum32 + 4));
            }
            if constexpr (T::kMins == Mins::Per16) {
                acc_lo[t] = vfmsq_f32(acc_lo[t], wm_lo, vld1q_f32(a.dsum16));
                acc_hi[t] = vfmsq_f32(acc_hi[t], wm_hi, vld1q_f32(a.dsum16 + 4));
                acc_lo[t] = vfmsq_f32(acc_lo[t], wm_lo2, vld1q_f32(a.dsum16 + 8));
                acc_hi[t] = vfmsq_f32(acc_hi[t], wm_hi2, vld1q_f32(a.dsum16 + 12));
            }
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce8(acc_lo[t], acc_hi[t]);
}

template <class T, int NT>
void dot_row_32(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const typename T::Block *>(wrow);
    float32x4_t acc_lo[2][NT], acc_hi[2][NT];  // by block parity
    for (int e = 0; e < 2; ++e)
        for (int t = 0; t < NT; ++t) acc_lo[e][t] = acc_hi[e][t] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / kQK; ++b) {
        int8x16_t lo, hi;
        T::values(w[b], lo, hi);
        const int16x8_t w00 = vmovl_s8(vget_low_s8(lo)), w01 = vmovl_high_s8(lo);
        const int16x8_t w10 = vmovl_s8(vget_low_s8(hi)), w11 = vmovl_high_s8(hi);
        const float dw = f16_to_f32(w[b].d);
        const int e = static_cast<int>(b % 2);
        for (int t = 0; t < NT; ++t) {
            const BlockQ16_K & a = act[t][b / 8];
            const int16_t * q = a.qs + 32 * (b % 8);
            int32x4_t p_lo = vdupq_n_s32(0), p_hi = vdupq_n_s32(0);
            half_lanes(w00, w01, q, p_lo, p_hi);
            half_lanes(w10, w11, q + 16, p_lo, p_hi);
            const float32x4_t s = vdupq_n_f32(dw * a.d);
            acc_lo[e][t] = vfmaq_f32(acc_lo[e][t], vcvtq_f32_s32(p_lo), s);
            acc_hi[e][t] = vfmaq_f32(acc_hi[e][t], vcvtq_f32_s32(p_hi), s);
        }
    }
    for (int t = 0; t < NT; ++t) {
        out[t] = reduce8(vaddq_f32(acc_lo[0][t], acc_lo[1][t]), vaddq_f32(acc_hi[0][t], acc_hi[1][t]));
    }
}

template <class T, bool K, int NT>
void dot_row_n(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    if constexpr (K) {
        dot_row_k<T, NT>(wrow, act, n, out);
    } else {
        dot_row_32<T, NT>(wrow, act, n, out);
    }
}

template <class T, bool K>
float vec_dot(const void * w, const void * x, int64_t n) {
    const BlockQ16_K * a[1] = {static_cast<const BlockQ16_K *>(x)};
    float out;
    dot_row_n<T, K, 1>(w, a, n, &out);
    return out;
}

template <class T, bool K>
void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows, int n_tok,
              float * y, size_t y_stride) {
    const BlockQ16_K * a[kTileMax];
    for (int t = 0; t < n_tok; ++t) {
        a[t] = reinterpret_cast<const BlockQ16_K *>(static_cast<const uint8_t *>(act) + t * act_stride);
    }
    for (int r = 0; r < n_rows; ++r) {
        const void * row = static_cast<const uint8_t *>(w) + r * w_stride;
        float out[kTileMax];
        switch (n_tok) {
            case 1: dot_row_n<T, K, 1>(row, a, n, out); break;
            case 2: dot_row_n<T, K, 2>(row, a, n, out); break;
            case 3: dot_row_n<T, K, 3>(row, a, n, out); break;
            default: dot_row_n<T, K, 4>(row, a, n, out); break;
        }
        for (int t = 0; t < n_tok; ++t) y[t * y_stride + r] = out[t];
    }
}

template <class T, bool K>
void set(TypeKernels * table, ElemType type) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.act_type = ElemType::Q16_K;
    k.quantize_act = quantize_row_q16_K;
    k.vec_dot = vec_dot<T, K>;
    k.dot_tile = dot_tile<T, K>;
}

}  // namespace

void add_int16_entries_neon(TypeKernels * table) {
    set<NQ4K, true>(table, ElemType::Q4_K);
    set<NQ5K, true>(table, ElemType::Q5_K);
    set<NQ6K, true>(table, ElemType::Q6_K);
    set<NQ80, false>(table, ElemType::Q8_0);
    set<NQ40, false>(table, ElemType::Q4_0);
    set<NQ50, false>(table, ElemType::Q5_0);
    set<NQ3K, true>(table, ElemType::Q3_K);
    set<NQ2K, true>(table, ElemType::Q2_K);
    set<NIQ4XS, true>(table, ElemType::IQ4_XS);
    set<NIQ4NL, false>(table, ElemType::IQ4_NL);
}

}  // namespace offgrid::ops::cpu::quant
