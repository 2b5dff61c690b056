// AVX2 + FMA + F16C float and Q8_0 kernels and the Q8_0 activation quantiser, compiled with the AVX2 flags and
// reached only through the dispatch when active_isa() allows it.
//
// Reduction order (the same in vec_dot and dot_tile, which makes the tile bit-identical):
//  - F32 / F16 / BF16: the row in blocks of 128 elements; per block a fresh 8-lane accumulator, lane j summing the
//    block's elements i = j (mod 8) in index order (the last partial vector zero-padded); the blocks' sums added
//    in order into an 8-lane total; then a fixed horizontal sum. One running accumulator over a whole row is
//    a rounding chain of n / 8 steps: with it the f16-weight GLM model came out 1.18e-4 from its double-precision
//    reference (scalar 6.3e-5, avx512 4.9e-5), over its test's 1e-4; with blocks 5.0e-5. With blocks a chain is at most
//    16 + n / 128 steps. Two interleaved accumulators would halve it too, but the 4-row x 2-token prompt tile
//    then needs 16 accumulators (it ran 25-35 % slower in bench_kernels); block totals are touched once per
//    block and may live in memory (blocks of 64 cost the tile 8-17 %, 128 nothing measurable).
//  - Q8_0 against f32 activations: like the float types (a block of 128 elements = four Q8_0 blocks), each weight
//    widened to d * q in registers (the same float product as dequantize_row), walked block by block.
//  - Q8_0 against Q8_0 activations (the int8 variant): only its quantiser is here; its products have the scalar
//    twin's fold (kernels_quant_int8_avx2.cpp).
#include <algorithm>
#include <cstring>

#include "ops/cpu/kernels_float.h"
#include "ops/cpu/kernels_quant_int8.h"
#include "ops/half.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define OFFGRID_KERNELS_AVX2 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_KERNELS_AVX2

namespace {

using tensor::ElemType;

constexpr int kLanes = 8;
constexpr int kQ8Block = 32;
constexpr size_t kQ8BlockBytes = 2 + kQ8Block;

inline float hsum(__m256 v) {
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Loaders of 8 weights starting at element i, as floats; `count` < 8 loads a zero-padded tail.
struct LoadF32 {
    static constexpr int kBytes = 4;
    static __m256 full(const void * w, int64_t i) { return _mm256_loadu_ps(static_cast<const float *>(w) + i); }
    static __m256 tail(const void * w, int64_t i, int count) {
        float buf[kLanes] = {};
        std::memcpy(buf, static_cast<const float *>(w) + i, sizeof(float) * count);
        return _mm256_loadu_ps(buf);
    }
};
struct LoadF16 {
    static constexpr int kBytes = 2;
    static __m256 full(const void * w, int64_t i) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(w) + i)));
    }
    static __m256 tail(const void * w, int64_t i, int count) {
        uint16_t buf[kLanes] = {};
        std::memcpy(buf, static_cast<const uint16_t *>(w) + i, 2 * count);
        return full(buf, 0);
    }
};
struct LoadBF16 {
    static constexpr int kBytes = 2;
    static __m256 full(const void * w, int64_t i) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(w) + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    static __m256 tail(const void * w, int64_t i, int count) {
        uint16_t buf[kLanes] = {};
        std::memcpy(buf, static_cast<const uint16_t *>(w) + i, 2 * count);
        return full(buf, 0);
    }
};

// A Q8_0 block's scale d (f16) as a float.
inline float q8_scale_of(const uint8_t * block) {
    uint16_t bits;
    std::memcpy(&bits, block, 2);
    return _cvtsh_ss(bits);
}

// Elements per block of the float kernels' summation (see the top of the file).
constexpr int64_t kSumBlock = 128;

template <typename L>
float vec_dot_float(const void * w, const void * xv, int64_t n) {
    const auto * x = static_cast<const float *>(xv);
    __m256 total = _mm256_setzero_ps();
    for (int64_t i = 0; i < n;) {
        const int64_t end = std::min(n, i + kSumBlock);
        __m256 acc = _mm256_setzero_ps();
        for (; i + kLanes <= end; i += kLanes) acc = _mm256_fmadd_ps(L::full(w, i), _mm256_loadu_ps(x + i), acc);
        if (i < end) {
            const int c = static_cast<int>(end - i);
            acc = _mm256_fmadd_ps(L::tail(w, i, c), LoadF32::tail(x, i, c), acc);
            i = end;
        }
        total = _mm256_add_ps(total, acc);
    }
    return hsum(total);
}

// Four weight rows by NT (<= 2) tokens: 8 accumulators, the weights loaded once per step for both tokens.
// Software prefetch in the one-token tiles (decode), which are memory-bound: rows are contiguous, so the tile two
// tiles ahead starts at w + 8 * w_stride; each loop step prefetches as many bytes of it as it reads of this tile
// (see kernels_float_avx512.cpp for the measurement). Not in the two-token tile, which prompts use (compute-bound).
constexpr int kPrefetchTiles = 2;
inline void prefetch_ahead(const uint8_t * w, size_t w_stride, size_t offset, size_t bytes) {
    const uint8_t * p = w + kPrefetchTiles * 4 * w_stride + offset;
    for (size_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char *>(p + b), _MM_HINT_T0);
}

// The same lines into L2 (prefetcht1): the first pass of a batched tile (see dot_tile_batched).
inline void prefetch_ahead_l2(const uint8_t * w, size_t w_stride, size_t offset, size_t bytes) {
    const uint8_t * p = w + kPrefetchTiles * 4 * w_stride + offset;
    for (size_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char *>(p + b), _MM_HINT_T1);
}

template <typename L, int NT, bool PrefetchL2 = false>
void tile4_float(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * y,
                 size_t y_stride) {
    const float * x[NT];
    for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float *>(act + t * act_stride);
    __m256 total[4][NT];
    for (int r = 0; r < 4; ++r)
        for (int t = 0; t < NT; ++t) total[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n;) {
        const int64_t end = std::min(n, i + kSumBlock);
        __m256 acc[4][NT];
        for (int r = 0; r < 4; ++r)
            for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
        for (; i + kLanes <= end; i += kLanes) {
            if constexpr (PrefetchL2) {
                prefetch_ahead_l2(w, w_stride, static_cast<size_t>(i) * 4 * L::kBytes, 4 * kLanes * L::kBytes);
            } else if constexpr (NT == 1) {
                prefetch_ahead(w, w_stride, static_cast<size_t>(i) * 4 * L::kBytes, 4 * kLanes * L::kBytes);
            }
            __m256 xv[NT];
            for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x[t] + i);
            for (int r = 0; r < 4; ++r) {
                const __m256 wv = L::full(w + r * w_stride, i);
                for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
            }
        }
        if (i < end) {
            const int c = static_cast<int>(end - i);
            for (int r = 0; r < 4; ++r) {
                const __m256 wv = L::tail(w + r * w_stride, i, c);
                for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, LoadF32::tail(x[t], i, c), acc[r][t]);
            }
            i = end;
        }
        for (int r = 0; r < 4; ++r)
            for (int t = 0; t < NT; ++t) total[r][t] = _mm256_add_ps(total[r][t], acc[r][t]);
    }
    for (int t = 0; t < NT; ++t)
        for (int r = 0; r < 4; ++r) y[t * y_stride + r] = hsum(total[r][t]);
}

// Full-height tiles of several tokens as passes of two tokens (and one for an odd count); other shapes call
// vec_dot, which the tile equals bit for bit anyway. That includes one token (decode): its four rows one after
// another are one sequential stream per thread, which the hardware prefetcher follows best (measured on the
// avx512 tile, see there).
template <float (*Dot)(const void *, const void *, int64_t),
          void (*Tile1)(const uint8_t *, size_t, const uint8_t *, size_t, int64_t, float *, size_t),
          void (*Tile2)(const uint8_t *, size_t, const uint8_t *, size_t, int64_t, float *, size_t)>
void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows, int n_tok,
              float * y, size_t y_stride) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    if (n_rows == 4 && n_tok > 1) {
        int t = 0;
        for (; t + 2 <= n_tok; t += 2) Tile2(wb, w_stride, ab + t * act_stride, act_stride, n, y + t * y_stride, y_stride);
        if (t < n_tok) Tile1(wb, w_stride, ab + t * act_stride, act_stride, n, y + t * y_stride, y_stride);
        return;
    }
    for (int t = 0; t < n_tok; ++t)
        for (int r = 0; r < n_rows; ++r) y[t * y_stride + r] = Dot(wb + r * w_stride, ab + t * act_stride, n);
}

// The float types' table tile: up to kTileTokens tokens a call (a decode step of several sequences hands a
// product all its tokens at once) as passes of two tokens (and one), so the tile's weights come from memory once
// and from L1/L2 for the later passes. The first pass prefetches the tile two ahead into L2, only on a tile's
// first visit: a prompt visits a tile once per group of tokens in a row and is compute-bound. One token: the
// rows in turn (vec_dot each). bench_float_tiles at OFFGRID_ISA=avx2 compares it with dot_tile.
constexpr int kTileTokens = 8;
static_assert(kTileTokens <= kTileTokensMax);

template <typename L>
void dot_tile_batched(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows,
                      int n_tok, float * y, size_t y_stride) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    if (n_rows == 4 && n_tok > 1) {
        thread_local const void * last_tile = nullptr;
        const bool first_visit = w != last_tile;
        last_tile = w;
        int t = 0;
        if (first_visit) {
            tile4_float<L, 2, true>(wb, w_stride, ab, act_stride, n, y, y_stride);
            t = 2;
        }
        for (; t + 2 <= n_tok; t += 2) tile4_float<L, 2>(wb, w_stride, ab + t * act_stride, act_stride, n, y + t * y_stride, y_stride);
        if (t < n_tok) tile4_float<L, 1>(wb, w_stride, ab + t * act_stride, act_stride, n, y + t * y_stride, y_stride);
        return;
    }
    for (int t = 0; t < n_tok; ++t)
        for (int r = 0; r < n_rows; ++r) y[t * y_stride + r] = vec_dot_float<L>(wb + r * w_stride, ab + t * act_stride, n);
}

// ---- Q8_0 x f32, block by block ----
// The order of the float types (summation blocks of kQ8PerSum Q8_0 blocks), walked one Q8_0 block at a time so
// each row's scale is converted once per block.

inline void q8_widen(const uint8_t * blk, __m256 (&wv)[4]) {
    const __m256 d = _mm256_set1_ps(q8_scale_of(blk));
    for (int k = 0; k < 4; ++k) {
        const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(blk + 2 + 8 * k));
        wv[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
}

// Q8_0 blocks per summation block (kSumBlock elements).
constexpr int64_t kQ8PerSum = kSumBlock / kQ8Block;

float vec_dot_q8_0_f32(const void * w, const void * xv, int64_t n) {
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * x = static_cast<const float *>(xv);
    const int64_t nb = n / kQ8Block;
    __m256 total = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb;) {
        const int64_t end = std::min(nb, b + kQ8PerSum);
        __m256 acc = _mm256_setzero_ps();
        for (; b < end; ++b) {
            __m256 wv[4];
            q8_widen(wb + b * kQ8BlockBytes, wv);
            for (int k = 0; k < 4; ++k) acc = _mm256_fmadd_ps(wv[k], _mm256_loadu_ps(x + b * kQ8Block + 8 * k), acc);
        }
        total = _mm256_add_ps(total, acc);
    }
    return hsum(total);
}

template <int NT>
void tile4_q8_0_f32(const uint8_t * w, size_t w_stride, const uint8_t * act, size_t act_stride, int64_t n, float * y,
                    size_t y_stride) {
    __m256 total[4][NT];
    for (int r = 0; r < 4; ++r)
        for (int t = 0; t < NT; ++t) total[r][t] = _mm256_setzero_ps();
    const float * x[NT];
    for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float *>(act + t * act_stride);
    const int64_t nb = n / kQ8Block;
    for (int64_t b = 0; b < nb;) {
        const int64_t end = std::min(nb, b + kQ8PerSum);
        __m256 acc[4][NT];
        for (int r = 0; r < 4; ++r)
            for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
        for (; b < end; ++b) {
            if constexpr (NT == 1) prefetch_ahead(w, w_stride, static_cast<size_t>(b) * 4 * kQ8BlockBytes, 4 * kQ8BlockBytes);
            for (int r = 0; r < 4; ++r) {
                __m256 wv[4];
                q8_widen(w + r * w_stride + b * kQ8BlockBytes, wv);
                for (int k = 0; k < 4; ++k) {
                    for (int t = 0; t < NT; ++t) {
                        acc[r][t] = _mm256_fmadd_ps(wv[k], _mm256_loadu_ps(x[t] + b * kQ8Block + 8 * k), acc[r][t]);
                    }
                }
            }
        }
        for (int r = 0; r < 4; ++r)
            for (int t = 0; t < NT; ++t) total[r][t] = _mm256_add_ps(total[r][t], acc[r][t]);
    }
    for (int t = 0; t < NT; ++t)
        for (int r = 0; r < 4; ++r) y[t * y_stride + r] = hsum(total[r][t]);
}

// ---- Q8_0's int8 variant: the activation quantiser (its products: kernels_quant_int8_avx2.cpp) ----

// Same bytes as the scalar quantiser: the same float operations, and cvtps rounds to nearest even.
void quantize_row_q8_0_avx2(const float * x, void * dst, int64_t n) {
    auto * out = static_cast<uint8_t *>(dst);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / kQ8Block; ++b, x += kQ8Block, out += kQ8BlockBytes) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 4; ++j) {
            v[j] = _mm256_loadu_ps(x + 8 * j);
            m = _mm256_max_ps(m, _mm256_and_ps(v[j], abs_mask));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const uint16_t d_bits = float_to_half(d);
        std::memcpy(out, &d_bits, 2);
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv));
        // Pack 32 int32 to 32 int8; the packs work per 128-bit lane, the permute restores element order.
        const __m256i q16a = _mm256_packs_epi32(q[0], q[1]);
        const __m256i q16b = _mm256_packs_epi32(q[2], q[3]);
        const __m256i q8 = _mm256_packs_epi16(q16a, q16b);
        const __m256i ordered = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + 2), ordered);
    }
}

}  // namespace

void add_float_kernels_avx2(TypeKernels * table) {
    auto set = [&](ElemType type, auto vec_dot, auto tile) {
        TypeKernels & k = table[static_cast<uint32_t>(type)];
        k.vec_dot = vec_dot;
        k.dot_tile = tile;
    };
    set(ElemType::F32, vec_dot_float<LoadF32>, dot_tile_batched<LoadF32>);
    set(ElemType::F16, vec_dot_float<LoadF16>, dot_tile_batched<LoadF16>);
    set(ElemType::BF16, vec_dot_float<LoadBF16>, dot_tile_batched<LoadBF16>);
    for (ElemType type : {ElemType::F32, ElemType::F16, ElemType::BF16}) table[static_cast<uint32_t>(type)].tile_tokens = kTileTokens;
    // Q8_0's exact entry is set whole: the base level's table may hold its int16 entry (LevelFills::q8_0_int16),
    // whose activation format must not stay under these f32 kernels.
    table[static_cast<uint32_t>(ElemType::Q8_0)] = TypeKernels{};
    set(ElemType::Q8_0, vec_dot_q8_0_f32, dot_tile<vec_dot_q8_0_f32, tile4_q8_0_f32<1>, tile4_q8_0_f32<2>>);
}

std::vector<FloatTileVariant> f32_tile_variants_avx2() {
    return {
        {"4x2 passes", dot_tile<vec_dot_float<LoadF32>, tile4_float<LoadF32, 1>, tile4_float<LoadF32, 2>>, 4},  // before
        {"4x2 passes, L2 prefetch", dot_tile_batched<LoadF32>, kTileTokens},  // the table's tile
    };
}

void add_q8_0_int8_kernels_avx2(TypeKernels & k) {
    k.act_type = ElemType::Q8_0;
    k.quantize_act = quantize_row_q8_0_avx2;
    quant::add_q8_0_int8_entries_avx2(k);
}

#else

void add_float_kernels_avx2(TypeKernels * /*table*/) {}
void add_q8_0_int8_kernels_avx2(TypeKernels & /*k*/) {}
std::vector<FloatTileVariant> f32_tile_variants_avx2() { return {}; }

#endif

}  // namespace offgrid::ops::cpu
