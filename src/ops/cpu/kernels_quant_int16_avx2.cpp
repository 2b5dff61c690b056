// AVX2 int16 kernels: each group of 32 weights is widened to two vectors of 16 int16 (elements 0..15 and
// 16..31 of the group) and multiplied by their per-16 scales, then dotted with every token's Q16_K quants by
// vpmaddwd: lane l of the sum holds the elements with (i mod 16) / 2 == l, the contract's lanes
// (kernels_quant_int16.h), so the bits equal the Scalar twin's. A tile decodes each weight block once for all
// its tokens.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "ops/cpu/kernels_quant_int16_decode.h"
#endif

#include "ops/cpu/kernels_quant_int16.h"

#include <type_traits>

namespace offgrid::ops::cpu::quant {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

namespace {

OFFGRID_I16_INLINE __m256i load_q(const int16_t * p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }

// f(0) .. f(N - 1): unrolled for one token; for several, one at a time (unrolled, their products keep more vectors
// live than there are registers, and GCC computes them all first and spills them to the stack).
template <int NT, int N, class F>
OFFGRID_I16_INLINE void each_group(F && f) {
    if constexpr (NT == 1) {
        #pragma GCC unroll 8
        for (int g = 0; g < N; ++g) f(g);
    } else {
        #pragma GCC unroll 1
        for (int g = 0; g < N; ++g) f(g);
    }
}

// A row is one stream: each block's lines are fetched 1 KiB ahead into L1 and 16 KiB ahead into L2 (the hardware
// prefetchers alone leave a decode step further from the bus; measurements in docs/kernels.md).
// The 8-bit rows' distances (kernels_quant_int8_avx2.cpp).
constexpr size_t kAheadL1Bytes = 1024, kAheadL2Bytes = 16384;
template <size_t Bytes>
OFFGRID_I16_INLINE void fetch_ahead(const void * block) {
    const char * p = static_cast<const char *>(block);
    for (size_t off = 0; off < Bytes; off += 64) {
        _mm_prefetch(p + kAheadL1Bytes + off, _MM_HINT_T0);
        _mm_prefetch(p + kAheadL2Bytes + off, _MM_HINT_T1);
    }
}

template <class T, int NT>
inline void dot_row_k(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const typename T::Block *>(wrow);
    __m256 acc[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        fetch_ahead<sizeof(typename T::Block)>(&w[b]);
        KDecoded k;
        T::decode(w[b], k);
        alignas(32) int16_t sc[16];
        _mm256_store_si256(reinterpret_cast<__m256i *>(sc), k.sc16);
        __m256i p[NT];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) p[t] = _mm256_setzero_si256();
        auto group = [&](int g) __attribute__((always_inline)) {
            const __m256i lo = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(k.g[g])),
                                                  _mm256_set1_epi16(sc[2 * g]));
            const __m256i hi = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(k.g[g], 1)),
                                                  _mm256_set1_epi16(sc[2 * g + 1]));
            #pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const int16_t * q = act[t][b].qs + 32 * g;
                p[t] = _mm256_add_epi32(p[t], _mm256_add_epi32(_mm256_madd_epi16(lo, load_q(q)),
                                                               _mm256_madd_epi16(hi, load_q(q + 16))));
            }
        };
        each_group<NT, 8>(group);
        __m256 wm_lo = _mm256_setzero_ps(), wm_hi = _mm256_setzero_ps();
        if constexpr (T::kMins != Mins::None) {
            const __m256 dm = _mm256_set1_ps(k.dmin);
            wm_lo = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(k.mins)));
            if constexpr (T::kMins == Mins::Per16) {
                wm_hi = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(k.mins, 8))));
            }
        }
        const __m256 kd = _mm256_set1_ps(k.d);
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const BlockQ16_K & a = act[t][b];
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p[t]), _mm256_mul_ps(kd, _mm256_broadcast_ss(&a.d)), acc[t]);
            if constexpr (T::kMins == Mins::Per32) acc[t] = _mm256_fnmadd_ps(wm_lo, _mm256_loadu_ps(a.dsum32), acc[t]);
            if constexpr (T::kMins == Mins::Per16) {
                acc[t] = _mm256_fnmadd_ps(wm_lo, _mm256_loadu_ps(a.dsum16), acc[t]);
                acc[t] = _mm256_fnmadd_ps(wm_hi, _mm256_loadu_ps(a.dsum16 + 8), acc[t]);
            }
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce8(acc[t]);
}

// q4_K without cross-lane widening (docs/kernels.md, "AVX2 rows of q4_K and q6_K"). A chunk of 32 bytes holds
// groups 2c (low nibbles) and 2c + 1 (high). With its quarters reordered (vpermq 0, 2, 1, 3), unpacking it with
// zero bytes, in-lane, gives elements 0..15 (unpacklo) and 16..31 (unpackhi) of both groups as int16 in element
// order, each group one `and` or one shift away, so vpmaddwd's lanes are the contract's. One vpshufb of the
// scale bytes broadcasts a group's scale.
template <int NT>
inline void dot_row_q4k(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const BlockQ4_K *>(wrow);
    const __m256i m15 = _mm256_set1_epi16(15), zero = _mm256_setzero_si256();
    __m256 acc[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const BlockQ4_K & blk = w[b];
        fetch_ahead<sizeof(BlockQ4_K)>(&blk);
        uint64_t sc, mn;
        k4_scales_mins_u64(blk.scales, sc, mn);
        const __m256i scb = _mm256_set1_epi64x(static_cast<long long>(sc));
        __m256i x[NT];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) x[t] = _mm256_setzero_si256();
        auto chunk = [&](int c) __attribute__((always_inline)) {
            const __m256i v = _mm256_permute4x64_epi64(load256(blk.qs + 32 * c), 0xd8);
            const __m256i ulo = _mm256_unpacklo_epi8(v, zero), uhi = _mm256_unpackhi_epi8(v, zero);
            const __m256i s0 = _mm256_shuffle_epi8(scb, _mm256_set1_epi16(static_cast<short>(0x8000 | (2 * c))));
            const __m256i s1 = _mm256_shuffle_epi8(scb, _mm256_set1_epi16(static_cast<short>(0x8000 | (2 * c + 1))));
            const __m256i la = _mm256_mullo_epi16(_mm256_and_si256(ulo, m15), s0);
            const __m256i lb = _mm256_mullo_epi16(_mm256_and_si256(uhi, m15), s0);
            const __m256i ha = _mm256_mullo_epi16(_mm256_srli_epi16(ulo, 4), s1);
            const __m256i hb = _mm256_mullo_epi16(_mm256_srli_epi16(uhi, 4), s1);
            #pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const int16_t * q = act[t][b].qs + 64 * c;
                const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(la, load_q(q)), _mm256_madd_epi16(lb, load_q(q + 16)));
                const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(ha, load_q(q + 32)), _mm256_madd_epi16(hb, load_q(q + 48)));
                x[t] = _mm256_add_epi32(x[t], _mm256_add_epi32(lo, hi));
            }
        };
        each_group<NT, 4>(chunk);
        const __m256 dm = _mm256_set1_ps(_cvtsh_ss(blk.dmin));
        const __m256 wm = _mm256_mul_ps(dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mn)))));
        const __m256 kd = _mm256_set1_ps(_cvtsh_ss(blk.d));
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const BlockQ16_K & a = act[t][b];
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x[t]), _mm256_mul_ps(kd, _mm256_broadcast_ss(&a.d)), acc[t]);
            acc[t] = _mm256_fnmadd_ps(wm, _mm256_loadu_ps(a.dsum32), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce8(acc[t]);
}

// The types with a scale per 16 elements, q6_K and q3_K, in the same way: their packed bytes reordered once (0, 2,
// 1, 3: byte-wise decoding commutes with it), a group's unsigned values unpack with zero to its elements 0..15 and
// 16..31 as int16, less the type's offset; one vpshufb of the half's scales (as words in both lanes) broadcasts
// each 16-half's scale. S::groups gives half h's four groups, S::scales the 16 signed scales, S::kOffset the
// offset: q6_K's 6-bit values less 32; q3_K's 3-bit values (low bits, plus 4 where the high bit is set) less 4,
// which is the decoder's low - 4 * !high in the same lanes (the generic row widened across lanes and took a third
// of a Q3_K_M decode step).
struct S16Q6K {
    using Block = BlockQ6_K;
    static constexpr short kOffset = 32;
    OFFGRID_I16_INLINE static __m128i scales(const Block & b) { return load128(b.scales); }
    OFFGRID_I16_INLINE static void groups(const Block & b, int h, __m256i u[4]) {
        const __m256i m30 = _mm256_set1_epi8(0x30);
        const __m256i a = _mm256_permute4x64_epi64(load256(b.ql + 64 * h), 0xd8);
        const __m256i c = _mm256_permute4x64_epi64(load256(b.ql + 64 * h + 32), 0xd8);
        const __m256i hb = _mm256_permute4x64_epi64(load256(b.qh + 32 * h), 0xd8);
        u[0] = _mm256_or_si256(nibbles_lo(a), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
        u[1] = _mm256_or_si256(nibbles_lo(c), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
        u[2] = _mm256_or_si256(nibbles_hi(a), _mm256_and_si256(hb, m30));
        u[3] = _mm256_or_si256(nibbles_hi(c), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
    }
};
struct S16Q3K {
    using Block = BlockQ3_K;
    static constexpr short kOffset = 4;
    OFFGRID_I16_INLINE static __m128i scales(const Block & b) { return q3_k_scales(b.scales); }
    OFFGRID_I16_INLINE static void groups(const Block & b, int h, __m256i u[4]) {
        const __m256i three = _mm256_set1_epi8(3);
        const __m256i q = _mm256_permute4x64_epi64(load256(b.qs + 32 * h), 0xd8);
        const __m256i hm = _mm256_permute4x64_epi64(load256(b.hmask), 0xd8);
        for (int j = 0; j < 4; ++j) {
            u[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), three), bit_as(hm, 4 * h + j, 2));
        }
    }
};

template <class S, int NT>
inline void dot_row_s16(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const typename S::Block *>(wrow);
    const __m256i zero = _mm256_setzero_si256(), off = _mm256_set1_epi16(S::kOffset);
    __m256 acc[NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        const typename S::Block & blk = w[b];
        fetch_ahead<sizeof(typename S::Block)>(&blk);
        const __m256i sc = _mm256_cvtepi8_epi16(S::scales(blk));
        const __m256i sch[2] = {_mm256_permute2x128_si256(sc, sc, 0x00), _mm256_permute2x128_si256(sc, sc, 0x11)};
        __m256i x[NT];
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) x[t] = _mm256_setzero_si256();
        #pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            __m256i u[4];
            S::groups(blk, h, u);
            auto group = [&](int j) __attribute__((always_inline)) {
                const __m256i lo = _mm256_sub_epi16(_mm256_unpacklo_epi8(u[j], zero), off);
                const __m256i hi = _mm256_sub_epi16(_mm256_unpackhi_epi8(u[j], zero), off);
                const __m256i s_lo = _mm256_shuffle_epi8(sch[h], _mm256_set1_epi16(static_cast<short>((4 * j) | ((4 * j + 1) << 8))));
                const __m256i s_hi = _mm256_shuffle_epi8(sch[h], _mm256_set1_epi16(static_cast<short>((4 * j + 2) | ((4 * j + 3) << 8))));
                const __m256i wl = _mm256_mullo_epi16(lo, s_lo), wh = _mm256_mullo_epi16(hi, s_hi);
                #pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    const int16_t * q = act[t][b].qs + 32 * (4 * h + j);
                    x[t] = _mm256_add_epi32(x[t], _mm256_add_epi32(_mm256_madd_epi16(wl, load_q(q)), _mm256_madd_epi16(wh, load_q(q + 16))));
                }
            };
            each_group<NT, 4>(group);
        }
        const __m256 kd = _mm256_set1_ps(_cvtsh_ss(blk.d));
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x[t]), _mm256_mul_ps(kd, _mm256_broadcast_ss(&act[t][b].d)), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) out[t] = reduce8(acc[t]);
}

template <class T, int NT>
inline void dot_row_32(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    const auto * w = static_cast<const typename T::Block *>(wrow);
    __m256 acc[2][NT];
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    auto block = [&](int64_t b, __m256 * ac) {
        const __m256i v = T::values(w[b]);
        const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
        const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
        const float dw = _cvtsh_ss(w[b].d);
        __m256 mw = _mm256_setzero_ps();  // q4_1 / q5_1: (m_w, 0, ..., 0), the contract's minimum term
        if constexpr (requires { T::kMin; }) mw = _mm256_setr_ps(_cvtsh_ss(w[b].m), 0, 0, 0, 0, 0, 0, 0);
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const BlockQ16_K & a = act[t][b / 8];
            const int16_t * q = a.qs + 32 * (b % 8);
            const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(lo, load_q(q)), _mm256_madd_epi16(hi, load_q(q + 16)));
            ac[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * a.d), ac[t]);
            if constexpr (requires { T::kMin; }) ac[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.dsum32[b % 8]), ac[t]);
        }
    };
    const int64_t nb = n / kQK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        fetch_ahead<64>(&w[b]);  // a pair of blocks is 44 (q5_0) to 68 (Q8_0) bytes: a line a pair, and one behind
        block(b, acc[0]);
        block(b + 1, acc[1]);
    }
    if (b < nb) block(b, acc[0]);
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) out[t] = reduce8(_mm256_add_ps(acc[0][t], acc[1][t]));
}

template <class T, bool K, int NT>
inline void dot_row_n(const void * wrow, const BlockQ16_K * const * act, int64_t n, float * out) {
    if constexpr (std::is_same_v<T, DQ4K>) {
        dot_row_q4k<NT>(wrow, act, n, out);
    } else if constexpr (std::is_same_v<T, DQ6K>) {
        dot_row_s16<S16Q6K, NT>(wrow, act, n, out);
    } else if constexpr (std::is_same_v<T, DQ3K>) {
        dot_row_s16<S16Q3K, NT>(wrow, act, n, out);
    } else if constexpr (K) {
        dot_row_k<T, NT>(wrow, act, n, out);
    } else {
        dot_row_32<T, NT>(wrow, act, n, out);
    }
}

template <class T, bool K>
inline void dot_row(const void * wrow, const BlockQ16_K * const * act, int64_t n, int nt, float * out) {
    switch (nt) {
        case 1: return dot_row_n<T, K, 1>(wrow, act, n, out);
        case 2: return dot_row_n<T, K, 2>(wrow, act, n, out);
        case 3: return dot_row_n<T, K, 3>(wrow, act, n, out);
        default: return dot_row_n<T, K, 4>(wrow, act, n, out);
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
        float out[kTileMax];
        dot_row<T, K>(static_cast<const uint8_t *>(w) + r * w_stride, a, n, n_tok, out);
        for (int t = 0; t < n_tok; ++t) y[t * y_stride + r] = out[t];
    }
}

// The Q16_K quantiser (the same bytes as the Scalar twin: see kernels_quant_int16.h).
void quantize_q16_k_blocks(const float * x, BlockQ16_K * y, int64_t nb);

void quantize_q16_k(const float * x, void * dst, int64_t n) {
    auto * y = static_cast<BlockQ16_K *>(dst);
    quantize_q16_k_blocks(x, y, n / kQK_K);
    if (n % kQK_K != 0) {  // the last, partial block: zero-padded
        alignas(64) float tail[kQK_K] = {};
        std::memcpy(tail, x + n / kQK_K * kQK_K, sizeof(float) * static_cast<size_t>(n % kQK_K));
        quantize_q16_k_blocks(tail, y + n / kQK_K, 1);
    }
}

void quantize_q16_k_blocks(const float * x, BlockQ16_K * y, int64_t nb) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
        BlockQ16_K & o = y[b];
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < kQK_K; j += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        std::memset(&o, 0, sizeof o);
        if (amax == 0.0f) continue;
        const __m256 id = _mm256_set1_ps(16383.0f / amax);
        const __m256i lo = _mm256_set1_epi32(-16383), hi = _mm256_set1_epi32(16383);
        int32_t s16[16];
        for (int g = 0; g < 16; ++g) {
            const __m256i q0 = _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * g), id))));
            const __m256i q1 = _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * g + 8), id))));
            // packs works per 128-bit lane: [q0 lo, q1 lo, q0 hi, q1 hi] -> reorder the 64-bit quarters.
            const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xd8);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(o.qs + 16 * g), p);
            __m256i s = _mm256_add_epi32(q0, q1);
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            s16[g] = _mm_cvtsi128_si32(s4);
        }
        o.d = amax / 16383.0f;
        for (int g = 0; g < 16; ++g) o.dsum16[g] = o.d * static_cast<float>(s16[g]);
        for (int g = 0; g < 8; ++g) o.dsum32[g] = o.d * static_cast<float>(s16[2 * g] + s16[2 * g + 1]);
    }
}

template <class T, bool K>
void set(TypeKernels * table, ElemType type) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.act_type = ElemType::Q16_K;
    k.quantize_act = quantize_q16_k;
    k.vec_dot = vec_dot<T, K>;
    k.dot_tile = dot_tile<T, K>;
}

}  // namespace

void add_int16_entries_avx2(TypeKernels * table) {
    set<DQ4K, true>(table, ElemType::Q4_K);
    set<DQ5K, true>(table, ElemType::Q5_K);
    set<DQ6K, true>(table, ElemType::Q6_K);
    set<DQ3K, true>(table, ElemType::Q3_K);
    set<DQ2K, true>(table, ElemType::Q2_K);
    set<DIQ4XS, true>(table, ElemType::IQ4_XS);
    set<DQ80, false>(table, ElemType::Q8_0);
    set<DQ40, false>(table, ElemType::Q4_0);
    set<DQ50, false>(table, ElemType::Q5_0);
    set<DQ41, false>(table, ElemType::Q4_1);
    set<DQ51, false>(table, ElemType::Q5_1);
    set<DIQ4NL, false>(table, ElemType::IQ4_NL);
}

#else

void add_int16_entries_avx2(TypeKernels *) {}

#endif

}  // namespace offgrid::ops::cpu::quant
