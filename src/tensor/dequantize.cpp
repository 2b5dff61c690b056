// Reference dequantisation of every weight type offgrid reads, bit-exact with ggml's to_float.
//
// Bit equality needs more than the right formula: each value must come from the same f32 operations in the
// same order as ggml's reference code, e.g. q4_K is (d * sc) * q - (dmin * m), computed as two products and a
// subtraction, never fused into an fma and never regrouped. GCC and clang both contract a * b - c into an
// fma when the target has one (a -march=native build), so both are told not to below. The golden test
// (tests/quant/golden_dequant_test.cpp) hashes every tensor of llama.cpp-quantised models against ggml's own
// output.
#include <cstring>
#include <string>

#include "common/error.h"
#include "tensor/blocks.h"
#include "tensor/types.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace offgrid::tensor {

namespace {

template <class Block>
const Block * blocks_of(const void * src) {
    return static_cast<const Block *>(src);
}

void dequant_q4_0(const BlockQ4_0 * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < kQK / 2; ++j) {
            y[j] = static_cast<float>((x[i].qs[j] & 0x0f) - 8) * d;
            y[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequant_q4_1(const BlockQ4_1 * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK) {
        const float d = f16_to_f32(x[i].d);
        const float m = f16_to_f32(x[i].m);
        for (int j = 0; j < kQK / 2; ++j) {
            y[j] = static_cast<float>(x[i].qs[j] & 0x0f) * d + m;
            y[j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
        }
    }
}

uint32_t load_qh(const uint8_t * qh) {
    uint32_t v;
    std::memcpy(&v, qh, 4);
    return v;
}

// The 5-bit quant of element j (0..31) of a q5_0 / q5_1 block.
inline int q5_value(const uint8_t * qs, uint32_t qh, int j) {
    const int low = j < kQK / 2 ? (qs[j] & 0x0f) : (qs[j - kQK / 2] >> 4);
    return low | static_cast<int>(((qh >> j) & 1u) << 4);
}

void dequant_q5_0(const BlockQ5_0 * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK) {
        const float d = f16_to_f32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_value(x[i].qs, qh, j) - 16) * d;
    }
}

void dequant_q5_1(const BlockQ5_1 * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK) {
        const float d = f16_to_f32(x[i].d);
        const float m = f16_to_f32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_value(x[i].qs, qh, j)) * d + m;
    }
}

void dequant_q8_0(const BlockQ8_0 * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

void dequant_q8_1(const BlockQ8_1 * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

// q2_K and q3_K share the quant order: per 128 elements, 32 bytes of qs; the four groups of 32 elements take
// bits 0-1, 2-3, 4-5, 6-7 of those bytes, and each group is two sub-blocks of 16 (bytes l and l + 16).
void dequant_q2_k(const BlockQ2_K * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const float dmin = f16_to_f32(x[i].dmin);
        const uint8_t * q = x[i].qs;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part) {
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * static_cast<float>(sc & 0x0f);
                    const float ml = dmin * static_cast<float>(sc >> 4);
                    for (int l = 0; l < 16; ++l) {
                        *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
                    }
                }
            }
        }
    }
}

void dequant_q3_k(const BlockQ3_K * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        int8_t scales[16];
        unpack_q3_k_scales(x[i].scales, scales);
        const uint8_t * q = x[i].qs;
        uint8_t mask = 1;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
                for (int part = 0; part < 2; ++part) {
                    const float dl = d * static_cast<float>(scales[is++]);
                    for (int l = 0; l < 16; ++l) {
                        const int idx = l + 16 * part;
                        const int v = ((q[idx] >> shift) & 3) - ((x[i].hmask[idx] & mask) ? 0 : 4);
                        *y++ = dl * static_cast<float>(v);
                    }
                }
            }
        }
    }
}

void dequant_q4_k(const BlockQ4_K * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const float dmin = f16_to_f32(x[i].dmin);
        const uint8_t * q = x[i].qs;
        for (int s = 0; s < 8; s += 2, q += 32) {
            uint8_t sc, m;
            k4_scale_min(s, x[i].scales, sc, m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            k4_scale_min(s + 1, x[i].scales, sc, m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
    }
}

void dequant_q5_k(const BlockQ5_K * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const float dmin = f16_to_f32(x[i].dmin);
        const uint8_t * q = x[i].qs;
        const uint8_t * qh = x[i].qh;
        for (int s = 0; s < 8; s += 2, q += 32) {
            uint8_t sc, m;
            k4_scale_min(s, x[i].scales, sc, m);
            const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
            k4_scale_min(s + 1, x[i].scales, sc, m);
            const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
            const uint8_t bit1 = static_cast<uint8_t>(1u << s), bit2 = static_cast<uint8_t>(2u << s);
            for (int l = 0; l < 32; ++l) {
                *y++ = d1 * static_cast<float>((q[l] & 0x0f) + ((qh[l] & bit1) ? 16 : 0)) - m1;
            }
            for (int l = 0; l < 32; ++l) {
                *y++ = d2 * static_cast<float>((q[l] >> 4) + ((qh[l] & bit2) ? 16 : 0)) - m2;
            }
        }
    }
}

// q6_K: per 128 elements, 64 bytes of ql and 32 of qh; element l + 32 * g (g = 0..3) takes the low or high
// nibble of ql[l] (g even / odd: ql[l], ql[l + 32]) and bits 2g..2g+1 of qh[l].
void dequant_q6_k(const BlockQ6_K * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t * ql = x[i].ql;
        const uint8_t * qh = x[i].qh;
        const int8_t * sc = x[i].scales;
        for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
    }
}

void dequant_q8_k(const BlockQ8_K * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK_K) {
        for (int j = 0; j < kQK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
    }
}

// n elements: the last block may be partial (a Q16_K row of any width holds ceil(n / 256) blocks).
void dequant_q16_k(const BlockQ16_K * x, float * y, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] = x[i / kQK_K].d * static_cast<float>(x[i / kQK_K].qs[i % kQK_K]);
}

void dequant_iq4_nl(const BlockIQ4_NL * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i, y += kQK) {
        const float d = f16_to_f32(x[i].d);
        for (int j = 0; j < kQK / 2; ++j) {
            y[j] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] & 0x0f]);
            y[j + kQK / 2] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] >> 4]);
        }
    }
}

void dequant_iq4_xs(const BlockIQ4_XS * x, float * y, size_t nb) {
    for (size_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(x[i].d);
        const uint8_t * qs = x[i].qs;
        for (int ib = 0; ib < kQK_K / 32; ++ib, y += 32, qs += 16) {
            const float dl = d * static_cast<float>(iq4_xs_scale(x[i], ib));
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0x0f]);
                y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
            }
        }
    }
}

uint16_t load_u16(const uint8_t * p) {
    uint16_t v;
    std::memcpy(&v, p, sizeof v);  // plain 16-bit rows may be unaligned; the host is little endian like GGUF
    return v;
}

}  // namespace

void dequantize_row(ElemType type, const void * src, float * dst, size_t n) {
    const TypeTraits & t = traits(type);
    if (type == ElemType::Q16_K) return dequant_q16_k(static_cast<const BlockQ16_K *>(src), dst, n);
    if (n % t.block_size != 0) {
        throw Error("dequantize_row: " + std::to_string(n) + " elements is not a multiple of the " +
                    std::string(t.name) + " block size " + std::to_string(t.block_size));
    }
    const size_t nb = n / t.block_size;
    const auto * p = static_cast<const uint8_t *>(src);
    switch (type) {
    case ElemType::F32: std::memcpy(dst, p, n * sizeof(float)); return;
    case ElemType::F16:
        for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(p + 2 * i));
        return;
    case ElemType::BF16:
        for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(p + 2 * i));
        return;
    case ElemType::Q4_0: return dequant_q4_0(blocks_of<BlockQ4_0>(src), dst, nb);
    case ElemType::Q4_1: return dequant_q4_1(blocks_of<BlockQ4_1>(src), dst, nb);
    case ElemType::Q5_0: return dequant_q5_0(blocks_of<BlockQ5_0>(src), dst, nb);
    case ElemType::Q5_1: return dequant_q5_1(blocks_of<BlockQ5_1>(src), dst, nb);
    case ElemType::Q8_0: return dequant_q8_0(blocks_of<BlockQ8_0>(src), dst, nb);
    case ElemType::Q8_1: return dequant_q8_1(blocks_of<BlockQ8_1>(src), dst, nb);
    case ElemType::Q2_K: return dequant_q2_k(blocks_of<BlockQ2_K>(src), dst, nb);
    case ElemType::Q3_K: return dequant_q3_k(blocks_of<BlockQ3_K>(src), dst, nb);
    case ElemType::Q4_K: return dequant_q4_k(blocks_of<BlockQ4_K>(src), dst, nb);
    case ElemType::Q5_K: return dequant_q5_k(blocks_of<BlockQ5_K>(src), dst, nb);
    case ElemType::Q6_K: return dequant_q6_k(blocks_of<BlockQ6_K>(src), dst, nb);
    case ElemType::Q8_K: return dequant_q8_k(blocks_of<BlockQ8_K>(src), dst, nb);
    case ElemType::IQ4_NL: return dequant_iq4_nl(blocks_of<BlockIQ4_NL>(src), dst, nb);
    case ElemType::IQ4_XS: return dequant_iq4_xs(blocks_of<BlockIQ4_XS>(src), dst, nb);
    default:
        throw Error("dequantize_row: element type " + std::string(t.name) + " cannot be dequantised");
    }
}

}  // namespace offgrid::tensor
