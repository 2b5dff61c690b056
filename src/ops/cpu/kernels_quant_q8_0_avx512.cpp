// AVX-512 one-row tiles for the table's Q8_0 entry (the float side's exact kernel: f32 activations, weights widened
// to d * q in registers). A decode step of a few sequences streams each row from DRAM once; the float side's
// 4-row tiles read four rows' blocks in turn, which the prefetchers follow badly (bench_quant_batch), so the
// driver runs such products row after row (TypeKernels::row_tile_min_tokens) and this tile widens each block of
// the row once for all its tokens (up to 8). Each (row, token) gets exactly the operations of the float side's vec_dot_q8_0_f32 in
// its order (one 16-lane accumulator, lane j sums the elements j mod 16 block by block, the same horizontal sum),
// so the result is bit-identical to it (tests: Dispatch.TileIsBitIdenticalToVecDot). Tiles of 2-4 rows still go
// to the float side's tile.
#include "ops/cpu/kernels_quant_q8_0.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "ops/cpu/hsum_avx512.h"

#include <cstring>

namespace offgrid::ops::cpu::quant {

namespace {

constexpr int kBlock = 32;
constexpr size_t kBlockBytes = 2 + kBlock;
constexpr size_t kPrefetchBytes = 1024;

using ::offgrid::ops::cpu::avx512::hsum;  // the float side's sum: the tiles must equal vec_dot_q8_0_f32

template <int NT>
void row_tile(const uint8_t * w, const uint8_t * act, size_t act_stride, int64_t n, float * y, size_t y_stride) {
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / kBlock; ++b) {
        const uint8_t * blk = w + static_cast<size_t>(b) * kBlockBytes;
        // The rows of a matrix are contiguous: this stream a little ahead (never faults, changes no arithmetic).
        _mm_prefetch(reinterpret_cast<const char *>(blk + kPrefetchBytes), _MM_HINT_T0);
        uint16_t bits;
        std::memcpy(&bits, blk, 2);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(bits));
        const auto * q = reinterpret_cast<const __m128i *>(blk + 2);
        const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), d);
        const __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), d);
        for (int t = 0; t < NT; ++t) {
            const float * x = reinterpret_cast<const float *>(act + t * act_stride) + b * kBlock;
            acc[t] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x), acc[t]);
            acc[t] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), acc[t]);
        }
    }
    for (int t = 0; t < NT; ++t) y[t * y_stride] = hsum(acc[t]);
}

// The float side's tile, for the 2-4-row calls (prompts).
void (*g_float_tile)(const void *, size_t, const void *, size_t, int64_t, int, int, float *, size_t) = nullptr;

void dot_tile(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int n_rows, int n_tok,
              float * y, size_t y_stride) {
    if (n_rows != 1) return g_float_tile(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride);
    const auto * wb = static_cast<const uint8_t *>(w);
    const auto * ab = static_cast<const uint8_t *>(act);
    switch (n_tok) {
        case 1: return row_tile<1>(wb, ab, act_stride, n, y, y_stride);
        case 2: return row_tile<2>(wb, ab, act_stride, n, y, y_stride);
        case 3: return row_tile<3>(wb, ab, act_stride, n, y, y_stride);
        case 4: return row_tile<4>(wb, ab, act_stride, n, y, y_stride);
        case 5: return row_tile<5>(wb, ab, act_stride, n, y, y_stride);
        case 6: return row_tile<6>(wb, ab, act_stride, n, y, y_stride);
        case 7: return row_tile<7>(wb, ab, act_stride, n, y, y_stride);
        default: return row_tile<8>(wb, ab, act_stride, n, y, y_stride);
    }
}

}  // namespace

void add_q8_0_row_tiles_avx512(TypeKernels & k) {
    // Only over the float side's exact AVX-512 entry (f32 activations, at most 4 tokens a tile), whose
    // arithmetic row_tile repeats.
    if (k.act_type != tensor::ElemType::F32 || k.dot_tile == nullptr || k.tile_tokens != 4) return;
    if (k.dot_tile == dot_tile || k.row_tile_min_tokens != 0) return;  // already wrapped: never wrap twice
    g_float_tile = k.dot_tile;
    k.dot_tile = dot_tile;
    // From 4 tokens on (bench_quant_batch, one thread, alternated with the float side's tiles): 4 tokens
    // 1.3-1.6x faster, 5-8 about 1.2x; at 1-3 tokens the float side's prefetching 4-row tiles were as fast or
    // faster (1 token: 64-78 against 90-114 us for 1024 x 1024), so those keep them.
    k.row_tile_min_tokens = 4;
}

}  // namespace offgrid::ops::cpu::quant

#else

namespace offgrid::ops::cpu::quant {
void add_q8_0_row_tiles_avx512(TypeKernels &) {}
}  // namespace offgrid::ops::cpu::quant

#endif
