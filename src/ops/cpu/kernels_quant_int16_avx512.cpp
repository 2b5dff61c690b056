// AVX-512 (VNNI) int16 kernels: each group of 32 weights is widened once to int16 and multiplied by its
// per-16 scales (vpmullw), then dotted with every token's Q16_K quants by vpmaddwd / vpdpwssd (32 products
// per instruction). The 16 int32 lanes of a super-block are folded to the contract's 8 (lanes l and l + 8
// hold the elements with (i mod 16) / 2 == l) before the float step, so the bits equal the Scalar twin's
// (kernels_quant_int16.h). A tile decodes each weight block once for all its tokens.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "ops/cpu/kernels_quant_int16_decode.h"
#endif

#include "ops/cpu/kernels_quant_int16.h"

namespace offgrid::ops::cpu::quant {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

namespace {

OFFGRID_I16_INLINE __m512i load512(const void * p) { return _mm512_loadu_si512(p); }

// How far ahead a one-row stream prefetches. Decode of the scale Q4_K_M file, 2 threads (Xeon, AMX class): 2-3 KiB
// 3-5 % faster than 1 KiB, 4-6 KiB slower; on the EPYC's 1 x n tile probe 1 KiB was 4-26 % faster than none and 2 KiB
// no better.
constexpr size_t kPrefetchBytes = 2048;
OFFGRID_I16_INLINE __m256i fold16(__m512i p) { return _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1)); }

OFFGRID_I16_INLINE __m512i group_scale(__m512i sv, int g) {
    const __m512i halves = _mm512_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0,
                                            0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(halves, _mm512_set1_epi16(static_cast<short>(2 * g))), sv);
}

// A decoded block for the dot: the 8 groups as scaled int16 (value * scale of its 16-half), the scales and
// the min multipliers. Generic: from the shared byte decoders; q4_K, q5_K and q6_K widen their packed bytes to
// int16 first and split the bit fields there (fewer instructions; the same integers).
struct Wide {
    __m512i wz[8];
    __m128i mins;
    float d, dmin;
};

template <class T>
OFFGRID_I16_INLINE void decode_wide(const typename T::Block & blk, Wide & o) {
    KDecoded k;
    T::decode(blk, k);
    const __m512i sv = _mm512_castsi256_si512(k.sc16);
    #pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) o.wz[g] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(k.g[g]), group_scale(sv, g));
    o.mins = k.mins;
    o.d = k.d;
    o.dmin = k.dmin;
}

// A dword broadcast from memory is a load alone; written in assembly, since the compiler otherwise forwards
// the stored value and broadcasts it from a register on the shuffle port.
OFFGRID_I16_INLINE __m512i broadcast_from_memory(const uint32_t * p) {
    __m512i v;
    __asm__("vpbroadcastd %1, %0" : "=v"(v) : "m"(*p));
    return v;
}

OFFGRID_I16_INLINE __m512i widen_bytes(const uint8_t * p) { return _mm512_cvtepu8_epi16(load256(p)); }

template <bool Fifth>
OFFGRID_I16_INLINE void decode_wide_k4(const uint8_t * scales, const uint8_t * qs, const uint8_t * qh, Wide & o) {
    uint64_t sc, mn;
    k4_scales_mins_u64(scales, sc, mn);
    // Each group's scale as a dword of two equal int16, stored once and read back by broadcast loads (load ports
    // only; a word permutation per group would take the shuffle port that the widening already keeps busy).
    alignas(32) uint32_t sd[8];
    {
        const __m256i s32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc)));
        _mm256_store_si256(reinterpret_cast<__m256i *>(sd), _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16)));
    }
    o.mins = _mm_cvtsi64_si128(static_cast<long long>(mn));
    const __m512i low4 = _mm512_set1_epi16(0x0f);
    __m512i h = _mm512_setzero_si512();
    if constexpr (Fifth) h = widen_bytes(qh);
    #pragma GCC unroll 8
    for (int c = 0; c < 4; ++c) {
        const __m512i v = widen_bytes(qs + 32 * c);  // each int16 one byte: low nibble, high nibble
        __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_srli_epi16(v, 4);
        if constexpr (Fifth) {
            const __m512i b16 = _mm512_set1_epi16(16);
            // bit 2c (2c + 1) of qh[l] as 16: shifted to bit 4 (h holds one byte per int16)
            auto bit16 = [&](int k) {
                return _mm512_and_si512(k <= 4 ? _mm512_slli_epi16(h, static_cast<unsigned>(4 - k))
                                               : _mm512_srli_epi16(h, static_cast<unsigned>(k - 4)),
                                        b16);
            };
            lo = _mm512_or_si512(lo, bit16(2 * c));
            hi = _mm512_or_si512(hi, bit16(2 * c + 1));
        }
        o.wz[2 * c] = _mm512_mullo_epi16(lo, broadcast_from_memory(&sd[2 * c]));
        o.wz[2 * c + 1] = _mm512_mullo_epi16(hi, broadcast_from_memory(&sd[2 * c + 1]));
    }
}

template <>
OFFGRID_I16_INLINE void decode_wide<DQ4K>(const BlockQ4_K & b, Wide & o) {
    decode_wide_k4<false>(b.scales, b.qs, nullptr, o);
    o.d = _cvtsh_ss(b.d);
    o.dmin = _cvtsh_ss(b.dmin);
}
template <>
OFFGRID_I16_INLINE void decode_wide<DQ5K>(const BlockQ5_K & b, Wide & o) {
    decode_wide_k4<true>(b.scales, b.qs, b.qh, o);
    o.d = _cvtsh_ss(b.d);
    o.dmin = _cvtsh_ss(b.dmin);
}
template <>
OFFGRID_I16_INLINE void decode_wide<DQ6K>(const BlockQ6_K & b, Wide & o) {
    const __m512i sv = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(load128(b.scales)));
    const __m512i low4 = _mm512_set1_epi16(0x0f), m30 = _mm512_set1_epi16(0x30), b32 = _mm512_set1_epi16(32);
    for (int h = 0; h < 2; ++h) {
        const __m512i a = widen_bytes(b.ql + 64 * h), c = widen_bytes(b.ql + 64 * h + 32), hb = widen_bytes(b.qh + 32 * h);
        const __m512i q0 = _mm512_or_si512(_mm512_and_si512(a, low4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
        const __m512i q1 = _mm512_or_si512(_mm512_and_si512(c, low4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
        const __m512i q2 = _mm512_or_si512(_mm512_srli_epi16(a, 4), _mm512_and_si512(hb, m30));
        const __m512i q3 = _mm512_or_si512(_mm512_srli_epi16(c, 4), _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
        o.wz[4 * h + 0] = _mm512_mullo_epi16(_mm512_sub_epi16(q0, b32), group_scale(sv, 4 * h + 0));
        o.wz[4 * h + 1] = _mm512_mullo_epi16(_mm512_sub_epi16(q1, b32), group_scale(sv, 4 * h + 1));
        o.wz[4 * h + 2] = _mm512_mullo_epi16(_mm512_sub_epi16(q2, b32), group_scale(sv, 4 * h + 2));
        o.wz[4 * h + 3] = _mm512_mullo_epi16(_mm512_sub_epi16(q3, b32), group_scale(sv, 4 * h + 3));
    }
    o.mins = _mm_setzero_si128();
    o.d = _cvtsh_ss(b.d);
    o.dmin = 0;
}

// NR weight rows (stride ws) against NT token rows (stride as): y[t * ys + r]. Each (row, token) pair gets
// exactly the operations of vec_dot (the 1 x 1 case), in the same order; interleaving the rows per super-block
// only lets their independent chains overlap. The token rows are addressed from one base and a stride (not
// a pointer per token), so the loop needs one address register for all of them.
template <class T, int NR, int NT>
inline void dot_rows_k(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y,
                       size_t ys) {
    __m256 acc[NR][NT];
    #pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < n / kQK_K; ++b) {
        #pragma GCC unroll 8
        for (int r = 0; r < NR; ++r) {
            const auto & blk = reinterpret_cast<const typename T::Block *>(w + r * ws)[b];
            if constexpr (NR == 1) {
                // One row streams from DRAM (decode, few-token products): ask for the stream a little ahead; the
                // rows of a matrix are contiguous, so this runs on into the next row. Never faults, no arithmetic.
                const char * ahead = reinterpret_cast<const char *>(&blk) + kPrefetchBytes;
                #pragma GCC unroll 4
                for (size_t off = 0; off < sizeof(blk); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
            }
            Wide k;
            decode_wide<T>(blk, k);
            const __m512i * wz = k.wz;
            // Min multipliers dmin_w * m[l] (and m[l + 8] for q2_K), once per block for every token.
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
                const BlockQ16_K & a = reinterpret_cast<const BlockQ16_K *>(act + t * as)[b];
                __m512i p0 = _mm512_madd_epi16(wz[0], load512(a.qs));
                __m512i p1 = _mm512_madd_epi16(wz[1], load512(a.qs + 32));
                p0 = _mm512_dpwssd_epi32(p0, wz[2], load512(a.qs + 64));
                p1 = _mm512_dpwssd_epi32(p1, wz[3], load512(a.qs + 96));
                p0 = _mm512_dpwssd_epi32(p0, wz[4], load512(a.qs + 128));
                p1 = _mm512_dpwssd_epi32(p1, wz[5], load512(a.qs + 160));
                p0 = _mm512_dpwssd_epi32(p0, wz[6], load512(a.qs + 192));
                p1 = _mm512_dpwssd_epi32(p1, wz[7], load512(a.qs + 224));
                const __m256i p = fold16(_mm512_add_epi32(p0, p1));
                __m256 ac = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(kd, _mm256_broadcast_ss(&a.d)), acc[r][t]);
                if constexpr (T::kMins == Mins::Per32) ac = _mm256_fnmadd_ps(wm_lo, _mm256_loadu_ps(a.dsum32), ac);
                if constexpr (T::kMins == Mins::Per16) {
                    ac = _mm256_fnmadd_ps(wm_lo, _mm256_loadu_ps(a.dsum16), ac);
                    ac = _mm256_fnmadd_ps(wm_hi, _mm256_loadu_ps(a.dsum16 + 8), ac);
                }
                acc[r][t] = ac;
            }
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) y[t * ys + r] = reduce8(acc[r][t]);
    }
}

// Blocks of 32 in pairs: block b's 8 contract lanes in lanes 0-7 of one register, block b + 1's in lanes 8-15,
// so the contract's even and odd accumulators are the two halves of one 16-lane accumulator (one conversion
// and one fused multiply-add per pair and token).
template <class T, int NR, int NT>
inline void dot_rows_32(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y,
                        size_t ys) {
    __m512 acc[NR][NT];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
    }
    const int64_t nb = n / kQK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 8
        for (int r = 0; r < NR; ++r) {
            const auto * blk = reinterpret_cast<const typename T::Block *>(w + r * ws) + b;
            if constexpr (NR == 1) {
                // As dot_rows_k: one row streams, fetched a little ahead (a pair is at most 68 bytes, so two
                // lines cover it).
                const char * ahead = reinterpret_cast<const char *>(blk) + kPrefetchBytes;
                _mm_prefetch(ahead, _MM_HINT_T0);
                _mm_prefetch(ahead + 64, _MM_HINT_T0);
            }
            const __m512i w0 = _mm512_cvtepi8_epi16(T::values(blk[0]));
            const __m512i w1 = _mm512_cvtepi8_epi16(T::values(blk[1]));
            // [d0 x8 | d1 x8]: both halves converted at once, then spread by one permutation.
            const uint32_t d01 = static_cast<uint32_t>(blk[0].d) | (static_cast<uint32_t>(blk[1].d) << 16);
            const __m512 dw = _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                                    _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(d01)))));
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const BlockQ16_K & a = reinterpret_cast<const BlockQ16_K *>(act + t * as)[b / 8];  // b even: b and b + 1 share the activation block
                const __m512i p0 = _mm512_madd_epi16(w0, load512(a.qs + 32 * (b % 8)));
                const __m512i p1 = _mm512_madd_epi16(w1, load512(a.qs + 32 * (b % 8) + 32));
                // [p0 low + p0 high | p1 low + p1 high] as [p0 low | p1 high] + [p0 high | p1 low] (exact integers).
                const __m512i p = _mm512_add_epi32(_mm512_mask_blend_epi64(0xf0, p0, p1), _mm512_shuffle_i64x2(p0, p1, 0x4e));
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, _mm512_set1_ps(a.d)), acc[r][t]);
            }
        }
    }
    if (b < nb) {  // the last, even block: lanes 0-7 only
#pragma GCC unroll 8
        for (int r = 0; r < NR; ++r) {
            const auto & blk = reinterpret_cast<const typename T::Block *>(w + r * ws)[b];
            const __m512i wz = _mm512_cvtepi8_epi16(T::values(blk));
            const float dw = _cvtsh_ss(blk.d);
#pragma GCC unroll 8
            for (int t = 0; t < NT; ++t) {
                const BlockQ16_K & a = reinterpret_cast<const BlockQ16_K *>(act + t * as)[b / 8];
                const __m256i p = fold16(_mm512_madd_epi16(wz, load512(a.qs + 32 * (b % 8))));
                acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(_mm512_castsi256_si512(p)),
                                                  _mm512_set1_ps(dw * a.d), acc[r][t], 0x00ff);  // lanes 8-15 kept
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
            const __m512 v = acc[r][t];
            y[t * ys + r] = reduce8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
        }
    }
}

template <class T, bool K, int NR, int NT>
inline void dot_rows(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, float * y, size_t ys) {
    if constexpr (K) {
        dot_rows_k<T, NR, NT>(w, ws, act, as, n, y, ys);
    } else {
        dot_rows_32<T, NR, NT>(w, ws, act, as, n, y, ys);
    }
}

// One token (decode): row after row. Interleaving the 4 rows per super-block overlapped their chains from cache
// but cost ~1.5x in the model, where the rows stream from DRAM (4 strided streams prefetch worse than one).
// More tokens: all rows of the tile together, each weight block decoded once for every token. (With a pointer
// per token row instead of base + stride, GCC kept the activation vectors shared by the rows alive across them
// and spilled them to the stack: the 4 x 8 tile from cache ran at ~100 GFLOP/s for q4_K, against ~135 with base + stride;
// bench/probes/int16_tile.cpp compares the row groupings.)
template <class T, bool K, int NR>
inline void dot_rows_nt(const uint8_t * w, size_t ws, const uint8_t * act, size_t as, int64_t n, int nt, float * y,
                        size_t ys) {
    switch (nt) {
        case 1:
            for (int r = 0; r < NR; ++r) dot_rows<T, K, 1, 1>(w + r * ws, ws, act, as, n, y + r, ys);
            return;
        case 2: return dot_rows<T, K, NR, 2>(w, ws, act, as, n, y, ys);
        case 3: return dot_rows<T, K, NR, 3>(w, ws, act, as, n, y, ys);
        case 4: return dot_rows<T, K, NR, 4>(w, ws, act, as, n, y, ys);
        case 5: return dot_rows<T, K, NR, 5>(w, ws, act, as, n, y, ys);
        case 6: return dot_rows<T, K, NR, 6>(w, ws, act, as, n, y, ys);
        case 7: return dot_rows<T, K, NR, 7>(w, ws, act, as, n, y, ys);
        default: return dot_rows<T, K, NR, 8>(w, ws, act, as, n, y, ys);
    }
}

template <class T, bool K>
float vec_dot(const void * w, const void * x, int64_t n) {
    float out;
    dot_rows<T, K, 1, 1>(static_cast<const uint8_t *>(w), 0, static_cast<const uint8_t *>(x), 0, n, &out, 1);
    return out;
}

template <class T, bool K>
void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows, int n_tok,
              float * y, size_t y_stride) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    switch (n_rows) {
        case 1: return dot_rows_nt<T, K, 1>(wb, w_stride, ab, act_stride, n, n_tok, y, y_stride);
        case 2: return dot_rows_nt<T, K, 2>(wb, w_stride, ab, act_stride, n, n_tok, y, y_stride);
        case 3: return dot_rows_nt<T, K, 3>(wb, w_stride, ab, act_stride, n, n_tok, y, y_stride);
        default: return dot_rows_nt<T, K, 4>(wb, w_stride, ab, act_stride, n, n_tok, y, y_stride);
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

// The 16 sums of 16 int32 vectors, sums[g] = sum of q[g]'s lanes, in one vector (exact integer adds in a
// transpose tree: 45 instructions instead of 16 horizontal reductions of ~8 each).
OFFGRID_I16_INLINE __m512i lane_sums16(const __m512i * q) {
    __m512i v[8], u[4];
    for (int k = 0; k < 8; ++k) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
        v[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(q[2 * k], q[2 * k + 1]), _mm512_unpackhi_epi32(q[2 * k], q[2 * k + 1]));
    }
    for (int m = 0; m < 4; ++m) {  // per 128-bit lane: the partial sums of q[4m] .. q[4m + 3]
        u[m] = _mm512_add_epi32(_mm512_unpacklo_epi64(v[2 * m], v[2 * m + 1]), _mm512_unpackhi_epi64(v[2 * m], v[2 * m + 1]));
    }
    // Then across the four 128-bit lanes: 0x88 picks lanes 0 and 2 of each source, 0xdd lanes 1 and 3.
    const __m512i x0 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xdd));
    const __m512i x1 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88), _mm512_shuffle_i32x4(u[2], u[3], 0xdd));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(x0, x1, 0x88), _mm512_shuffle_i32x4(x0, x1, 0xdd));
}

void quantize_q16_k_blocks(const float * x, BlockQ16_K * y, int64_t nb) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < nb; ++b, x += kQK_K) {
        BlockQ16_K & o = y[b];
        __m512 mx = _mm512_setzero_ps();
        for (int j = 0; j < kQK_K; j += 16) mx = _mm512_max_ps(mx, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)));
        const float amax = _mm512_reduce_max_ps(mx);
        if (amax == 0.0f) {
            std::memset(&o, 0, sizeof o);
            continue;
        }
        std::memset(o.pad, 0, sizeof o.pad);
        const __m512 id = _mm512_set1_ps(16383.0f / amax);
        const __m512i lo = _mm512_set1_epi32(-16383), hi = _mm512_set1_epi32(16383);
        __m512i q[16];
        for (int g = 0; g < 16; ++g) {
            q[g] = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), id))));
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(o.qs + 16 * g), _mm512_cvtepi32_epi16(q[g]));
        }
        o.d = amax / 16383.0f;
        const __m512i s16 = lane_sums16(q);  // exact: |sum| <= 16 * 16383
        const __m512 d = _mm512_set1_ps(o.d);
        _mm512_storeu_ps(o.dsum16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(s16)));
        // Pairs: the low half of each 64-bit lane plus its high half.
        const __m256i s32 = _mm512_cvtepi64_epi32(_mm512_add_epi32(s16, _mm512_srli_epi64(s16, 32)));
        _mm256_storeu_ps(o.dsum32, _mm256_mul_ps(_mm512_castps512_ps256(d), _mm256_cvtepi32_ps(s32)));
    }
}

template <class T, bool K>
void set(TypeKernels * table, ElemType type) {
    TypeKernels & k = table[static_cast<uint32_t>(type)];
    k.act_type = ElemType::Q16_K;
    k.quantize_act = quantize_q16_k;
    k.vec_dot = vec_dot<T, K>;
    k.dot_tile = dot_tile<T, K>;
    k.tile_tokens = kTileTokensMax;
}

}  // namespace

void add_int16_entries_avx512(TypeKernels * table) {
    set<DQ4K, true>(table, ElemType::Q4_K);
    set<DQ5K, true>(table, ElemType::Q5_K);
    set<DQ6K, true>(table, ElemType::Q6_K);
    set<DQ3K, true>(table, ElemType::Q3_K);
    set<DQ2K, true>(table, ElemType::Q2_K);
    set<DIQ4XS, true>(table, ElemType::IQ4_XS);
    set<DQ80, false>(table, ElemType::Q8_0);
    set<DQ40, false>(table, ElemType::Q4_0);
    set<DQ50, false>(table, ElemType::Q5_0);
    set<DIQ4NL, false>(table, ElemType::IQ4_NL);
}

#else

void add_int16_entries_avx512(TypeKernels *) {}

#endif

}  // namespace offgrid::ops::cpu::quant
