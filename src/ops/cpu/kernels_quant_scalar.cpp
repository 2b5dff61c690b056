// The 8-bit-activation kernels (scalar) and the activation quantisers. Each weight block is unpacked to
// its integer values (the formats of tensor/blocks.h), dotted with the 8-bit activations in plain integer
// arithmetic, and folded into the f32 sum block by block (kernels_quant_common.h).
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/kernels_quant_common.h"
#include "tensor/quantize.h"

namespace offgrid::ops::cpu::quant {

namespace {

using namespace tensor;

// --- activation quantisers -------------------------------------------------------------------------------

// Round half to even, as the K-quant reference quantiser does (the default rounding mode).
inline int round_even(float v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

void quantize_row_q8_1(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ8_1 *>(dst);
    for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
        float amax = 0;
        for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < kQK; ++j) {
            y[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
            sum += y[b].qs[j];
        }
        y[b].d = f32_to_f16(d);
        y[b].s = f32_to_f16(static_cast<float>(sum) * d);
    }
}

void quantize_row_q8_K(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ8_K *>(dst);
    for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
        // The signed value of largest magnitude maps to -127 (its sign is kept by the scale).
        float amax = 0, max = 0;
        for (int j = 0; j < kQK_K; ++j) {
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            std::memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < kQK_K; ++j) {
            const int v = round_even(iscale * x[j]);
            y[b].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
        }
        for (int g = 0; g < kQK_K / 16; ++g) {
            int s = 0;
            for (int j = 0; j < 16; ++j) s += y[b].qs[16 * g + j];
            y[b].bsums[g] = static_cast<int16_t>(s);
        }
        y[b].d = 1.0f / iscale;
    }
}

void quantize_row_q8_0_ref(const float * x, void * dst, int64_t n) {
    tensor::quantize_row(ElemType::Q8_0, x, dst, static_cast<size_t>(n));
}

namespace {

// --- blocks of 32 ----------------------------------------------------------------------------------------

// Quant j (0..31) of a block of 32 packed as nibbles (low nibbles first half, high nibbles second).
inline int nibble(const uint8_t * qs, int j) { return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4); }
inline int fifth_bit(const uint8_t * qh, int j) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return static_cast<int>((h >> j) & 1u);
}

float dot_q4_0(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ4_0 *>(wv);
    const auto * a = static_cast<const BlockQ8_0 *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK; ++b) {
        int32_t isum = 0;
        // Low and high nibbles of one byte in one step (the form GCC 12 vectorises correctly at -march=native;
        // the j < 16 ? low : high form of nibble() was miscompiled there).
        for (int j = 0; j < kQK / 2; ++j) {
            isum += ((w[b].qs[j] & 0x0f) - 8) * a[b].qs[j] + ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + kQK / 2];
        }
        acc = fold_q8_0(acc, w[b].d, a[b].d, isum);
    }
    return acc;
}

float dot_q5_0(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ5_0 *>(wv);
    const auto * a = static_cast<const BlockQ8_0 *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < kQK; ++j) isum += (nibble(w[b].qs, j) + 16 * fifth_bit(w[b].qh, j) - 16) * a[b].qs[j];
        acc = fold_q8_0(acc, w[b].d, a[b].d, isum);
    }
    return acc;
}

float dot_iq4_nl(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockIQ4_NL *>(wv);
    const auto * a = static_cast<const BlockQ8_0 *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < kQK / 2; ++j) {
            isum += kIq4nlValues[w[b].qs[j] & 0x0f] * a[b].qs[j] + kIq4nlValues[w[b].qs[j] >> 4] * a[b].qs[j + kQK / 2];
        }
        acc = fold_q8_0(acc, w[b].d, a[b].d, isum);
    }
    return acc;
}

float dot_q4_1(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ4_1 *>(wv);
    const auto * a = static_cast<const BlockQ8_1 *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < kQK / 2; ++j) {
            isum += (w[b].qs[j] & 0x0f) * a[b].qs[j] + (w[b].qs[j] >> 4) * a[b].qs[j + kQK / 2];
        }
        acc = fold_q8_1(acc, w[b].d, w[b].m, a[b].d, a[b].s, isum);
    }
    return acc;
}

float dot_q5_1(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ5_1 *>(wv);
    const auto * a = static_cast<const BlockQ8_1 *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK; ++b) {
        int32_t isum = 0;
        for (int j = 0; j < kQK; ++j) isum += (nibble(w[b].qs, j) + 16 * fifth_bit(w[b].qh, j)) * a[b].qs[j];
        acc = fold_q8_1(acc, w[b].d, w[b].m, a[b].d, a[b].s, isum);
    }
    return acc;
}

// --- super-blocks of 256 ---------------------------------------------------------------------------------

// sum over sub-blocks of `size` elements: scale[sub] * sum(value[i] * a[i]).
template <int size>
inline int32_t scaled_dot(const int8_t * value, const int8_t * a, const int * scale) {
    int32_t total = 0;
    for (int s = 0; s < kQK_K / size; ++s) {
        int32_t part = 0;
        for (int i = 0; i < size; ++i) part += value[s * size + i] * a[s * size + i];
        total += scale[s] * part;
    }
    return total;
}

// Element i of the 2-bit plane shared by q2_K and q3_K: per 128, byte l of 32, bits 2g (g = 32-group).
inline int two_bits(const uint8_t * qs, int i) {
    const int half = i / 128, g = (i % 128) / 32, l = i % 32;
    return (qs[32 * half + l] >> (2 * g)) & 3;
}

float dot_q2_k(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ2_K *>(wv);
    const auto * a = static_cast<const BlockQ8_K *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        int8_t v[kQK_K];
        int sc[16];
        int32_t imin = 0;
        for (int i = 0; i < kQK_K; ++i) v[i] = static_cast<int8_t>(two_bits(w[b].qs, i));
        for (int j = 0; j < 16; ++j) {
            sc[j] = w[b].scales[j] & 0x0f;
            imin += (w[b].scales[j] >> 4) * a[b].bsums[j];
        }
        acc = fold_q8_k_min(acc, w[b].d, w[b].dmin, a[b].d, scaled_dot<16>(v, a[b].qs, sc), imin);
    }
    return acc;
}

float dot_q3_k(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ3_K *>(wv);
    const auto * a = static_cast<const BlockQ8_K *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        int8_t v[kQK_K];
        int8_t s8[16];
        int sc[16];
        unpack_q3_k_scales(w[b].scales, s8);
        for (int j = 0; j < 16; ++j) sc[j] = s8[j];
        for (int i = 0; i < kQK_K; ++i) {
            const int half = i / 128, g = (i % 128) / 32, l = i % 32;
            const int high = (w[b].hmask[l] >> (4 * half + g)) & 1;
            v[i] = static_cast<int8_t>(two_bits(w[b].qs, i) + 4 * high - 4);
        }
        acc = fold_q8_k(acc, w[b].d, a[b].d, scaled_dot<16>(v, a[b].qs, sc));
    }
    return acc;
}

// Quant i of the q4_K / q5_K low nibbles: per 64, 32 bytes, low nibbles then high nibbles.
inline int k_nibble(const uint8_t * qs, int i) {
    const uint8_t byte = qs[32 * (i / 64) + i % 32];
    return (i % 64) < 32 ? (byte & 0x0f) : (byte >> 4);
}

// q4_K: the exact integer sum of scale * quant * a over the super-block and the one of min * block sums, folded
// once per super-block (ggml's arithmetic), so an integer tile unit that sums a whole super-block at once gives the
// same integers (kernels_quant_int8_amx.cpp).
float dot_q4_k(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ4_K *>(wv);
    const auto * a = static_cast<const BlockQ8_K *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        int8_t v[kQK_K];
        uint8_t s8[8], m8[8];
        int sc[8];
        k4_scales_mins(w[b].scales, s8, m8);
        for (int j = 0; j < 8; ++j) sc[j] = s8[j];
        for (int i = 0; i < kQK_K; ++i) v[i] = static_cast<int8_t>(k_nibble(w[b].qs, i));
        acc = fold_q8_k_min(acc, w[b].d, w[b].dmin, a[b].d, scaled_dot<32>(v, a[b].qs, sc),
                            k4_min_sum(m8, a[b].bsums));
    }
    return acc;
}

float dot_q5_k(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ5_K *>(wv);
    const auto * a = static_cast<const BlockQ8_K *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        int8_t v[kQK_K];
        uint8_t s8[8], m8[8];
        int sc[8];
        k4_scales_mins(w[b].scales, s8, m8);
        for (int j = 0; j < 8; ++j) sc[j] = s8[j];
        for (int i = 0; i < kQK_K; ++i) {
            const int high = (w[b].qh[i % 32] >> (i / 32)) & 1;
            v[i] = static_cast<int8_t>(k_nibble(w[b].qs, i) + 16 * high);
        }
        acc = fold_q8_k_min(acc, w[b].d, w[b].dmin, a[b].d, scaled_dot<32>(v, a[b].qs, sc),
                            k4_min_sum(m8, a[b].bsums));
    }
    return acc;
}

float dot_q6_k(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockQ6_K *>(wv);
    const auto * a = static_cast<const BlockQ8_K *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        int8_t v[kQK_K];
        int sc[16];
        for (int j = 0; j < 16; ++j) sc[j] = w[b].scales[j];
        for (int i = 0; i < kQK_K; ++i) {
            const int half = i / 128, g = (i % 128) / 32, l = i % 32;
            const uint8_t lowbyte = w[b].ql[64 * half + l + 32 * (g & 1)];
            const int low = g < 2 ? (lowbyte & 0x0f) : (lowbyte >> 4);
            const int high = (w[b].qh[32 * half + l] >> (2 * g)) & 3;
            v[i] = static_cast<int8_t>(low + 16 * high - 32);
        }
        acc = fold_q8_k(acc, w[b].d, a[b].d, scaled_dot<16>(v, a[b].qs, sc));
    }
    return acc;
}

float dot_iq4_xs(const void * wv, const void * av, int64_t n) {
    const auto * w = static_cast<const BlockIQ4_XS *>(wv);
    const auto * a = static_cast<const BlockQ8_K *>(av);
    float acc = 0;
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        int8_t v[kQK_K];
        int sc[8];
        for (int ib = 0; ib < 8; ++ib) {
            sc[ib] = iq4_xs_scale(w[b], ib);
            for (int j = 0; j < 32; ++j) v[32 * ib + j] = kIq4nlValues[nibble(w[b].qs + 16 * ib, j)];
        }
        acc = fold_q8_k(acc, w[b].d, a[b].d, scaled_dot<32>(v, a[b].qs, sc));
    }
    return acc;
}

void set(TypeKernels * table, ElemType type, ElemType act, void (*quantize)(const float *, void *, int64_t),
         float (*dot)(const void *, const void *, int64_t)) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.act_type = act;
    k.quantize_act = quantize;
    k.vec_dot = dot;
    k.dot_tile = nullptr;
}

}  // namespace

bool integer_activations_requested() {
    const char * env = std::getenv("OFFGRID_QUANT_ACT");
    return env != nullptr && std::strcmp(env, "int8") == 0;
}

void add_integer_entries(TypeKernels * table) {
    // q8_0 activations come from the kernels side's quantiser when its Q8_0 entry has one (one format, one
    // quantiser for every type that reads it).
    const TypeKernels & q8 = table[static_cast<uint32_t>(ElemType::Q8_0)];
    auto * q8_0 = q8.act_type == ElemType::Q8_0 && q8.quantize_act != nullptr ? q8.quantize_act : quantize_row_q8_0_ref;
    set(table, ElemType::Q4_0, ElemType::Q8_0, q8_0, dot_q4_0);
    set(table, ElemType::Q5_0, ElemType::Q8_0, q8_0, dot_q5_0);
    set(table, ElemType::IQ4_NL, ElemType::Q8_0, q8_0, dot_iq4_nl);
    set(table, ElemType::Q4_1, ElemType::Q8_1, quantize_row_q8_1, dot_q4_1);
    set(table, ElemType::Q5_1, ElemType::Q8_1, quantize_row_q8_1, dot_q5_1);
    set(table, ElemType::Q2_K, ElemType::Q8_K, quantize_row_q8_K, dot_q2_k);
    set(table, ElemType::Q3_K, ElemType::Q8_K, quantize_row_q8_K, dot_q3_k);
    set(table, ElemType::Q4_K, ElemType::Q8_K, quantize_row_q8_K, dot_q4_k);
    set(table, ElemType::Q5_K, ElemType::Q8_K, quantize_row_q8_K, dot_q5_k);
    set(table, ElemType::Q6_K, ElemType::Q8_K, quantize_row_q8_K, dot_q6_k);
    set(table, ElemType::IQ4_XS, ElemType::Q8_K, quantize_row_q8_K, dot_iq4_xs);
}

}  // namespace offgrid::ops::cpu::quant
