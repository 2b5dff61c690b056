// Prompt products of the 8-bit-activation path (OFFGRID_QUANT_ACT=int8) on the tile unit (AMX-INT8): q4_K and
// q6_K against q8_K activations, q5_0 and Q8_0 against q8_0. Bit-identical to the scalar twins
// (kernels_quant_scalar.cpp, kernels_float_scalar.cpp) and so to the VNNI vec_dot and tiles of the same entries:
// the twins sum integers per block exactly and fold each block's sums into f32 in block order, and a tile
// product computes the same integers (a whole block per tile accumulation), then the twin's fold, vectorised over
// 16 tokens with the same operations per element (no contraction: kernels_quant_common.h).
//
// A weight of q4_K (scale * quant, up to 945) or q6_K (scale * value, -4064..4096) does not fit a byte, so its
// rows are decoded into two byte planes, w = 64 * high + low with low = w & 63 (unsigned) and high = w >> 6, and
// the block's sum is 64 * sum(high * a) + sum(low * a); q4_K's sum of min * block sum (8 products per row and
// token) is left to the vector unit. q5_0 and Q8_0 weights are bytes already.
//
// gemm (TypeKernels::gemm): rows [0, n_rows) by every token. The tokens are packed once per product per thread
// (act_key) into tile images, 16 tokens each; each 16-row block of weights is decoded once into its planes' tile
// images and multiplied with the token images two groups at a time (each weight image loaded once for both).
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512VBMI__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/cpu/kernels_quant_int8_entries.h"
#include "ops/workspace.h"

namespace offgrid::ops::cpu {

namespace {

constexpr int kRows = 16;    // weight rows per tile (the tile's M)
constexpr int kTokens = 16;  // tokens per tile (its N: 16 int32 columns)

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// Words w = 64 * high + low (-4096..4096) of the even (we) and odd (wo) bytes of a chunk, stored as its two planes:
// high = w >> 6 as signed bytes at dst, low = w & 63 at dst + plane. Both packs keep the element order the
// decoders' element() describe.
inline void store_planes(__m512i we, __m512i wo, uint8_t * dst, size_t plane) {
    const __m512i low6 = _mm512_set1_epi16(63);
    _mm512_storeu_si512(dst, _mm512_packs_epi16(_mm512_srai_epi16(we, 6), _mm512_srai_epi16(wo, 6)));
    _mm512_storeu_si512(dst + plane, _mm512_packus_epi16(_mm512_and_si512(we, low6), _mm512_and_si512(wo, low6)));
}

// The palette-1 configuration: tiles 0-3 accumulators (16 x 16 int32: two token groups by two planes), 4-5 token
// images (chunk / 4 rows of 64 bytes), 6-7 weight images (16 rows of `chunk` bytes).
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

void configure(int chunk) {
    TileConfig c;
    for (int t = 0; t < 4; ++t) {
        c.rows[t] = kRows;
        c.colsb[t] = kTokens * 4;
    }
    for (int t = 4; t < 6; ++t) {
        c.rows[t] = static_cast<uint8_t>(chunk / 4);
        c.colsb[t] = kTokens * 4;
    }
    for (int t = 6; t < 8; ++t) {
        c.rows[t] = kRows;
        c.colsb[t] = static_cast<uint16_t>(chunk);
    }
    _tile_loadconfig(&c);
}

// ---- the types -------------------------------------------------------------------------------------------
//
// Each type names its block (elements), its tile chunk (bytes of K per accumulation: 64, or 32 for blocks of
// 32), its planes (at most 2), its activation block, and decodes one weight row's block into its planes' images
// (row r of each chunk image, `chunk` bytes apart per row) plus the row's float scales. A block's weight images:
// plane p, chunk c at (p * chunks + c) * 16 * chunk; then the rows' scales d[16] and dmin[16], then the type's
// extra weight bytes. A block's token images: chunk c at c * 16 * chunk; then the tokens' scales[16], then the
// type's extra token bytes. fold() adds one block's sums to acc (16 rows x 16 tokens, row-major).

template <class T>
constexpr size_t kChunks = T::kBlock / T::kChunk;
template <class T>
constexpr size_t kWeightScales = static_cast<size_t>(T::kBlock) * kRows * T::kPlanes;  // offset of d[16]
template <class T>
constexpr size_t kTokenScales = static_cast<size_t>(T::kBlock) * kTokens;  // offset of the tokens' scales
template <class T>
constexpr size_t kTokenBlockBytes = kTokenScales<T> + kTokens * sizeof(float) + T::kTokenExtra;
template <class T>
constexpr size_t kWeightBlockBytes = kWeightScales<T> + 2 * kRows * sizeof(float) + T::kWeightExtra;

struct Q4K {
    static constexpr int kBlock = kQK_K, kChunk = 64, kPlanes = 2;
    static constexpr int kLayout = 1;  // names the packed tokens' layout (pack_tokens)
    // The mins' sum, sum_j min_j * (bsums[2j] + bsums[2j+1]), runs on the vector unit with vpdpwssd: per row 4
    // int32 of two int16 mins each, per token 4 int32 of two int16 block sums each (16 tokens a vector).
    static constexpr size_t kWeightExtra = kRows * 4 * sizeof(uint32_t), kTokenExtra = 4 * kTokens * sizeof(uint32_t);
    using Weight = BlockQ4_K;
    using Act = BlockQ8_K;
    // Plane 0 high (w >> 6), 1 low (w & 63); scales: d, dmin; extra: the mins in pairs.
    //
    // The quants are split in the word domain, which needs no widening shuffle: word i of 64 packed bytes holds
    // bytes 2i and 2i + 1, so (v & 15), (v >> 8 & 15), (v >> 4 & 15) and (v >> 12) are the even and odd bytes' low
    // and high nibbles as int16, multiplied by their sub-block's scale and packed back to bytes in pairs of
    // vectors (one packus per 64 bytes of a plane, against a two-uop narrowing per 32). The element order that
    // leaves is a permutation of each chunk's K (element()); the token images take the same order, and a chunk's sum
    // does not depend on it. Chunk 2k holds sub-blocks 4k and 4k + 2 (low nibbles of bytes 64k..64k+63), chunk
    // 2k + 1 sub-blocks 4k + 1 and 4k + 3 (their high nibbles).
    static void decode(const Weight & B, int r, uint8_t * img) {
        uint64_t sc, mn;
        quant::k4_scales_mins_u64(B.scales, sc, mn);
        auto * d = reinterpret_cast<float *>(img + kWeightScales<Q4K>);
        d[r] = h2f(B.d);
        d[kRows + r] = h2f(B.dmin);
        // The mins in pairs: as int16, mins 2i and 2i + 1 are dword i.
        _mm_storeu_si128(reinterpret_cast<__m128i *>(d + 2 * kRows) + r,
                         _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(mn))));
        // The 8 scales as int16; a chunk's vector takes [scale of its first sub-block x16 | second x16].
        const __m512i s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
        const __m512i halves = _mm512_set_epi16(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0,
                                                0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i low4 = _mm512_set1_epi16(0x0f);
        constexpr size_t plane = 4 * kRows * kChunk;
        for (int k = 0; k < 2; ++k) {
            const __m512i v = _mm512_loadu_si512(B.qs + 64 * k);
            const __m512i q[2][2] = {{_mm512_and_si512(v, low4), _mm512_and_si512(_mm512_srli_epi16(v, 8), low4)},
                                     {_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), _mm512_srli_epi16(v, 12)}};
            for (int part = 0; part < 2; ++part) {
                const auto first = static_cast<short>(4 * k + part);  // the chunk's first sub-block
                const __m512i s = _mm512_permutexvar_epi16(_mm512_add_epi16(halves, _mm512_set1_epi16(first)), s16);
                const size_t at = static_cast<size_t>(2 * k + part) * kRows * kChunk + static_cast<size_t>(r) * kChunk;
                store_planes(_mm512_mullo_epi16(q[part][0], s), _mm512_mullo_epi16(q[part][1], s), img + at, plane);
            }
        }
    }
    // Element (within the super-block) at K position p of chunk c, as decode() leaves them: packus puts 8 words of
    // its first operand (even bytes) then 8 of its second (odd bytes) in each 16-byte lane.
    static constexpr int element(int c, int p) {
        const int k = c / 2, part = c % 2, lane = p / 16, q = p % 16;
        const int word = 8 * lane + q % 8, byte = 2 * word + (q >= 8 ? 1 : 0);
        return 128 * k + 64 * (byte / 32) + byte % 32 + 32 * part;
    }
    static constexpr bool kOrdered = true;
    static constexpr int window(int c) { return 128 * (c / 2); }  // a chunk's elements lie in [window, window + 128)
    // Token n's block sums in pairs (zeros for a missing token).
    static void pack_extra(const Act * a, int n, uint8_t * extra) {
        auto * pairs = reinterpret_cast<uint32_t *>(extra);
        for (int i = 0; i < 4; ++i) {
            uint32_t v = 0;
            if (a != nullptr) {
                const auto s0 = static_cast<int16_t>(a->bsums[4 * i] + a->bsums[4 * i + 1]);
                const auto s1 = static_cast<int16_t>(a->bsums[4 * i + 2] + a->bsums[4 * i + 3]);
                v = static_cast<uint16_t>(s0) | static_cast<uint32_t>(static_cast<uint16_t>(s1)) << 16;
            }
            pairs[i * kTokens + n] = v;
        }
    }
    // As dot_q4_k's fold_q8_k_min: acc + (a_d * w_d * isum - a_d * w_dmin * imin).
    static void fold(const int32_t * hi_lo, const uint8_t * wimg, const uint8_t * timg, float * acc) {
        const auto * wd = reinterpret_cast<const float *>(wimg + kWeightScales<Q4K>);
        const auto * mins = reinterpret_cast<const int32_t *>(wd + 2 * kRows);
        const auto * ad = reinterpret_cast<const float *>(timg + kTokenScales<Q4K>);
        const auto * bs = reinterpret_cast<const __m512i *>(ad + kTokens);
        const __m512 a = _mm512_load_ps(ad);
        const __m512i bs0 = _mm512_load_si512(bs), bs1 = _mm512_load_si512(bs + 1);
        const __m512i bs2 = _mm512_load_si512(bs + 2), bs3 = _mm512_load_si512(bs + 3);
        for (int m = 0; m < kRows; ++m) {
            const __m512i hi = _mm512_load_si512(hi_lo + m * kTokens);
            const __m512i lo = _mm512_load_si512(hi_lo + kRows * kTokens + m * kTokens);
            const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(hi, 6), lo);
            __m512i imin = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(mins[4 * m]), bs0);
            imin = _mm512_dpwssd_epi32(imin, _mm512_set1_epi32(mins[4 * m + 1]), bs1);
            imin = _mm512_dpwssd_epi32(imin, _mm512_set1_epi32(mins[4 * m + 2]), bs2);
            imin = _mm512_dpwssd_epi32(imin, _mm512_set1_epi32(mins[4 * m + 3]), bs3);
            const __m512 d = _mm512_mul_ps(a, _mm512_set1_ps(wd[m]));
            const __m512 dm = _mm512_mul_ps(a, _mm512_set1_ps(wd[kRows + m]));
            const __m512 t = _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)), _mm512_mul_ps(dm, _mm512_cvtepi32_ps(imin)));
            _mm512_store_ps(acc + m * kTokens, _mm512_add_ps(_mm512_load_ps(acc + m * kTokens), t));
        }
    }
};

// A type with nothing besides its planes and scales.
struct NoExtras {
    static constexpr size_t kWeightExtra = 0, kTokenExtra = 0;
    static constexpr bool kOrdered = false;  // chunks hold their elements in order
    static void pack_extra(const void *, int, uint8_t *) {}
};

struct Q6K : NoExtras {
    static constexpr int kBlock = kQK_K, kChunk = 64, kPlanes = 2;
    static constexpr int kLayout = 2;  // names the packed tokens' layout (pack_tokens)
    using Weight = BlockQ6_K;
    using Act = BlockQ8_K;
    // Plane 0 high (w >> 6, signed), 1 low (w & 63); scale: d.
    //
    // As Q4K, in the word domain: word i of the 64 low-bit bytes of half h holds bytes 2i and 2i + 1; bytes 0-31
    // give elements 128h + l (low nibble) and 128h + 64 + l (high), bytes 32-63 elements 128h + 32 + l and
    // 128h + 96 + l (l = byte mod 32); the two high bits of element l's run come from qh[32h + l], at bit 0, 2, 4
    // or 6 by run, so the 32 qh bytes stand in both halves and per-half variable shifts bring each run's bits to
    // bit 4. Chunk 2h holds elements 128h..128h+63 (the low nibbles), chunk 2h + 1 the next 64 (the high ones).
    static void decode(const Weight & B, int r, uint8_t * img) {
        reinterpret_cast<float *>(img + kWeightScales<Q6K>)[r] = h2f(B.d);
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B.scales));
        const __m512i s16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
        // Lanes 8j..8j+7 of a run take scale j of the run's four (elements 16j..16j+15 of its 64).
        const __m512i quarter = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1,
                                                 0, 0, 0, 0, 0, 0, 0, 0);
        auto halves = [](short a, short b) {
            return _mm512_inserti64x4(_mm512_set1_epi16(a), _mm256_set1_epi16(b), 1);
        };
        const __m512i low4 = _mm512_set1_epi16(0x0f), bits = _mm512_set1_epi16(0x30), k32 = _mm512_set1_epi16(32);
        constexpr size_t plane = 4 * kRows * kChunk;
        for (int h = 0; h < 2; ++h) {
            const __m512i A = _mm512_loadu_si512(B.ql + 64 * h);
            const __m512i Q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qh + 32 * h)));
            // A 6-bit quant: four low bits (already at bits 0-3 of `nibble`) and the two qh bits at bits 4-5.
            auto six = [&](__m512i nibble, __m512i high) {
                return _mm512_or_si512(_mm512_and_si512(nibble, low4), _mm512_and_si512(high, bits));
            };
            // [part][even, odd]: the low part holds runs 0 and 1 of the half (qh bits 0 / 2 of the even byte,
            // 8 / 10 of the odd one), the high part runs 2 and 3 (bits 4 / 6 and 12 / 14).
            const __m512i q[2][2] = {{six(A, _mm512_sllv_epi16(Q, halves(4, 2))),
                                      six(_mm512_srli_epi16(A, 8), _mm512_srlv_epi16(Q, halves(4, 6)))},
                                     {six(_mm512_srli_epi16(A, 4), _mm512_srlv_epi16(Q, halves(0, 2))),
                                      six(_mm512_srli_epi16(A, 12), _mm512_srlv_epi16(Q, halves(8, 10)))}};
            for (int part = 0; part < 2; ++part) {
                const auto first = static_cast<short>(8 * h + 4 * part);  // the run's first scale
                const __m512i s = _mm512_permutexvar_epi16(_mm512_add_epi16(quarter, _mm512_set1_epi16(first)), s16);
                const __m512i we = _mm512_mullo_epi16(_mm512_sub_epi16(q[part][0], k32), s);
                const __m512i wo = _mm512_mullo_epi16(_mm512_sub_epi16(q[part][1], k32), s);
                const size_t at = static_cast<size_t>(2 * h + part) * kRows * kChunk + static_cast<size_t>(r) * kChunk;
                store_planes(we, wo, img + at, plane);
            }
        }
    }
    // Element at K position p of chunk c (packus / packs: 8 words of the even bytes, then 8 of the odd ones, per
    // 16-byte lane).
    static constexpr int element(int c, int p) {
        const int q = p % 16, byte = 2 * (8 * (p / 16) + q % 8) + (q >= 8 ? 1 : 0);
        return 128 * (c / 2) + 64 * (c % 2) + byte;
    }
    static constexpr bool kOrdered = true;
    static constexpr int window(int c) { return 128 * (c / 2); }
    // dot_q6_k's fold_q8_k: acc + a_d * w_d * isum.
    static void fold(const int32_t * hi_lo, const uint8_t * wimg, const uint8_t * timg, float * acc) {
        const auto * wd = reinterpret_cast<const float *>(wimg + kWeightScales<Q6K>);
        const __m512 a = _mm512_load_ps(reinterpret_cast<const float *>(timg + kTokenScales<Q6K>));
        for (int m = 0; m < kRows; ++m) {
            const __m512i hi = _mm512_load_si512(hi_lo + m * kTokens);
            const __m512i lo = _mm512_load_si512(hi_lo + kRows * kTokens + m * kTokens);
            const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(hi, 6), lo);
            const __m512 d = _mm512_mul_ps(a, _mm512_set1_ps(wd[m]));
            _mm512_store_ps(acc + m * kTokens,
                            _mm512_add_ps(_mm512_load_ps(acc + m * kTokens), _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum))));
        }
    }
};

// Blocks of 32 against q8_0: one plane of signed bytes, folded as fold_q8_0: acc + w_d * a_d * isum.
struct Blocks32 : NoExtras {
    static constexpr int kBlock = kQK, kChunk = 32, kPlanes = 1;
    using Act = BlockQ8_0;
    static void fold(const int32_t * sums, const uint8_t * wimg, const uint8_t * timg, float * acc) {
        const auto * wd = reinterpret_cast<const float *>(wimg + kWeightScales<Blocks32>);
        const __m512 a = _mm512_load_ps(reinterpret_cast<const float *>(timg + kTokenScales<Blocks32>));
        for (int m = 0; m < kRows; ++m) {
            const __m512 d = _mm512_mul_ps(_mm512_set1_ps(wd[m]), a);
            const __m512 t = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_load_si512(sums + m * kTokens)));
            _mm512_store_ps(acc + m * kTokens, _mm512_add_ps(_mm512_load_ps(acc + m * kTokens), t));
        }
    }
};

struct Q50 : Blocks32 {
    static constexpr int kLayout = 3;  // names the packed tokens' layout (pack_tokens)
    using Weight = BlockQ5_0;
    static void decode(const Weight & B, int r, uint8_t * img) {
        reinterpret_cast<float *>(img + kWeightScales<Q50>)[r] = h2f(B.d);
        const __m128i m4 = _mm_set1_epi8(0x0f);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i *>(B.qs));
        const __m256i nib = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, m4)),
                                                    _mm_and_si128(_mm_srli_epi16(qs, 4), m4), 1);
        uint32_t qh;
        std::memcpy(&qh, B.qh, 4);
        const __m256i q = _mm256_or_si256(nib, _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(16)));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(img + static_cast<size_t>(r) * kChunk),
                            _mm256_sub_epi8(q, _mm256_set1_epi8(16)));
    }
};

struct Q80 : Blocks32 {
    static constexpr int kLayout = 4;  // names the packed tokens' layout (pack_tokens)
    using Weight = BlockQ8_0;
    static void decode(const Weight & B, int r, uint8_t * img) {
        reinterpret_cast<float *>(img + kWeightScales<Q80>)[r] = h2f(B.d);
        std::memcpy(img + static_cast<size_t>(r) * kChunk, B.qs, kQK);
    }
};

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ5_0) == 22, "ggml block sizes");

// An activation block's scale, as f32 (q8_K keeps an f32, q8_0 an f16).
inline float act_scale(const BlockQ8_K & a) { return a.d; }
inline float act_scale(const BlockQ8_0 & a) { return h2f(a.d); }

// ---- the product -----------------------------------------------------------------------------------------

// For a type whose chunks are permuted (kOrdered), the byte indices that gather chunk c's K order from the
// 128 activation bytes at T::window(c) (one vpermi2b per chunk and token).
template <class T>
struct TokenOrder {
    alignas(64) uint8_t idx[kChunks<T>][64] = {};
    constexpr TokenOrder() {
        for (size_t c = 0; c < kChunks<T>; ++c) {
            for (int p = 0; p < 64; ++p) {
                idx[c][p] = static_cast<uint8_t>(T::element(static_cast<int>(c), p) - T::window(static_cast<int>(c)));
            }
        }
    }
};

// Token images: group g of 16 tokens, block b at (g * nb + b) * kTokenBlockBytes. Tokens past n_tok are zeros.
template <class T>
const uint8_t * pack_tokens(const void * act, size_t act_stride, int64_t nb, int64_t n_tok, uint64_t key) {
    const int64_t groups = (n_tok + kTokens - 1) / kTokens;
    bool fill;
    auto * p = reinterpret_cast<uint8_t *>(Workspace::scratch().kernel_block_for(
        KernelBlock::packed_tokens, static_cast<size_t>(groups * nb) * kTokenBlockBytes<T>,
        packed_tokens_tag(key, static_cast<uint64_t>(T::kLayout)), fill));
    if (!fill) return p;
    for (int64_t g = 0; g < groups; ++g) {
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t * img = p + static_cast<size_t>(g * nb + b) * kTokenBlockBytes<T>;
            auto * scales = reinterpret_cast<float *>(img + kTokenScales<T>);
            uint8_t * extra = img + kTokenScales<T> + kTokens * sizeof(float);
            for (int n = 0; n < kTokens; ++n) {
                const int64_t t = g * kTokens + n;
                if (t >= n_tok) {
                    scales[n] = 0.0f;
                    T::pack_extra(nullptr, n, extra);
                    for (size_t c = 0; c < kChunks<T>; ++c) {
                        for (int k4 = 0; k4 < T::kChunk / 4; ++k4) std::memset(img + (c * (T::kChunk / 4) + k4) * 64 + 4 * n, 0, 4);
                    }
                    continue;
                }
                const auto & A = reinterpret_cast<const typename T::Act *>(static_cast<const uint8_t *>(act) + t * act_stride)[b];
                scales[n] = act_scale(A);
                T::pack_extra(&A, n, extra);
                const int8_t * q = A.qs;
                for (size_t c = 0; c < kChunks<T>; ++c) {
                    const int8_t * src = q + c * T::kChunk;
                    alignas(64) int8_t gathered[64];
                    if constexpr (T::kOrdered) {
                        static constexpr TokenOrder<T> order;
                        const int8_t * win = q + T::window(static_cast<int>(c));
                        const __m512i idx = _mm512_load_si512(order.idx[c]);
                        const __m512i lo = _mm512_loadu_si512(win), hi = _mm512_loadu_si512(win + 64);
                        _mm512_store_si512(gathered, _mm512_permutex2var_epi8(lo, idx, hi));
                        src = gathered;
                    }
                    for (int k4 = 0; k4 < T::kChunk / 4; ++k4) {
                        std::memcpy(img + (c * (T::kChunk / 4) + k4) * 64 + 4 * n, src + 4 * k4, 4);
                    }
                }
            }
        }
    }
    return p;
}

// 16 rows from `w` (fewer at the end: the missing rows are zeros) into their images. Row after row, so each row
// is one sequential stream (fetched 1 KiB ahead).
template <class T>
void decode_rows(const uint8_t * w, size_t w_stride, int64_t nb, int rows, uint8_t * out) {
    if (rows < kRows) std::memset(out, 0, static_cast<size_t>(nb) * kWeightBlockBytes<T>);
    for (int r = 0; r < rows; ++r) {
        const auto * row = reinterpret_cast<const typename T::Weight *>(w + r * w_stride);
        for (int64_t b = 0; b < nb; ++b) {
            const char * ahead = reinterpret_cast<const char *>(row + b) + 1024;
            for (size_t off = 0; off < sizeof(typename T::Weight); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
            T::decode(row[b], r, out + static_cast<size_t>(b) * kWeightBlockBytes<T>);
        }
    }
}

// One block's planes against two token groups' images: tiles 0, 1 hold group 0's planes 0 and 1, tiles 2, 3
// group 1's (t1 null: group 0 only); the block's chunks in order. Tiles 4, 5 take the token images, 6, 7 the
// planes' weight images (each loaded once for both groups).
template <class T>
inline void multiply_block(const uint8_t * wimg, const uint8_t * t0, const uint8_t * t1) {
    constexpr bool two_planes = T::kPlanes == 2;
    constexpr bool signed_high = !std::is_same_v<T, Q4K>;  // q6_K's high plane and the byte types are signed
    constexpr size_t plane = kChunks<T> * kRows * T::kChunk;
    _tile_zero(0);
    if constexpr (two_planes) _tile_zero(1);
    if (t1 != nullptr) {
        _tile_zero(2);
        if constexpr (two_planes) _tile_zero(3);
    }
    for (size_t c = 0; c < kChunks<T>; ++c) {
        const uint8_t * a = wimg + c * kRows * T::kChunk;
        _tile_loadd(4, t0 + c * T::kChunk * kTokens, 64);
        _tile_loadd(6, a, T::kChunk);
        if constexpr (signed_high) {
            _tile_dpbssd(0, 6, 4);
        } else {
            _tile_dpbusd(0, 6, 4);
        }
        if constexpr (two_planes) {
            _tile_loadd(7, a + plane, T::kChunk);
            _tile_dpbusd(1, 7, 4);  // the low plane is unsigned
        }
        if (t1 != nullptr) {
            _tile_loadd(5, t1 + c * T::kChunk * kTokens, 64);
            if constexpr (signed_high) {
                _tile_dpbssd(2, 6, 5);
            } else {
                _tile_dpbusd(2, 6, 5);
            }
            if constexpr (two_planes) _tile_dpbusd(3, 7, 5);
        }
    }
}

template <class T>
void gemm(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows,
          int64_t n_tok, float * y, size_t y_stride, uint64_t act_key) {
    const int64_t nb = n / T::kBlock;
    if (nb == 0 || n_rows <= 0 || n_tok <= 0) return;
    const uint8_t * tokens = pack_tokens<T>(act, act_stride, nb, n_tok, act_key);
    auto * rows_img = reinterpret_cast<uint8_t *>(
        Workspace::scratch().kernel_block(KernelBlock::tile_weights, static_cast<size_t>(nb) * kWeightBlockBytes<T>));
    configure(T::kChunk);
    alignas(64) int32_t c[2][T::kPlanes * kRows * kTokens];  // per group: plane 0's sums, then plane 1's
    alignas(64) float acc[2][kRows * kTokens];
    const int64_t groups = (n_tok + kTokens - 1) / kTokens;
    for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
        const int rows = static_cast<int>(std::min<int64_t>(kRows, n_rows - r0));
        decode_rows<T>(static_cast<const uint8_t *>(w) + r0 * w_stride, w_stride, nb, rows, rows_img);
        for (int64_t g = 0; g < groups; g += 2) {
            const bool two = g + 1 < groups;
            std::memset(acc, 0, sizeof acc);
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * wimg = rows_img + static_cast<size_t>(b) * kWeightBlockBytes<T>;
                const uint8_t * t0 = tokens + static_cast<size_t>(g * nb + b) * kTokenBlockBytes<T>;
                const uint8_t * t1 = two ? t0 + static_cast<size_t>(nb) * kTokenBlockBytes<T> : nullptr;
                multiply_block<T>(wimg, t0, t1);
                _tile_stored(0, c[0], kTokens * 4);
                if constexpr (T::kPlanes == 2) _tile_stored(1, c[0] + kRows * kTokens, kTokens * 4);
                if (two) {
                    _tile_stored(2, c[1], kTokens * 4);
                    if constexpr (T::kPlanes == 2) _tile_stored(3, c[1] + kRows * kTokens, kTokens * 4);
                }
                T::fold(c[0], wimg, t0, acc[0]);
                if (two) T::fold(c[1], wimg, t1, acc[1]);
            }
            for (int j = 0; j < (two ? 2 : 1); ++j) {
                const int64_t first = (g + j) * kTokens;
                const int toks = static_cast<int>(std::min<int64_t>(kTokens, n_tok - first));
                for (int t = 0; t < toks; ++t) {
                    float * dst = y + (first + t) * static_cast<int64_t>(y_stride) + r0;
                    for (int m = 0; m < rows; ++m) dst[m] = acc[j][m * kTokens + t];
                }
            }
        }
    }
    _tile_release();
}

}  // namespace

size_t int8_gemm_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok) {
    const int64_t groups = (n_tok + kTokens - 1) / kTokens;
    switch (type) {
        case tensor::ElemType::Q4_K: return static_cast<size_t>(groups * (n / Q4K::kBlock)) * kTokenBlockBytes<Q4K>;
        case tensor::ElemType::Q6_K: return static_cast<size_t>(groups * (n / Q6K::kBlock)) * kTokenBlockBytes<Q6K>;
        case tensor::ElemType::Q5_0: return static_cast<size_t>(groups * (n / Q50::kBlock)) * kTokenBlockBytes<Q50>;
        case tensor::ElemType::Q8_0: return static_cast<size_t>(groups * (n / Q80::kBlock)) * kTokenBlockBytes<Q80>;
        default: return 0;
    }
}

size_t int8_gemm_weight_bytes(tensor::ElemType type, int64_t n) {
    switch (type) {
        case tensor::ElemType::Q4_K: return static_cast<size_t>(n / Q4K::kBlock) * kWeightBlockBytes<Q4K>;
        case tensor::ElemType::Q6_K: return static_cast<size_t>(n / Q6K::kBlock) * kWeightBlockBytes<Q6K>;
        case tensor::ElemType::Q5_0: return static_cast<size_t>(n / Q50::kBlock) * kWeightBlockBytes<Q50>;
        case tensor::ElemType::Q8_0: return static_cast<size_t>(n / Q80::kBlock) * kWeightBlockBytes<Q80>;
        default: return 0;
    }
}

// From this many tokens a product runs on the tile unit, fewer take the VNNI tiles (scale Q4_K_M, int8, 2 threads,
// `bench --parallel 1,2,4,8`: a step of 8 took 445 ms from 8, 478 ms from 2 tokens, 542 ms with the VNNI tiles).
constexpr int kTileUnitMinTokens = 8;

void add_q8_0_int8_gemm_amx(TypeKernels & k) {
    if (k.act_type != tensor::ElemType::Q8_0) return;
    k.gemm = gemm<Q80>;
    k.set_gemm_min_tokens(kTileUnitMinTokens, kTileUnitMinTokens);
}

namespace quant {
void add_int8_gemm_amx(TypeKernels * table) {
    table[static_cast<uint32_t>(tensor::ElemType::Q4_K)].gemm = gemm<Q4K>;
    table[static_cast<uint32_t>(tensor::ElemType::Q6_K)].gemm = gemm<Q6K>;
    table[static_cast<uint32_t>(tensor::ElemType::Q5_0)].gemm = gemm<Q50>;
    for (auto type : {tensor::ElemType::Q4_K, tensor::ElemType::Q6_K, tensor::ElemType::Q5_0}) {
        table[static_cast<uint32_t>(type)].set_gemm_min_tokens(kTileUnitMinTokens, kTileUnitMinTokens);
    }
}
}  // namespace quant

}  // namespace offgrid::ops::cpu

#else

namespace offgrid::ops::cpu {
size_t int8_gemm_token_bytes(tensor::ElemType, int64_t, int64_t) { return 0; }
size_t int8_gemm_weight_bytes(tensor::ElemType, int64_t) { return 0; }
void add_q8_0_int8_gemm_amx(TypeKernels &) {}
namespace quant {
void add_int8_gemm_amx(TypeKernels *) {}
}  // namespace quant
}  // namespace offgrid::ops::cpu

#endif
