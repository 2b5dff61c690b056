// The Scalar twins of the 16-bit-activation integer kernels (kernels_quant_int16.h states the contract) and
// the Q16_K activation quantiser. Plain loops: each weight block is decoded to its exact integer values and
// per-16 scales, the integer lanes are summed in int32, and the float part follows the contract step by step
// (std::fma, the single rounding the SIMD levels' fused multiply-adds give).
#include <cmath>
#include <cstring>

#include "ops/cpu/kernels_quant_common.h"
#include "ops/cpu/kernels_quant_int16.h"

namespace offgrid::ops::cpu::quant {

using namespace tensor;

namespace {
void quantize_blocks(const float * x, BlockQ16_K * y, int64_t nb);
}

void quantize_row_q16_K(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ16_K *>(dst);
    quantize_blocks(x, y, n / kQK_K);
    if (n % kQK_K != 0) {  // the last, partial block: zero-padded
        float tail[kQK_K] = {};
        std::memcpy(tail, x + n / kQK_K * kQK_K, sizeof(float) * static_cast<size_t>(n % kQK_K));
        quantize_blocks(tail, y + n / kQK_K, 1);
    }
}

namespace {

void quantize_blocks(const float * x, BlockQ16_K * y, int64_t nb) {
    for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
        BlockQ16_K & o = y[b];
        std::memset(&o, 0, sizeof o);
        float amax = 0;
        for (int j = 0; j < kQK_K; ++j) {
            const float v = std::fabs(x[j]);
            amax = v > amax ? v : amax;
        }
        if (amax == 0.0f) continue;
        const float id = 16383.0f / amax;
        for (int j = 0; j < kQK_K; ++j) o.qs[j] = static_cast<int16_t>(q16_round(x[j] * id));
        o.d = amax / 16383.0f;
        int32_t s16[16];
        for (int g = 0; g < kQK_K / 16; ++g) {
            s16[g] = 0;
            for (int j = 0; j < 16; ++j) s16[g] += o.qs[16 * g + j];
            o.dsum16[g] = o.d * static_cast<float>(s16[g]);
        }
        for (int g = 0; g < kQK_K / 32; ++g) o.dsum32[g] = o.d * static_cast<float>(s16[2 * g] + s16[2 * g + 1]);
    }
}

enum class Mins { None, Per32, Per16 };

// A 256-element weight block as the contract sees it: values v[i], scales sc[i / 16], the min multipliers.
struct KBlock {
    int8_t v[kQK_K];
    int16_t sc[16];
    int32_t m[16];  // Per32: m[0..7]; Per16: m[0..15]
    float d = 0, dmin = 0;
};

// Element i of the 2-bit planes of q2_K / q3_K: per 128, byte l of 32, bits 2g (g = 32-group).
inline int two_bits(const uint8_t * qs, int i) {
    const int half = i / 128, g = (i % 128) / 32, l = i % 32;
    return (qs[32 * half + l] >> (2 * g)) & 3;
}
// Quant i of the q4_K / q5_K low nibbles: per 64, 32 bytes, low nibbles then high nibbles.
inline int k_nibble(const uint8_t * qs, int i) {
    const uint8_t byte = qs[32 * (i / 64) + i % 32];
    return (i % 64) < 32 ? (byte & 0x0f) : (byte >> 4);
}
inline int nibble32(const uint8_t * qs, int j) { return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4); }

struct Q4K {
    using Block = BlockQ4_K;
    static constexpr Mins kMins = Mins::Per32;
    static void decode(const Block & b, KBlock & k) {
        uint8_t s8[8], m8[8];
        k4_scales_mins(b.scales, s8, m8);
        for (int j = 0; j < 16; ++j) k.sc[j] = s8[j / 2];
        for (int j = 0; j < 8; ++j) k.m[j] = m8[j];
        for (int i = 0; i < kQK_K; ++i) k.v[i] = static_cast<int8_t>(k_nibble(b.qs, i));
        k.d = f16_to_f32(b.d);
        k.dmin = f16_to_f32(b.dmin);
    }
};
struct Q5K {
    using Block = BlockQ5_K;
    static constexpr Mins kMins = Mins::Per32;
    static void decode(const Block & b, KBlock & k) {
        uint8_t s8[8], m8[8];
        k4_scales_mins(b.scales, s8, m8);
        for (int j = 0; j < 16; ++j) k.sc[j] = s8[j / 2];
        for (int j = 0; j < 8; ++j) k.m[j] = m8[j];
        for (int i = 0; i < kQK_K; ++i) {
            k.v[i] = static_cast<int8_t>(k_nibble(b.qs, i) + 16 * ((b.qh[i % 32] >> (i / 32)) & 1));
        }
        k.d = f16_to_f32(b.d);
        k.dmin = f16_to_f32(b.dmin);
    }
};
struct Q6K {
    using Block = BlockQ6_K;
    static constexpr Mins kMins = Mins::None;
    static void decode(const Block & b, KBlock & k) {
        for (int j = 0; j < 16; ++j) k.sc[j] = b.scales[j];
        for (int i = 0; i < kQK_K; ++i) {
            const int half = i / 128, g = (i % 128) / 32, l = i % 32;
            const uint8_t lowbyte = b.ql[64 * half + l + 32 * (g & 1)];
            const int low = g < 2 ? (lowbyte & 0x0f) : (lowbyte >> 4);
            const int high = (b.qh[32 * half + l] >> (2 * g)) & 3;
            k.v[i] = static_cast<int8_t>(low + 16 * high - 32);
        }
        k.d = f16_to_f32(b.d);
    }
};
struct Q3K {
    using Block = BlockQ3_K;
    static constexpr Mins kMins = Mins::None;
    static void decode(const Block & b, KBlock & k) {
        int8_t s8[16];
        unpack_q3_k_scales(b.scales, s8);
        for (int j = 0; j < 16; ++j) k.sc[j] = s8[j];
        for (int i = 0; i < kQK_K; ++i) {
            const int half = i / 128, g = (i % 128) / 32, l = i % 32;
            const int high = (b.hmask[l] >> (4 * half + g)) & 1;
            k.v[i] = static_cast<int8_t>(two_bits(b.qs, i) + 4 * high - 4);
        }
        k.d = f16_to_f32(b.d);
    }
};
struct Q2K {
    using Block = BlockQ2_K;
    static constexpr Mins kMins = Mins::Per16;
    static void decode(const Block & b, KBlock & k) {
        for (int j = 0; j < 16; ++j) {
            k.sc[j] = b.scales[j] & 0x0f;
            k.m[j] = b.scales[j] >> 4;
        }
        for (int i = 0; i < kQK_K; ++i) k.v[i] = static_cast<int8_t>(two_bits(b.qs, i));
        k.d = f16_to_f32(b.d);
        k.dmin = f16_to_f32(b.dmin);
    }
};
struct IQ4XS {
    using Block = BlockIQ4_XS;
    static constexpr Mins kMins = Mins::None;
    static void decode(const Block & b, KBlock & k) {
        for (int j = 0; j < 16; ++j) k.sc[j] = static_cast<int16_t>(iq4_xs_scale(b, j / 2));
        for (int ib = 0; ib < 8; ++ib) {
            for (int j = 0; j < 32; ++j) k.v[32 * ib + j] = kIq4nlValues[nibble32(b.qs + 16 * ib, j)];
        }
        k.d = f16_to_f32(b.d);
    }
};

template <class T>
float dot_k(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const typename T::Block *>(wv);
    const auto * a = static_cast<const BlockQ16_K *>(av);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        KBlock k;
        T::decode(w[b], k);
        int32_t p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < kQK_K; ++i) p[(i % 16) / 2] += (k.v[i] * k.sc[i / 16]) * a[b].qs[i];
        const float s = k.d * a[b].d;
        for (int l = 0; l < 8; ++l) acc[l] = std::fma(static_cast<float>(p[l]), s, acc[l]);
        if constexpr (T::kMins == Mins::Per32) {
            for (int l = 0; l < 8; ++l) {
                const float wm = k.dmin * static_cast<float>(k.m[l]);
                acc[l] = std::fma(-wm, a[b].dsum32[l], acc[l]);
            }
        }
        if constexpr (T::kMins == Mins::Per16) {
            for (int l = 0; l < 8; ++l) {
                acc[l] = std::fma(-(k.dmin * static_cast<float>(k.m[l])), a[b].dsum16[l], acc[l]);
                acc[l] = std::fma(-(k.dmin * static_cast<float>(k.m[l + 8])), a[b].dsum16[l + 8], acc[l]);
            }
        }
    }
    return i16_reduce8(acc);
}

// Blocks of 32: the block's signed values and its f16 scale.
struct Q80 {
    using Block = BlockQ8_0;
    static void decode(const Block & b, int8_t v[32]) { std::memcpy(v, b.qs, 32); }
};
struct Q40 {
    using Block = BlockQ4_0;
    static void decode(const Block & b, int8_t v[32]) {
        for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(nibble32(b.qs, j) - 8);
    }
};
struct Q50 {
    using Block = BlockQ5_0;
    static void decode(const Block & b, int8_t v[32]) {
        uint32_t h;
        std::memcpy(&h, b.qh, 4);
        for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(nibble32(b.qs, j) + 16 * ((h >> j) & 1) - 16);
    }
};
struct IQ4NL {
    using Block = BlockIQ4_NL;
    static void decode(const Block & b, int8_t v[32]) {
        for (int j = 0; j < 32; ++j) v[j] = kIq4nlValues[nibble32(b.qs, j)];
    }
};
// With a minimum (x = d * q + m): the unsigned quants, and the minimum added per block (the contract).
struct Q41 {
    using Block = BlockQ4_1;
    static constexpr bool kMin = true;
    static void decode(const Block & b, int8_t v[32]) {
        for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(nibble32(b.qs, j));
    }
};
struct Q51 {
    using Block = BlockQ5_1;
    static constexpr bool kMin = true;
    static void decode(const Block & b, int8_t v[32]) {
        uint32_t h;
        std::memcpy(&h, b.qh, 4);
        for (int j = 0; j < 32; ++j) v[j] = static_cast<int8_t>(nibble32(b.qs, j) + 16 * ((h >> j) & 1));
    }
};

template <class T>
constexpr bool has_min() {
    if constexpr (requires { T::kMin; }) {
        return T::kMin;
    } else {
        return false;
    }
}

template <class T>
float dot_32(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const typename T::Block *>(wv);
    const auto * a = static_cast<const BlockQ16_K *>(av);
    float acc[2][8] = {};
    for (int64_t b = 0; b < n / kQK; ++b) {
        int8_t v[32];
        T::decode(w[b], v);
        const BlockQ16_K & ab = a[b / 8];
        const int16_t * q = ab.qs + 32 * (b % 8);
        int32_t p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = 0; i < 32; ++i) p[(i % 16) / 2] += v[i] * q[i];
        const float s = f16_to_f32(w[b].d) * ab.d;
        float * ac = acc[b % 2];
        for (int l = 0; l < 8; ++l) ac[l] = std::fma(static_cast<float>(p[l]), s, ac[l]);
        if constexpr (has_min<T>()) {
            const float m = f16_to_f32(w[b].m), dsum = ab.dsum32[b % 8];
            for (int l = 0; l < 8; ++l) ac[l] = std::fma(l == 0 ? m : 0.0f, dsum, ac[l]);
        }
    }
    float sum[8];
    for (int l = 0; l < 8; ++l) sum[l] = acc[0][l] + acc[1][l];
    return i16_reduce8(sum);
}

template <float (*Dot)(const void *, const void *, int64_t)>
void tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows, int n_tok,
          float * y, size_t y_stride) {
    for (int t = 0; t < n_tok; ++t) {
        for (int r = 0; r < n_rows; ++r) {
            y[t * y_stride + r] = Dot(static_cast<const uint8_t *>(w) + r * w_stride,
                                      static_cast<const uint8_t *>(act) + t * act_stride, n);
        }
    }
}

template <float (*Dot)(const void *, const void *, int64_t)>
void set(TypeKernels * table, ElemType type) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.act_type = ElemType::Q16_K;
    k.quantize_act = quantize_row_q16_K;
    k.vec_dot = Dot;
    k.dot_tile = tile<Dot>;
}

}  // namespace

void add_int16_entries_scalar(TypeKernels * table) {
    set<dot_k<Q4K>>(table, ElemType::Q4_K);
    set<dot_k<Q5K>>(table, ElemType::Q5_K);
    set<dot_k<Q6K>>(table, ElemType::Q6_K);
    set<dot_k<Q3K>>(table, ElemType::Q3_K);
    set<dot_k<Q2K>>(table, ElemType::Q2_K);
    set<dot_k<IQ4XS>>(table, ElemType::IQ4_XS);
    set<dot_32<Q80>>(table, ElemType::Q8_0);
    set<dot_32<Q40>>(table, ElemType::Q4_0);
    set<dot_32<Q50>>(table, ElemType::Q5_0);
    set<dot_32<IQ4NL>>(table, ElemType::IQ4_NL);
    set<dot_32<Q41>>(table, ElemType::Q4_1);
    set<dot_32<Q51>>(table, ElemType::Q5_1);
}

}  // namespace offgrid::ops::cpu::quant
