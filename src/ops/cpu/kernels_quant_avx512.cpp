// avx512 kernels of q4_0 q4_1 q5_0 q5_1 iq4_nl iq4_xs q2_K q3_K q4_K q5_K q6_K (compiled with the avx512 flags; reached
// only through the dispatch when active_isa() allows it): row dequantisers, and vec_dot / dot_tile that dequantise in
// registers and multiply with the f32 activations at once.
//
// The dequantised values are bit-identical to tensor::dequantize_row (the same f32 multiply and subtract per
// element as the reference, 16 elements per instruction, no fused multiply-add there). The dots accumulate them
// with fused multiply-adds into two accumulators per (row, token), in a fixed order that depends only on n, and
// reduce them in a fixed order: a tile computes each (row, token) with exactly the operations of vec_dot, so the
// two are bit-identical whatever the tile shape.
#include "ops/cpu/kernels_quant_common.h"

// GCC contracts a * b - c into an fma even in ISO C++ mode, also for intrinsics (they are plain vector
// arithmetic to it): the dequantised values must be the reference's two roundings, so not here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

#include <cstring>
// GCC 12's avx512 intrinsics start from _mm512_undefined_*(), which -W(maybe-)uninitialized reports as a use
// of an uninitialised value once inlined (a false positive of the header, not of this code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif

namespace offgrid::ops::cpu::quant {

#if defined(__AVX512F__) && defined(__AVX512BW__)

namespace {

using namespace tensor;

inline __m512i bytes_u32(const uint8_t * p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
}
inline __m512 to_f32(__m512i v) { return _mm512_cvtepi32_ps(v); }
inline __m512 scale_min(__m512 d, __m512i q, __m512 m) { return _mm512_sub_ps(_mm512_mul_ps(d, to_f32(q)), m); }

inline float reduce(__m512 v) {
    // Fixed order: 256-bit halves, 128-bit halves, then pairs.
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The three K-quants as "visit every group of 16 dequantised values": f(offset in the row, values).
template <class F>
inline void visit_q4_k(const BlockQ4_K & x, F && f) {
    const __m512i low4 = _mm512_set1_epi32(0x0f);
    const float d = f16_to_f32(x.d), dmin = f16_to_f32(x.dmin);
    const uint8_t * q = x.qs;
    for (int s = 0; s < 8; s += 2, q += 32) {
        uint8_t sc, m;
        k4_scale_min(s, x.scales, sc, m);
        const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc)), m1 = _mm512_set1_ps(dmin * static_cast<float>(m));
        k4_scale_min(s + 1, x.scales, sc, m);
        const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(sc)), m2 = _mm512_set1_ps(dmin * static_cast<float>(m));
        for (int l = 0; l < 32; l += 16) {
            const __m512i v = bytes_u32(q + l);
            f(32 * s + l, scale_min(d1, _mm512_and_si512(v, low4), m1), 32 * s + 32 + l,
              scale_min(d2, _mm512_srli_epi32(v, 4), m2));
        }
    }
}

template <class F>
inline void visit_q5_k(const BlockQ5_K & x, F && f) {
    const __m512i low4 = _mm512_set1_epi32(0x0f), one = _mm512_set1_epi32(1);
    const float d = f16_to_f32(x.d), dmin = f16_to_f32(x.dmin);
    const uint8_t * q = x.qs;
    for (int s = 0; s < 8; s += 2, q += 32) {
        uint8_t sc, m;
        k4_scale_min(s, x.scales, sc, m);
        const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc)), m1 = _mm512_set1_ps(dmin * static_cast<float>(m));
        k4_scale_min(s + 1, x.scales, sc, m);
        const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(sc)), m2 = _mm512_set1_ps(dmin * static_cast<float>(m));
        for (int l = 0; l < 32; l += 16) {
            const __m512i v = bytes_u32(q + l), h = bytes_u32(x.qh + l);
            const __m512i q1 = _mm512_add_epi32(_mm512_and_si512(v, low4),
                                                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, s), one), 4));
            const __m512i q2 = _mm512_add_epi32(
                _mm512_srli_epi32(v, 4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, s + 1), one), 4));
            f(32 * s + l, scale_min(d1, q1, m1), 32 * s + 32 + l, scale_min(d2, q2, m2));
        }
    }
}

template <class F>
inline void visit_q6_k(const BlockQ6_K & x, F && f) {
    const __m512i low4 = _mm512_set1_epi32(0x0f), two = _mm512_set1_epi32(3), bias = _mm512_set1_epi32(32);
    const float d = f16_to_f32(x.d);
    const uint8_t * ql = x.ql;
    const uint8_t * qh = x.qh;
    const int8_t * sc = x.scales;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l += 16) {
            const int is = l / 16, o = 128 * half + l;
            const __m512i a = bytes_u32(ql + l), c = bytes_u32(ql + l + 32), h = bytes_u32(qh + l);
            auto hbits = [&](int shift) {
                return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h, shift), two), 4);
            };
            auto val = [&](__m512i q, int s) {
                return _mm512_mul_ps(_mm512_set1_ps(d * static_cast<float>(sc[s])), to_f32(_mm512_sub_epi32(q, bias)));
            };
            f(o, val(_mm512_or_si512(_mm512_and_si512(a, low4), hbits(0)), is), o + 32,
              val(_mm512_or_si512(_mm512_and_si512(c, low4), hbits(2)), is + 2));
            f(o + 64, val(_mm512_or_si512(_mm512_srli_epi32(a, 4), hbits(4)), is + 4), o + 96,
              val(_mm512_or_si512(_mm512_srli_epi32(c, 4), hbits(6)), is + 6));
        }
    }
}

// Blocks of 32: the low nibbles of qs[0..15] are elements 0..15, the high nibbles elements 16..31.
template <class Q, class F>
inline void visit_nibbles32(const uint8_t * qs, Q && value, F && f) {
    const __m512i low4 = _mm512_set1_epi32(0x0f);
    for (int j = 0; j < 16; j += 16) {
        const __m512i v = bytes_u32(qs + j);
        f(j, value(_mm512_and_si512(v, low4), j), 16 + j, value(_mm512_srli_epi32(v, 4), 16 + j));
    }
}

// Fifth bits of elements e..e+15 of a q5 block (bit e of qh), as 16 or 0.
inline __m512i fifth_bits(uint32_t qh, int e) {
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_add_epi32(lanes, _mm512_set1_epi32(e));
    return _mm512_slli_epi32(
        _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(qh)), idx), _mm512_set1_epi32(1)), 4);
}

inline uint32_t load_qh(const uint8_t * p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// The iq4 levels of 4-bit indices, as f32.
inline __m512 iq4_levels(__m512i idx) {
    const __m512 levels = _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    return _mm512_permutexvar_ps(idx, levels);
}

struct Q40 {
    using Block = BlockQ4_0;
    static constexpr int kElems = kQK;
    template <class F>
    static void visit(const Block & b, F && f) {
        const __m512 d = _mm512_set1_ps(f16_to_f32(b.d));
        const __m512i eight = _mm512_set1_epi32(8);
        visit_nibbles32(
            b.qs, [&](__m512i q, int) { return _mm512_mul_ps(to_f32(_mm512_sub_epi32(q, eight)), d); }, f);
    }
};
struct Q41 {
    using Block = BlockQ4_1;
    static constexpr int kElems = kQK;
    template <class F>
    static void visit(const Block & b, F && f) {
        const __m512 d = _mm512_set1_ps(f16_to_f32(b.d)), m = _mm512_set1_ps(f16_to_f32(b.m));
        visit_nibbles32(
            b.qs, [&](__m512i q, int) { return _mm512_add_ps(_mm512_mul_ps(to_f32(q), d), m); }, f);
    }
};
struct Q50 {
    using Block = BlockQ5_0;
    static constexpr int kElems = kQK;
    template <class F>
    static void visit(const Block & b, F && f) {
        const __m512 d = _mm512_set1_ps(f16_to_f32(b.d));
        const __m512i sixteen = _mm512_set1_epi32(16);
        const uint32_t qh = load_qh(b.qh);
        visit_nibbles32(
            b.qs,
            [&](__m512i q, int e) {
                return _mm512_mul_ps(to_f32(_mm512_sub_epi32(_mm512_add_epi32(q, fifth_bits(qh, e)), sixteen)), d);
            },
            f);
    }
};
struct Q51 {
    using Block = BlockQ5_1;
    static constexpr int kElems = kQK;
    template <class F>
    static void visit(const Block & b, F && f) {
        const __m512 d = _mm512_set1_ps(f16_to_f32(b.d)), m = _mm512_set1_ps(f16_to_f32(b.m));
        const uint32_t qh = load_qh(b.qh);
        visit_nibbles32(
            b.qs,
            [&](__m512i q, int e) {
                return _mm512_add_ps(_mm512_mul_ps(to_f32(_mm512_add_epi32(q, fifth_bits(qh, e))), d), m);
            },
            f);
    }
};
struct IQ4NL {
    using Block = BlockIQ4_NL;
    static constexpr int kElems = kQK;
    template <class F>
    static void visit(const Block & b, F && f) {
        const __m512 d = _mm512_set1_ps(f16_to_f32(b.d));
        visit_nibbles32(
            b.qs, [&](__m512i q, int) { return _mm512_mul_ps(d, iq4_levels(q)); }, f);
    }
};
struct IQ4XS {
    using Block = BlockIQ4_XS;
    static constexpr int kElems = kQK_K;
    template <class F>
    static void visit(const Block & b, F && f) {
        const float d = f16_to_f32(b.d);
        for (int ib = 0; ib < 8; ++ib) {
            const __m512 dl = _mm512_set1_ps(d * static_cast<float>(iq4_xs_scale(b, ib)));
            visit_nibbles32(
                b.qs + 16 * ib, [&](__m512i q, int) { return _mm512_mul_ps(dl, iq4_levels(q)); },
                [&](int o1, __m512 v1, int o2, __m512 v2) { f(32 * ib + o1, v1, 32 * ib + o2, v2); });
        }
    }
};

// q2_K and q3_K: per 128 elements, 32 bytes of 2-bit planes; group g (32 elements) takes bits 2g..2g+1, its
// first 16 elements (bytes 0..15) and last 16 (bytes 16..31) are two sub-blocks with their own scales.
struct Q2K {
    using Block = BlockQ2_K;
    static constexpr int kElems = kQK_K;
    template <class F>
    static void visit(const Block & b, F && f) {
        const __m512i three = _mm512_set1_epi32(3);
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int half = 0; half < 2; ++half) {
            const uint8_t * q = b.qs + 32 * half;
            for (int g = 0; g < 4; ++g) {
                const int j = 8 * half + 2 * g;
                const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(b.scales[j] & 0x0f));
                const __m512 m1 = _mm512_set1_ps(dmin * static_cast<float>(b.scales[j] >> 4));
                const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(b.scales[j + 1] & 0x0f));
                const __m512 m2 = _mm512_set1_ps(dmin * static_cast<float>(b.scales[j + 1] >> 4));
                for (int l = 0; l < 16; l += 16) {
                    const __m512i va = _mm512_and_si512(_mm512_srli_epi32(bytes_u32(q + l), 2 * g), three);
                    const __m512i vb = _mm512_and_si512(_mm512_srli_epi32(bytes_u32(q + 16 + l), 2 * g), three);
                    const int o = 128 * half + 32 * g + l;
                    f(o, scale_min(d1, va, m1), o + 16, scale_min(d2, vb, m2));
                }
            }
        }
    }
};
struct Q3K {
    using Block = BlockQ3_K;
    static constexpr int kElems = kQK_K;
    template <class F>
    static void visit(const Block & b, F && f) {
        const __m512i three = _mm512_set1_epi32(3), one = _mm512_set1_epi32(1), four = _mm512_set1_epi32(4);
        const float d = f16_to_f32(b.d);
        int8_t sc[16];
        unpack_q3_k_scales(b.scales, sc);
        for (int half = 0; half < 2; ++half) {
            const uint8_t * q = b.qs + 32 * half;
            for (int g = 0; g < 4; ++g) {
                const int j = 8 * half + 2 * g, hshift = 4 * half + g;
                const __m512 d1 = _mm512_set1_ps(d * static_cast<float>(sc[j]));
                const __m512 d2 = _mm512_set1_ps(d * static_cast<float>(sc[j + 1]));
                auto value = [&](int l) {
                    const __m512i low = _mm512_and_si512(_mm512_srli_epi32(bytes_u32(q + l), 2 * g), three);
                    const __m512i high = _mm512_and_si512(_mm512_srli_epi32(bytes_u32(b.hmask + l), hshift), one);
                    return _mm512_add_epi32(_mm512_sub_epi32(low, four),
                                            _mm512_slli_epi32(high, 2));  // low - 4 * !high
                };
                for (int l = 0; l < 16; l += 16) {
                    const int o = 128 * half + 32 * g + l;
                    f(o, _mm512_mul_ps(d1, to_f32(value(l))), o + 16, _mm512_mul_ps(d2, to_f32(value(16 + l))));
                }
            }
        }
    }
};

struct Q4K {
    using Block = BlockQ4_K;
    static constexpr int kElems = kQK_K;
    template <class F>
    static void visit(const Block & b, F && f) {
        visit_q4_k(b, f);
    }
};
struct Q5K {
    using Block = BlockQ5_K;
    static constexpr int kElems = kQK_K;
    template <class F>
    static void visit(const Block & b, F && f) {
        visit_q5_k(b, f);
    }
};
struct Q6K {
    using Block = BlockQ6_K;
    static constexpr int kElems = kQK_K;
    template <class F>
    static void visit(const Block & b, F && f) {
        visit_q6_k(b, f);
    }
};

template <class T>
void dequant_row(const void * src, float * y, int64_t n) {
    const auto * x = static_cast<const typename T::Block *>(src);
    for (int64_t b = 0; b < n / T::kElems; ++b, y += T::kElems) {
        T::visit(x[b], [&](int o1, __m512 v1, int o2, __m512 v2) {
            _mm512_storeu_ps(y + o1, v1);
            _mm512_storeu_ps(y + o2, v2);
        });
    }
}

// One weight row against NT activation rows: out[t] = dot(row, act[t]). Per (row, token): accumulator 0 takes
// the first value group of each visit, accumulator 1 the second; reduce(acc0 + acc1).
template <class T, int NT>
inline void dot_row(const void * w, const float * const * act, int64_t n, float * out) {
    const auto * x = static_cast<const typename T::Block *>(w);
    __m512 acc0[NT], acc1[NT];
    for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / T::kElems; ++b) {
        const int64_t base = b * T::kElems;
        T::visit(x[b], [&](int o1, __m512 v1, int o2, __m512 v2) {
            for (int t = 0; t < NT; ++t) {
                acc0[t] = _mm512_fmadd_ps(v1, _mm512_loadu_ps(act[t] + base + o1), acc0[t]);
                acc1[t] = _mm512_fmadd_ps(v2, _mm512_loadu_ps(act[t] + base + o2), acc1[t]);
            }
        });
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce(_mm512_add_ps(acc0[t], acc1[t]));
}

template <class T>
float vec_dot(const void * w, const void * x, int64_t n) {
    const float * act[1] = {static_cast<const float *>(x)};
    float out;
    dot_row<T, 1>(w, act, n, &out);
    return out;
}

template <class T>
void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows, int n_tok,
              float * y, size_t y_stride) {
    const float * a[kTileMax];
    for (int t = 0; t < n_tok; ++t) {
        a[t] = reinterpret_cast<const float *>(static_cast<const uint8_t *>(act) + t * act_stride);
    }
    for (int r = 0; r < n_rows; ++r) {
        const void * row = static_cast<const uint8_t *>(w) + r * w_stride;
        float out[kTileMax];
        switch (n_tok) {
            case 1:
                dot_row<T, 1>(row, a, n, out);
                break;
            case 2:
                dot_row<T, 2>(row, a, n, out);
                break;
            case 3:
                dot_row<T, 3>(row, a, n, out);
                break;
            default:
                dot_row<T, 4>(row, a, n, out);
                break;
        }
        for (int t = 0; t < n_tok; ++t) y[t * y_stride + r] = out[t];
    }
}

void set(TypeKernels * table, ElemType type, float (*dot)(const void *, const void *, int64_t),
         void (*tile)(const void *, size_t, const void *, size_t, int64_t, int, int, float *, size_t)) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.act_type = ElemType::F32;
    k.quantize_act = nullptr;
    k.vec_dot = dot;
    k.dot_tile = tile;
}

}  // namespace

RowDequant dequantizer_avx512(ElemType type) {
    switch (type) {
        case ElemType::Q4_K:
            return dequant_row<Q4K>;
        case ElemType::Q5_K:
            return dequant_row<Q5K>;
        case ElemType::Q6_K:
            return dequant_row<Q6K>;
        case ElemType::Q2_K:
            return dequant_row<Q2K>;
        case ElemType::Q3_K:
            return dequant_row<Q3K>;
        case ElemType::Q4_0:
            return dequant_row<Q40>;
        case ElemType::Q4_1:
            return dequant_row<Q41>;
        case ElemType::Q5_0:
            return dequant_row<Q50>;
        case ElemType::Q5_1:
            return dequant_row<Q51>;
        case ElemType::IQ4_NL:
            return dequant_row<IQ4NL>;
        case ElemType::IQ4_XS:
            return dequant_row<IQ4XS>;
        default:
            return nullptr;
    }
}

void add_fused_avx512(TypeKernels * table) {
    set(table, ElemType::Q4_K, vec_dot<Q4K>, dot_tile<Q4K>);
    set(table, ElemType::Q5_K, vec_dot<Q5K>, dot_tile<Q5K>);
    set(table, ElemType::Q6_K, vec_dot<Q6K>, dot_tile<Q6K>);
    set(table, ElemType::Q2_K, vec_dot<Q2K>, dot_tile<Q2K>);
    set(table, ElemType::Q3_K, vec_dot<Q3K>, dot_tile<Q3K>);
    set(table, ElemType::Q4_0, vec_dot<Q40>, dot_tile<Q40>);
    set(table, ElemType::Q4_1, vec_dot<Q41>, dot_tile<Q41>);
    set(table, ElemType::Q5_0, vec_dot<Q50>, dot_tile<Q50>);
    set(table, ElemType::Q5_1, vec_dot<Q51>, dot_tile<Q51>);
    set(table, ElemType::IQ4_NL, vec_dot<IQ4NL>, dot_tile<IQ4NL>);
    set(table, ElemType::IQ4_XS, vec_dot<IQ4XS>, dot_tile<IQ4XS>);
}

#else

RowDequant dequantizer_avx512(tensor::ElemType) { return nullptr; }
void add_fused_avx512(TypeKernels *) {}

#endif

}  // namespace offgrid::ops::cpu::quant
