// Prompt products of the 8-bit-activation path at AVX-512 VNNI (TypeKernels::gemm of the q4_K, q6_K, q5_0 and
// Q8_0 entries): tokens in lanes, as at AVX2 (kernels_quant_int8_gemm_avx2.cpp), 16 tokens to a group.
//
// The row kernels (kernels_quant_int8_avx512.cpp) end every block with a horizontal sum per token. Here a group's
// tokens are packed once per product so that 64 bytes hold 4 consecutive activation bytes of each of 16 tokens;
// one `vpdpbusd` multiplies them by a weight row's 4 matching values, broadcast, and adds each token's 4 products
// to its own int32 lane. The lanes stay the tokens' to the result.
//
// `vpdpbusd` takes unsigned bytes on one side and signed on the other, and only its signed side can be a
// broadcast from memory. So the tokens are packed as a + 128 (0..255, q8 activations lie in -127..127) and the
// weights as their signed values, and each block's sum is corrected by 128 * (the sum of its weights), a number
// of the row alone, computed when its blocks are decoded: sum(w * a) = sum(w * (a + 128)) - 128 * sum(w). One
// form serves every type, Q8_0's signed bytes included. All sums are exact int32 (a 32-element block: at most
// 32 * 255 * 127 < 2^21; scaled by a 6-bit scale, summed over 8 or 16 blocks: < 2^31).
//
// Four weight rows share each loaded activation vector (eight measured no faster on Zen 4), and 16 rows are
// decoded a pass so that a group's results leave as one run of y per token.
//
// Bit-identical to the scalar twins (kernels_quant_scalar.cpp, and vec_dot_q8_0 of kernels_float_scalar.cpp):
// the same exact integer sums of a block, then the twin's fold lane for lane, blocks in order (no contraction:
// kernels_quant_common.h).
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "ops/cpu/kernels_quant_int8_avx2.h"
#include "ops/cpu/kernels_quant_int8_entries.h"
#include "ops/cpu/transpose_avx512.h"
#include "ops/workspace.h"

namespace offgrid::ops::cpu::quant {

namespace {

constexpr int kGroup = 16;                  // tokens in a group: the 16 int32 lanes
constexpr int kRows = 4;                    // weight rows run together (sharing each loaded activation vector)
constexpr int kRowBlock = 16;               // weight rows decoded together; their results leave as runs of y
// Token images of a chunk of groups go through every row before the next chunk, and each chunk decodes the rows
// again. On Zen 4 (1 MiB L2, 32 MiB L3) 4 MiB did better than 512 KiB: the group in use stays in L2 across a
// pass's 4 row sets, and the rows are decoded once per product of up to 512 tokens of 2560 columns.
constexpr size_t kChunkBytes = 4096 * 1024;

inline __m512i broadcast4(const void * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// The weight rows are streams read once: fetched 1 KiB ahead (the row kernels' reason: the hardware prefetch
// alone loses speed from DRAM on some VMs).
template <class W>
inline void prefetch_ahead(const W * block) {
    const char * ahead = reinterpret_cast<const char *>(block) + 1024;
    for (size_t off = 0; off < sizeof(W); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
}

inline __m512i load(const void * p) { return _mm512_load_si512(p); }

// The sum of the 32 signed bytes of v.
inline int32_t byte_sum(__m256i v) {
    const __m256i flipped = _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80)));  // v + 128, unsigned
    const __m256i s = _mm256_sad_epu8(flipped, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return static_cast<int32_t>(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

// A token's 4 bytes a + 128 (a null token: a = 0, its result is never written).
inline void put_biased(uint8_t * dst, const int8_t * src) {
    uint32_t v = 0;
    if (src != nullptr) std::memcpy(&v, src, 4);
    v ^= 0x80808080u;
    std::memcpy(dst, &v, 4);
}

// isum[i] += sc[j] * (row i's values of block j against the tokens) for the Blocks blocks of Steps 4-element steps
// each: the tokens' words tq[Steps * j + k] against row i's bytes q[4 * (Steps * j + k)]. Two blocks run together,
// one sum chain each, so that a row has two chains in flight without a third add to join them.
template <int N, int Blocks, int Steps, class Row>
inline void add_scaled_blocks(const Row * const * rows, const uint8_t (*tq)[kGroup][4], __m512i * isum) {
    static_assert(Blocks % 2 == 0);
    for (int j = 0; j < Blocks; j += 2) {
        __m512i s[N][2];
        for (int i = 0; i < N; ++i) s[i][0] = s[i][1] = _mm512_setzero_si512();
        for (int k = 0; k < Steps; ++k) {
            const __m512i a0 = load(tq[Steps * j + k]), a1 = load(tq[Steps * (j + 1) + k]);
            for (int i = 0; i < N; ++i) {
                s[i][0] = _mm512_dpbusd_epi32(s[i][0], a0, broadcast4(rows[i]->q + 4 * (Steps * j + k)));
                s[i][1] = _mm512_dpbusd_epi32(s[i][1], a1, broadcast4(rows[i]->q + 4 * (Steps * (j + 1) + k)));
            }
        }
        for (int i = 0; i < N; ++i) {
            const __m512i p0 = _mm512_mullo_epi32(s[i][0], _mm512_set1_epi32(rows[i]->sc[j]));
            const __m512i p1 = _mm512_mullo_epi32(s[i][1], _mm512_set1_epi32(rows[i]->sc[j + 1]));
            isum[i] = _mm512_add_epi32(isum[i], _mm512_add_epi32(p0, p1));
        }
    }
}

// ---- q8_K tokens (q4_K, q6_K) ----------------------------------------------------------------------------

// A group's super-block: q[k] holds activation bytes 4k..4k+3 of token t, plus 128, at bytes 4t..4t+3; bs[p]
// token t's sums of the 32-element sub-blocks 2p and 2p + 1 as two int16 (at most 32 * 127); d the tokens' scales.
struct alignas(64) TokensQ8K {
    static constexpr uint64_t kLayout = 10;  // names the packed layout (the tile unit's are 1-4, AVX2's 8-9)
    using Act = BlockQ8_K;
    uint8_t q[64][kGroup][4];
    int16_t bs[4][kGroup][2];
    float d[kGroup];

    // The group's 16 tokens at once (A[t] null: a token past the product's): 64 bytes of each token, as 16 words,
    // transposed so that word k of every token lands in q[k].
    static void pack_group(TokensQ8K * out, const BlockQ8_K * const * A, int64_t nb) {
        const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
        for (int64_t b = 0; b < nb; ++b) {
            for (int c = 0; c < 4; ++c) {
                __m512 words[kGroup], m[kGroup];
                for (int t = 0; t < kGroup; ++t) {
                    words[t] = A[t] != nullptr ? _mm512_loadu_ps(A[t][b].qs + 64 * c) : _mm512_setzero_ps();
                }
                avx512::transpose16(words, m);
                for (int k = 0; k < kGroup; ++k) {
                    _mm512_store_si512(out[b].q[16 * c + k], _mm512_xor_si512(_mm512_castps_si512(m[k]), bias));
                }
            }
            for (int t = 0; t < kGroup; ++t) out[b].set_sums(t, A[t] != nullptr ? &A[t][b] : nullptr);
        }
    }

    void set_sums(int t, const BlockQ8_K * A) {
        for (int p = 0; p < 4; ++p) {
            for (int h = 0; h < 2; ++h) {
                const int j = 2 * p + h;  // sub-block j: the 16-sums 2j and 2j + 1
                bs[p][t][h] = A != nullptr ? static_cast<int16_t>(A->bsums[2 * j] + A->bsums[2 * j + 1]) : 0;
            }
        }
        d[t] = A != nullptr ? A->d : 0.0f;
    }
};

// q4_K: quants 0..15 in element order. isum = sum of scale * quant * a (the 128 * quant sums taken off once),
// imin = sum of min * block sums: the twin's two sums.
struct Q4K {
    using Weight = BlockQ4_K;
    using Tokens = TokensQ8K;
    static constexpr int kBlock = 256;
    struct alignas(64) Row {
        int8_t q[256];
        int32_t sc[8];
        int16_t mn[8];     // the mins, in pairs against the tokens' sub-block sums
        int32_t bias;      // 128 * sum of scale * quant
        float d, dmin;
    };

    static void decode(const BlockQ4_K & B, Row & R) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        int32_t w[8];
        for (int c = 0; c < 4; ++c) {  // bytes 32c..32c+31: sub-block 2c in the low nibbles, 2c + 1 in the high
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qs + 32 * c));
            const __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
            _mm256_store_si256(reinterpret_cast<__m256i *>(R.q + 64 * c), lo);
            _mm256_store_si256(reinterpret_cast<__m256i *>(R.q + 64 * c + 32), hi);
            w[2 * c] = byte_sum(lo);
            w[2 * c + 1] = byte_sum(hi);
        }
        uint8_t s8[8], m8[8];
        k4_scales_mins(B.scales, s8, m8);
        int32_t bias = 0;
        for (int j = 0; j < 8; ++j) {
            R.sc[j] = s8[j];
            R.mn[j] = m8[j];
            bias += s8[j] * w[j];
        }
        R.bias = 128 * bias;
        R.d = f16_to_f32(B.d);
        R.dmin = f16_to_f32(B.dmin);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m512 * acc) {
        __m512i isum[N], imin[N];
        for (int i = 0; i < N; ++i) isum[i] = imin[i] = _mm512_setzero_si512();
        add_scaled_blocks<N, 8, 8>(rows, T.q, isum);  // 32-element sub-blocks
        for (int p = 0; p < 4; ++p) {
            const __m512i bs = load(T.bs[p]);
            for (int i = 0; i < N; ++i) imin[i] = _mm512_dpwssd_epi32(imin[i], bs, broadcast4(rows[i]->mn + 2 * p));
        }
        const __m512 ad = _mm512_load_ps(T.d);
        for (int i = 0; i < N; ++i) {  // fold_q8_k_min
            const __m512i total = _mm512_sub_epi32(isum[i], _mm512_set1_epi32(rows[i]->bias));
            const __m512 d = _mm512_mul_ps(ad, _mm512_set1_ps(rows[i]->d));
            const __m512 dmin = _mm512_mul_ps(ad, _mm512_set1_ps(rows[i]->dmin));
            acc[i] = _mm512_add_ps(acc[i], _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(total)),
                                                         _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(imin[i]))));
        }
    }
};

// q6_K: the signed values q - 32 in element order, one scale per 16 elements. isum = sum of scale * (q - 32) * a:
// the twin's sum, without its block-sum correction (the values are already signed).
struct Q6K {
    using Weight = BlockQ6_K;
    using Tokens = TokensQ8K;
    static constexpr int kBlock = 256;
    struct alignas(64) Row {
        int8_t q[256];
        int32_t sc[16];
        int32_t bias;  // 128 * sum of scale * (q - 32)
        float d;
    };

    static void decode(const BlockQ6_K & B, Row & R) {
        const __m256i k32 = _mm256_set1_epi8(32);
        // sum(scale * (q - 32)) = sum(q * its block's scale) - 512 * sum(scale): the first by `vpdpbusd` of the
        // unsigned q against the 16 scales spread to their blocks' bytes (byte lane L of a 64-element run: block
        // first + L).
        const __m512i scales = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(B.scales)));
        const __m512i lane = _mm512_set_epi32(0x03030303, 0x03030303, 0x03030303, 0x03030303, 0x02020202, 0x02020202,
                                              0x02020202, 0x02020202, 0x01010101, 0x01010101, 0x01010101, 0x01010101,
                                              0, 0, 0, 0);
        __m512i scaled = _mm512_setzero_si512();
        for (int h = 0; h < 2; ++h) {
            __m256i g[4];
            q6_k_values(B, h, g);
            for (int k = 0; k < 4; ++k) {
                _mm256_store_si256(reinterpret_cast<__m256i *>(R.q + 128 * h + 32 * k), _mm256_sub_epi8(g[k], k32));
            }
            for (int c = 0; c < 2; ++c) {  // elements 128h + 64c ..: blocks 8h + 4c .. 8h + 4c + 3
                const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(g[2 * c]), g[2 * c + 1], 1);
                const __m512i idx = _mm512_add_epi8(lane, _mm512_set1_epi8(static_cast<char>(8 * h + 4 * c)));
                scaled = _mm512_dpbusd_epi32(scaled, q, _mm512_shuffle_epi8(scales, idx));
            }
        }
        int32_t scale_sum = 0;
        for (int j = 0; j < 16; ++j) {
            R.sc[j] = B.scales[j];
            scale_sum += B.scales[j];
        }
        const int32_t bias = _mm512_reduce_add_epi32(scaled) - 512 * scale_sum;
        R.bias = 128 * bias;
        R.d = f16_to_f32(B.d);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m512 * acc) {
        __m512i isum[N];
        for (int i = 0; i < N; ++i) isum[i] = _mm512_setzero_si512();
        add_scaled_blocks<N, 16, 4>(rows, T.q, isum);  // 16-element blocks
        const __m512 ad = _mm512_load_ps(T.d);
        for (int i = 0; i < N; ++i) {  // fold_q8_k
            const __m512i total = _mm512_sub_epi32(isum[i], _mm512_set1_epi32(rows[i]->bias));
            const __m512 d = _mm512_mul_ps(ad, _mm512_set1_ps(rows[i]->d));
            acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(d, _mm512_cvtepi32_ps(total)));
        }
    }
};

// ---- q8_0 tokens (q5_0, Q8_0) ------------------------------------------------------------------------------

struct alignas(64) TokensQ80 {
    static constexpr uint64_t kLayout = 11;
    using Act = BlockQ8_0;
    uint8_t q[8][kGroup][4];
    float d[kGroup];

    static void pack_group(TokensQ80 * out, const BlockQ8_0 * const * A, int64_t nb) {
        for (int t = 0; t < kGroup; ++t) {
            for (int64_t b = 0; b < nb; ++b) out[b].set(t, A[t] != nullptr ? &A[t][b] : nullptr);
        }
    }

    void set(int t, const BlockQ8_0 * A) {
        for (int k = 0; k < 8; ++k) put_biased(q[k][t], A != nullptr ? A->qs + 4 * k : nullptr);
        d[t] = A != nullptr ? f16_to_f32(A->d) : 0.0f;
    }
};

// A 32-element block of signed values with one f32 scale: q5_0 (q - 16) and Q8_0.
struct Row32 {
    int8_t q[32];
    int32_t bias;  // 128 * sum of q
    float d;
};

template <int N>
inline void block32(const Row32 * const * rows, const TokensQ80 & T, __m512 * acc) {
    __m512i s[N][2];  // two chains a row, the first from -bias: their sum is the twin's
    for (int i = 0; i < N; ++i) {
        s[i][0] = _mm512_set1_epi32(-rows[i]->bias);
        s[i][1] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 8; ++k) {
        const __m512i a = load(T.q[k]);
        for (int i = 0; i < N; ++i) s[i][k & 1] = _mm512_dpbusd_epi32(s[i][k & 1], a, broadcast4(rows[i]->q + 4 * k));
    }
    const __m512 ad = _mm512_load_ps(T.d);
    for (int i = 0; i < N; ++i) {  // fold_q8_0 / vec_dot_q8_0: (d_w * d_a) * isum
        const __m512i isum = _mm512_add_epi32(s[i][0], s[i][1]);
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(rows[i]->d), ad);
        acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum)));
    }
}

struct Q50 {
    using Weight = BlockQ5_0;
    using Tokens = TokensQ80;
    static constexpr int kBlock = 32;
    using Row = Row32;

    static void decode(const BlockQ5_0 & B, Row & R) {
        const __m256i v = q5_0_values(B);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(R.q), v);
        R.bias = 128 * byte_sum(v);
        R.d = f16_to_f32(B.d);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m512 * acc) {
        block32<N>(rows, T, acc);
    }
};

struct Q80 {
    using Weight = BlockQ8_0;
    using Tokens = TokensQ80;
    static constexpr int kBlock = 32;
    using Row = Row32;

    static void decode(const BlockQ8_0 & B, Row & R) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qs));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(R.q), v);
        R.bias = 128 * byte_sum(v);
        R.d = f16_to_f32(B.d);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m512 * acc) {
        block32<N>(rows, T, acc);
    }
};

// ---- the product -----------------------------------------------------------------------------------------

// Group g's block b at [g * nb + b]. Packed once per product per thread (act_key), as the tile unit's.
template <class Tok>
const Tok * pack_tokens(const void * act, size_t act_stride, int64_t nb, int64_t n_tok, uint64_t key) {
    const int64_t groups = (n_tok + kGroup - 1) / kGroup;
    bool fill;
    auto * p = reinterpret_cast<Tok *>(Workspace::scratch().kernel_block_for(
        KernelBlock::packed_tokens, static_cast<size_t>(groups * nb) * sizeof(Tok), packed_tokens_tag(key, Tok::kLayout), fill));
    if (!fill) return p;
    for (int64_t g = 0; g < groups; ++g) {
        const typename Tok::Act * A[kGroup];
        for (int n = 0; n < kGroup; ++n) {
            const int64_t t = g * kGroup + n;
            A[n] = t < n_tok ? reinterpret_cast<const typename Tok::Act *>(static_cast<const uint8_t *>(act) + t * act_stride) : nullptr;
        }
        Tok::pack_group(p + g * nb, A, nb);
    }
    return p;
}

template <class T, int N>
void rows_by_group(const typename T::Row * first, int64_t nb, const typename T::Tokens * tok, __m512 * acc) {
    for (int i = 0; i < N; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const typename T::Row * rows[N];
        for (int i = 0; i < N; ++i) rows[i] = first + i * nb + b;
        T::template block<N>(rows, tok[b], acc);
    }
}

// Rows first..first+N-1 of the decoded block against a group: row i's 16 token lanes to out[first + i].
template <class T, int N>
void rows_of_group(const typename T::Row * decoded, int first, int64_t nb, const typename T::Tokens * tok, __m512 * out) {
    rows_by_group<T, N>(decoded + first * nb, nb, tok, out + first);
}

template <class T>
void gemm(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows, int64_t n_tok,
          float * y, size_t y_stride, uint64_t act_key) {
    using Row = typename T::Row;
    using Tok = typename T::Tokens;
    const int64_t nb = n / T::kBlock;
    if (nb == 0 || n_rows <= 0 || n_tok <= 0) return;
    const Tok * tokens = pack_tokens<Tok>(act, act_stride, nb, n_tok, act_key);
    auto * decoded = reinterpret_cast<Row *>(
        Workspace::scratch().kernel_block(KernelBlock::tile_weights, kRowBlock * static_cast<size_t>(nb) * sizeof(Row)));
    const int64_t groups = (n_tok + kGroup - 1) / kGroup;
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / (static_cast<size_t>(nb) * sizeof(Tok))));
    const auto * wb = static_cast<const uint8_t *>(w);
    for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
        const int64_t g1 = std::min(groups, g0 + chunk);
        for (int64_t r = 0; r < n_rows; r += kRowBlock) {
            const int rows = static_cast<int>(std::min<int64_t>(kRowBlock, n_rows - r));
            for (int i = 0; i < rows; ++i) {
                const auto * row = reinterpret_cast<const typename T::Weight *>(wb + (r + i) * w_stride);
                for (int64_t b = 0; b < nb; ++b) {
                    prefetch_ahead(row + b);
                    T::decode(row[b], decoded[i * nb + b]);
                }
            }
            for (int64_t g = g0; g < g1; ++g) {
                // The group's results for these rows, transposed: each token's row of y takes one run.
                __m512 out[kRowBlock], by_token[kGroup];
                const Tok * tok = tokens + g * nb;
                int i = 0;
                for (; i + kRows <= rows; i += kRows) rows_of_group<T, kRows>(decoded, i, nb, tok, out);
                switch (rows - i) {
                    case 3: rows_of_group<T, 3>(decoded, i, nb, tok, out); break;
                    case 2: rows_of_group<T, 2>(decoded, i, nb, tok, out); break;
                    case 1: rows_of_group<T, 1>(decoded, i, nb, tok, out); break;
                    default: break;
                }
                for (int k = rows; k < kRowBlock; ++k) out[k] = _mm512_setzero_ps();
                avx512::transpose16(out, by_token);
                const int toks = static_cast<int>(std::min<int64_t>(kGroup, n_tok - g * kGroup));
                const __mmask16 keep = static_cast<__mmask16>((1u << rows) - 1);
                for (int t = 0; t < toks; ++t) {
                    _mm512_mask_storeu_ps(y + (g * kGroup + t) * static_cast<int64_t>(y_stride) + r, keep, by_token[t]);
                }
            }
        }
    }
}

template <class T>
size_t token_bytes(int64_t n, int64_t n_tok) {
    return static_cast<size_t>((n_tok + kGroup - 1) / kGroup * (n / T::kBlock)) * sizeof(typename T::Tokens);
}

template <class T>
size_t weight_bytes(int64_t n) {
    return kRowBlock * static_cast<size_t>(n / T::kBlock) * sizeof(typename T::Row);
}

// The entries' gemm: products of up to kInt8LanesMaxTokens tokens in the lanes of rows by tokens
// (kernels_quant_int8_lanes_avx512.cpp), larger ones 16 tokens to a group here.
template <class T, tensor::ElemType E>
void product(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows,
             int64_t n_tok, float * y, size_t y_stride, uint64_t act_key) {
    if (n_tok <= kInt8LanesMaxTokens) {
        int8_lanes_avx512(E)(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride, act_key);
        return;
    }
    gemm<T>(w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride, act_key);
}

// From this many tokens a product takes gemm (the lanes up to kInt8LanesMaxTokens); fewer go through the row
// kernels' tiles, which decode a row in registers for each call (one token: they stream a row at the memory's
// speed). Measured with bench_quant_batch (the scale shape's products from DRAM, one thread, Zen 4), microseconds,
// the tiles against the lanes (up to 4 tokens in 256-bit registers, whose cost hardly depends on the count):
// q4_K 2560 -> 4096 at 2 / 3 / 4 tokens 490 / 634 / 815 against 533 / 537 / 543, 2560 -> 640 78 / 100 / 128
// against 79-89 / 88 / 89; q6_K 2560 -> 4096 590 / 780 / 928 against 612 / 638 / 634; q5_0 640 -> 2560 110 / 146
// against 111-120 / 119, 320 -> 10240 225 / 290 against 220-250 / 250, 2560 -> 4096 973 against 749 at 2; Q8_0
// 2560 -> 4096 880 against 547 at 2, 640 -> 2560 113 at one token against 89 (two threads: 61-65 against 54-55;
// its wide rows keep the row kernel for one token, 2560 -> 640 59-60 against 62-64). Since q4_K and q6_K have
// 4-row tiles (kernels_quant_int8_avx512.cpp), the same runs (2026-12-06, alternated twice): q4_K at 3 tokens
// 79 / 493 / 1973-1992 us (2560 -> 640 / 4096 / 16384) against the lanes' 85 / 528-683 / 2080-2638, at 4 tokens
// 100 / 629-633 / 2517-2742 against 86 / 529 / 2101; q6_K at 3 tokens 105-109 / 645-654 / 2620-2710 against 103 /
// 634 / 2448-2529. Q8_0's 4-row tiles (kernels_float_avx512.cpp) take its narrow rows' one-token products too: one
// thread 640 -> 2560 73-76 against 85 us, 320 -> 10240 173 against 193; two threads 50-51 against 48-50 and 108
// against 103-107.
// q5_0's 4-row tiles take its wide rows too, the next tile fetched as one stream (2026-12-06, two runs): 2560 ->
// 4096 at 1 / 2 / 3 tokens 437-444 / 621-626 / 836-839 us against the row kernel's 818-989 at one and the lanes'
// 750 at two, 2560 -> 16384 1780-1815 / 2526-2758 / 3328-3400 against the lanes' about 2980 at 2-4.
// q6_K's tiles (their qh bits and correction leaner since ead91ea) take 3 and 4 tokens too (2026-12-07, the two
// binaries alternated, a slow hour of the machine): two threads from DRAM, 3 tokens 2560 -> 640 / 4096 / 16384 76-91
// / 333-387 / 1418-1477 us against the lanes' 105-122 / 398-466 / 2015-2837; 4 tokens 77-89 / 409-468 / 1600-1795
// against 91-92 / 425-464 / 1617-2068; one thread from the L3 at 4 tokens 136 / 876-883 / 2882-3523 against
// 147-160 / 939-1032 / 3957-4051.
// q5_0's tiles take 3 tokens as well (the same runs; 2560 -> 640 / 640 -> 2560 / 320 -> 10240 / 2560 -> 4096): two
// threads from DRAM 63-76 / 65-96 / 144-170 / 380-487 us against the lanes' 95-140 / 71-98 / 137-165 / 466-529, one
// thread from the L3 140-145 / 116-146 / 241-325 / 782-918 against 167-189 / 180-190 / 346-363 / 1109-1204; at 4
// tokens the lanes stay ahead on the wide rows (one thread from the L3, 2560 -> 4096 762-792 against 905-1151).
// Q8_0's rows take 2 tokens again since its tiles' faster scales (aad5b21; two threads from DRAM, 2560 -> 640 / 640 ->
// 2560 / 320 -> 10240 / 2560 -> 4096 / 2560 -> 16384 in five alternations: 52-78 / 56-71 / 112-137 / 349-436 /
// 1190-1604 us against the lanes' 68-115 / 68-108 / 121-198 / 359-431 / 1375-1911); at 3 the lanes are ahead (76-77
// / 67-111 / 119-191 / 382-405 / 1346-1481 against 68-77 / 75-76 / 139-158 / 471-484 / 1826-2105).
struct MinTokens {
    int wide, narrow;
};
constexpr MinTokens kGemmMinTokensQ4K = {4, 4};
constexpr MinTokens kGemmMinTokensQ6K = {5, 5};
constexpr MinTokens kGemmMinTokensQ50 = {4, 4};
constexpr MinTokens kGemmMinTokensQ80 = {3, 3};

void set_min_tokens(TypeKernels & k, MinTokens m) { k.set_gemm_min_tokens(m.wide, m.narrow); }

}  // namespace

size_t int8_gemm_avx512_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok) {
    const size_t lanes = int8_lanes_avx512_token_bytes(type, n, n_tok);
    switch (type) {
        case tensor::ElemType::Q4_K: return std::max(lanes, token_bytes<Q4K>(n, n_tok));
        case tensor::ElemType::Q6_K: return std::max(lanes, token_bytes<Q6K>(n, n_tok));
        case tensor::ElemType::Q5_0: return std::max(lanes, token_bytes<Q50>(n, n_tok));
        case tensor::ElemType::Q8_0: return std::max(lanes, token_bytes<Q80>(n, n_tok));
        default: return 0;
    }
}

size_t int8_gemm_avx512_weight_bytes(tensor::ElemType type, int64_t n) {
    const size_t lanes = int8_lanes_avx512_weight_bytes(type, n);
    switch (type) {
        case tensor::ElemType::Q4_K: return std::max(lanes, weight_bytes<Q4K>(n));
        case tensor::ElemType::Q6_K: return std::max(lanes, weight_bytes<Q6K>(n));
        case tensor::ElemType::Q5_0: return std::max(lanes, weight_bytes<Q50>(n));
        case tensor::ElemType::Q8_0: return std::max(lanes, weight_bytes<Q80>(n));
        default: return 0;
    }
}

void add_int8_gemm_avx512(TypeKernels * table) {
    table[static_cast<uint32_t>(tensor::ElemType::Q4_K)].gemm = product<Q4K, tensor::ElemType::Q4_K>;
    table[static_cast<uint32_t>(tensor::ElemType::Q6_K)].gemm = product<Q6K, tensor::ElemType::Q6_K>;
    table[static_cast<uint32_t>(tensor::ElemType::Q5_0)].gemm = product<Q50, tensor::ElemType::Q5_0>;
    set_min_tokens(table[static_cast<uint32_t>(tensor::ElemType::Q4_K)], kGemmMinTokensQ4K);
    set_min_tokens(table[static_cast<uint32_t>(tensor::ElemType::Q6_K)], kGemmMinTokensQ6K);
    set_min_tokens(table[static_cast<uint32_t>(tensor::ElemType::Q5_0)], kGemmMinTokensQ50);
}

void add_q8_0_int8_gemm_avx512(TypeKernels & k) {
    if (k.act_type != tensor::ElemType::Q8_0) return;
    k.gemm = product<Q80, tensor::ElemType::Q8_0>;
    set_min_tokens(k, kGemmMinTokensQ80);
}

}  // namespace offgrid::ops::cpu::quant

#else

namespace offgrid::ops::cpu::quant {
size_t int8_gemm_avx512_token_bytes(tensor::ElemType, int64_t, int64_t) { return 0; }
size_t int8_gemm_avx512_weight_bytes(tensor::ElemType, int64_t) { return 0; }
void add_int8_gemm_avx512(TypeKernels *) {}
void add_q8_0_int8_gemm_avx512(TypeKernels &) {}
}  // namespace offgrid::ops::cpu::quant

#endif
