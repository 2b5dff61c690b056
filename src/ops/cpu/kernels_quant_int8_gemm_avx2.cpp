// Prompt products of the 8-bit-activation path at AVX2 (TypeKernels::gemm of the q4_K, q5_K, q6_K and q5_0 entries
// and of Q8_0's int8 variant): tokens in lanes.
//
// The row kernels (kernels_quant_int8_avx2.cpp) multiply one weight row by one token's bytes and then fold the
// 16 int16 lanes of each `vpmaddubsw` back into per-block sums: shuffles that cost about as much as the
// multiplies. Here the tokens are packed once per product, 8 to a group, so that 32 bytes hold 4 consecutive
// activation bytes of each of the 8 tokens; a weight row's 4 matching values are broadcast to every token, and
// one `vpmaddubsw` leaves each token's two pair sums in its own 32-bit lane. The products of a (sub-)block are
// added in int16 while the bound allows (each type says why it holds), a `vpmaddwd` by the block's scale (or by
// ones) widens them, and the lanes stay the tokens' to the result: no horizontal sums at all. Two weight rows
// share each loaded activation vector.
//
// Bit-identical to the scalar twins (kernels_quant_scalar.cpp): the same exact integer sums of a block, then the
// twin's fold lane for lane, blocks in order (no contraction: kernels_quant_common.h).
#include "ops/cpu/kernels_quant_int8.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "ops/cpu/kernels_quant_int8_avx2.h"
#include "ops/cpu/kernels_quant_int8_entries.h"
#include "ops/workspace.h"

namespace offgrid::ops::cpu::quant {

namespace {

constexpr int kGroup = 8;                   // tokens in a group: the 8 int32 lanes
constexpr size_t kChunkBytes = 192 * 1024;  // the token images of a chunk of groups stay in L2 across the rows

inline __m256i broadcast4(const void * p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// The weight rows are one stream (two rows at a time, one after the other): fetched 1 KiB ahead, as the row
// kernels' (the hardware prefetch alone loses about half the DRAM speed on some VMs).
template <class W>
inline void prefetch_ahead(const W * block) {
    const char * ahead = reinterpret_cast<const char *>(block) + 1024;
    for (size_t off = 0; off < sizeof(W); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
}

inline __m256i load(const void * p) { return _mm256_load_si256(static_cast<const __m256i *>(p)); }

// f(std::integral_constant<int, K>) for K = 0 .. N - 1, unrolled (a group's shuffle takes its index as an immediate).
template <int N, class F>
inline void unrolled(F && f) {
    [&]<int... K>(std::integer_sequence<int, K...>) {
        (f(std::integral_constant<int, K>{}), ...);
    }(std::make_integer_sequence<int, N>{});
}

// A decoded row's 8 consecutive groups of 4 values (32 bytes at p), each group broadcast to every token's lane by
// group<K>(): two 128-bit loads repeated in both halves, then one `vpshufd` a group. A broadcast load a group (and
// the tokens' vector loaded again for the second row) left the two vector-load pipes of Zen 3 the bound of the
// q4_K product (llvm-mca: 19 cycles a sub-block of two rows, all on the loads).
struct Groups8 {
    __m256i lo, hi;
    void set(const void * p) {
        lo = _mm256_broadcastsi128_si256(_mm_load_si128(static_cast<const __m128i *>(p)));
        hi = _mm256_broadcastsi128_si256(_mm_load_si128(static_cast<const __m128i *>(p) + 1));
    }
    template <int K>
    __m256i group() const {
        return _mm256_shuffle_epi32(K < 4 ? lo : hi, (K % 4) * 0x55);
    }
};

// ---- q8_K tokens (q4_K, q6_K) ----------------------------------------------------------------------------

// A group's super-block: q[k] holds activation bytes 4k..4k+3 of token t at bytes 4t..4t+3; bs[p] token t's sums
// of the 16-element blocks 2p and 2p + 1 as two int16; d the tokens' scales.
struct alignas(32) TokensQ8K {
    static constexpr uint64_t kLayout = 8;  // names the packed layout (the tile unit's are 1-4)
    using Act = BlockQ8_K;
    int8_t q[64][kGroup][4];
    int16_t bs[8][kGroup][2];
    float d[kGroup];

    void set(int t, const BlockQ8_K * A) {  // A null: a token past the product's, zeros
        for (int k = 0; k < 64; ++k) {
            if (A != nullptr) {
                std::memcpy(q[k][t], A->qs + 4 * k, 4);
            } else {
                std::memset(q[k][t], 0, 4);
            }
        }
        for (int p = 0; p < 8; ++p) {
            bs[p][t][0] = A != nullptr ? A->bsums[2 * p] : 0;
            bs[p][t][1] = A != nullptr ? A->bsums[2 * p + 1] : 0;
        }
        d[t] = A != nullptr ? A->d : 0.0f;
    }
};

// q4_K (Block BlockQ4_K): quants 0..15 in element order; |a| <= 127, so a sub-block's 8 `vpmaddubsw` sums are at
// most 8 * 2 * 15 * 127 < 2^15. isum = sum of scale * quant * a, imin = sum of min * block sums (the twin's two
// sums). q5_K (BlockQ5_K) has the same header and fold; its quants (0..31, the fifth bit of sub-block j in bit j of
// qh byte l) allow only 4 sums in int16 (4 * 2 * 31 * 127 < 2^15), so a sub-block widens two halves.
template <class Block>
struct QK4Min {
    using Weight = Block;
    using Tokens = TokensQ8K;
    static constexpr int kBlock = 256;
    static constexpr bool kFifth = std::is_same_v<Block, BlockQ5_K>;
    static constexpr int kInt16Sums = kFifth ? 4 : 8;  // vpmaddubsw sums added in int16 before a vpmaddwd
    struct alignas(32) Row {
        uint8_t q[256];
        int16_t sc[8];
        int16_t mn[8][2];  // each min twice: it weighs both 16-sums of its sub-block
        float d, dmin;
    };

    static void decode(const Block & B, Row & R) {
        const __m256i m4 = _mm256_set1_epi8(0x0f), m16 = _mm256_set1_epi8(0x10);
        __m256i qh = _mm256_setzero_si256();
        if constexpr (kFifth) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qh));
        auto fifth = [&](__m256i v, int j) {  // bit j of each qh byte to bit 4 (no masked bit crosses a byte)
            if constexpr (!kFifth) return v;
            const __m256i at4 = j < 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
            return _mm256_or_si256(v, _mm256_and_si256(at4, m16));
        };
        for (int c = 0; c < 4; ++c) {  // bytes 32c..32c+31: sub-block 2c in the low nibbles, 2c + 1 in the high
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qs + 32 * c));
            _mm256_store_si256(reinterpret_cast<__m256i *>(R.q + 64 * c), fifth(_mm256_and_si256(x, m4), 2 * c));
            _mm256_store_si256(reinterpret_cast<__m256i *>(R.q + 64 * c + 32),
                               fifth(_mm256_and_si256(_mm256_srli_epi16(x, 4), m4), 2 * c + 1));
        }
        // Scales and mins widened in vectors (a byte loop here took a third of an 8-token product).
        uint64_t sc, mn;
        k4_scales_mins_u64(B.scales, sc, mn);
        const __m128i mv = _mm_cvtsi64_si128(static_cast<long long>(mn));
        _mm_store_si128(reinterpret_cast<__m128i *>(R.sc), _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(sc))));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(R.mn), _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv)));
        R.d = _cvtsh_ss(B.d);
        R.dmin = _cvtsh_ss(B.dmin);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m256 * acc) {
        __m256i isum[N], imin[N];
        for (int i = 0; i < N; ++i) isum[i] = imin[i] = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j) {
            Groups8 w[N];
            for (int i = 0; i < N; ++i) w[i].set(rows[i]->q + 32 * j);
            __m256i s[N];
            unrolled<8>([&](auto kc) {
                constexpr int k = kc;
                const __m256i a = load(T.q[8 * j + k]);
                for (int i = 0; i < N; ++i) {
                    const __m256i p = _mm256_maddubs_epi16(w[i].template group<k>(), a);
                    s[i] = k % kInt16Sums == 0 ? p : _mm256_add_epi16(s[i], p);
                }
                if constexpr (k % kInt16Sums == kInt16Sums - 1) {
                    for (int i = 0; i < N; ++i) {
                        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s[i], _mm256_set1_epi16(rows[i]->sc[j])));
                    }
                }
            });
        }
        for (int j = 0; j < 8; ++j) {  // apart: the loop above keeps its sums in registers
            const __m256i bs = load(T.bs[j]);
            for (int i = 0; i < N; ++i) imin[i] = _mm256_add_epi32(imin[i], _mm256_madd_epi16(bs, broadcast4(rows[i]->mn[j])));
        }
        const __m256 ad = _mm256_load_ps(T.d);
        for (int i = 0; i < N; ++i) {  // fold_q8_k_min
            const __m256 d = _mm256_mul_ps(ad, _mm256_set1_ps(rows[i]->d));
            const __m256 dmin = _mm256_mul_ps(ad, _mm256_set1_ps(rows[i]->dmin));
            acc[i] = _mm256_add_ps(acc[i], _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[i])),
                                                         _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(imin[i]))));
        }
    }
};

using Q4K = QK4Min<BlockQ4_K>;
using Q5K = QK4Min<BlockQ5_K>;

// q6_K: the unsigned 6-bit quants q (value q - 32) in element order; two `vpmaddubsw` sums of a 16-element block
// are at most 2 * 2 * 63 * 127 < 2^15. isum = sum of scale * q * a - 32 * sum of scale * block sums, which is the
// twin's sum of scale * (q - 32) * a.
struct Q6K {
    using Weight = BlockQ6_K;
    using Tokens = TokensQ8K;
    static constexpr int kBlock = 256;
    struct alignas(32) Row {
        uint8_t q[256];
        int16_t sc[16];
        float d;
    };

    static void decode(const BlockQ6_K & B, Row & R) {
        for (int h = 0; h < 2; ++h) {
            __m256i g[4];
            q6_k_values(B, h, g);
            for (int k = 0; k < 4; ++k) _mm256_store_si256(reinterpret_cast<__m256i *>(R.q + 128 * h + 32 * k), g[k]);
        }
        for (int j = 0; j < 16; ++j) R.sc[j] = B.scales[j];
        R.d = _cvtsh_ss(B.d);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m256 * acc) {
        __m256i isum[N], corr[N];
        for (int i = 0; i < N; ++i) isum[i] = corr[i] = _mm256_setzero_si256();
        for (int jj = 0; jj < 8; ++jj) {  // two 16-element blocks (8 groups of 4): pairs of groups
            Groups8 w[N];
            for (int i = 0; i < N; ++i) w[i].set(rows[i]->q + 32 * jj);
            unrolled<4>([&](auto hc) {
                constexpr int h = hc;
                const int k = 8 * jj + 2 * h, j = 2 * jj + h / 2;
                const __m256i a0 = load(T.q[k]), a1 = load(T.q[k + 1]);
                for (int i = 0; i < N; ++i) {
                    const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(w[i].template group<2 * h>(), a0),
                                                       _mm256_maddubs_epi16(w[i].template group<2 * h + 1>(), a1));
                    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(s, _mm256_set1_epi16(rows[i]->sc[j])));
                }
            });
        }
        for (int p = 0; p < 8; ++p) {
            const __m256i bs = load(T.bs[p]);
            for (int i = 0; i < N; ++i) corr[i] = _mm256_add_epi32(corr[i], _mm256_madd_epi16(bs, broadcast4(rows[i]->sc + 2 * p)));
        }
        const __m256 ad = _mm256_load_ps(T.d);
        for (int i = 0; i < N; ++i) {  // fold_q8_k
            const __m256i total = _mm256_sub_epi32(isum[i], _mm256_slli_epi32(corr[i], 5));
            const __m256 d = _mm256_mul_ps(ad, _mm256_set1_ps(rows[i]->d));
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(d, _mm256_cvtepi32_ps(total)));
        }
    }
};

// ---- q8_0 tokens (q5_0) ------------------------------------------------------------------------------------

struct alignas(32) TokensQ80 {
    static constexpr uint64_t kLayout = 9;
    using Act = BlockQ8_0;
    int8_t q[8][kGroup][4];
    int32_t sum16[kGroup];  // 16 times the sum of the token's 32 quants (q5_0's offset)
    float d[kGroup];

    void set(int t, const BlockQ8_0 * A) {
        int32_t sum = 0;
        for (int k = 0; k < 8; ++k) {
            if (A != nullptr) {
                std::memcpy(q[k][t], A->qs + 4 * k, 4);
                for (int e = 0; e < 4; ++e) sum += A->qs[4 * k + e];
            } else {
                std::memset(q[k][t], 0, 4);
            }
        }
        sum16[t] = 16 * sum;
        d[t] = A != nullptr ? f16_to_f32(A->d) : 0.0f;
    }
};

// q5_0: the unsigned 5-bit quants q (value q - 16), so sum((q - 16) * a) = sum(q * a) - 16 * sum(a); a half
// block's 4 `vpmaddubsw` sums are at most 4 * 2 * 31 * 127 < 2^15 (q8_0 activations lie in -127..127).
struct Q50 {
    using Weight = BlockQ5_0;
    using Tokens = TokensQ80;
    static constexpr int kBlock = 32;
    struct alignas(32) Row {
        uint8_t q[32];
        float d;
    };

    static void decode(const BlockQ5_0 & B, Row & R) {
        const __m256i q = q5_0_unsigned(B);
        _mm256_store_si256(reinterpret_cast<__m256i *>(R.q), q);
        R.d = _cvtsh_ss(B.d);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m256 * acc) {
        __m256i s[N][2];
        Groups8 w[N];
        for (int i = 0; i < N; ++i) w[i].set(rows[i]->q);
        unrolled<8>([&](auto kc) {
            constexpr int k = kc;
            const __m256i a = load(T.q[k]);
            for (int i = 0; i < N; ++i) {
                const __m256i p = _mm256_maddubs_epi16(w[i].template group<k>(), a);
                __m256i & h = s[i][k / 4];
                h = k % 4 == 0 ? p : _mm256_add_epi16(h, p);
            }
        });
        const __m256 ad = _mm256_load_ps(T.d);
        const __m256i sum16 = load(T.sum16), ones = _mm256_set1_epi16(1);
        for (int i = 0; i < N; ++i) {  // fold_q8_0
            const __m256i isum = _mm256_sub_epi32(
                _mm256_add_epi32(_mm256_madd_epi16(s[i][0], ones), _mm256_madd_epi16(s[i][1], ones)), sum16);
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(rows[i]->d), ad);
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
        }
    }
};

// Q8_0's int8 variant: signed quants, so |w| against a * sign(w) as its row kernels take them
// (kernels_quant_int8_avx2.cpp); a `vpmaddubsw` pair (at most 2 * 128 * 127) is widened at once, as two would not
// fit in int16. The tokens' layout is q5_0's (the offset sums unused).
struct Q80 {
    using Weight = BlockQ8_0;
    using Tokens = TokensQ80;
    static constexpr int kBlock = 32;
    struct alignas(32) Row {
        int8_t q[32];
        uint8_t q_abs[32];
        float d;
    };

    static void decode(const BlockQ8_0 & B, Row & R) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.qs));
        _mm256_store_si256(reinterpret_cast<__m256i *>(R.q), q);
        _mm256_store_si256(reinterpret_cast<__m256i *>(R.q_abs), _mm256_sign_epi8(q, q));
        R.d = _cvtsh_ss(B.d);
    }

    template <int N>
    static void block(const Row * const * rows, const Tokens & T, __m256 * acc) {
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i isum[N];
        Groups8 w[N], w_abs[N];
        for (int i = 0; i < N; ++i) {
            w[i].set(rows[i]->q);
            w_abs[i].set(rows[i]->q_abs);
        }
        unrolled<8>([&](auto kc) {
            constexpr int k = kc;
            const __m256i a = load(T.q[k]);
            for (int i = 0; i < N; ++i) {
                const __m256i signed_a = _mm256_sign_epi8(a, w[i].template group<k>());
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs[i].template group<k>(), signed_a), ones);
                isum[i] = k == 0 ? p : _mm256_add_epi32(isum[i], p);
            }
        });
        const __m256 ad = _mm256_load_ps(T.d);
        for (int i = 0; i < N; ++i) {  // fold_q8_0
            const __m256 d = _mm256_mul_ps(_mm256_set1_ps(rows[i]->d), ad);
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[i])));
        }
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
        for (int n = 0; n < kGroup; ++n) {
            const int64_t t = g * kGroup + n;
            const auto * A = t < n_tok ? reinterpret_cast<const typename Tok::Act *>(static_cast<const uint8_t *>(act) + t * act_stride) : nullptr;
            for (int64_t b = 0; b < nb; ++b) p[g * nb + b].set(n, A != nullptr ? A + b : nullptr);
        }
    }
    return p;
}

// The next rows' bytes [next, next + next_bytes) are fetched into L2 a slice per block while this pass computes:
// decoding the rows right before their products leaves the bus idle during them, which at a group or two (a step
// of a few sequences) costs more than the products (next null: nothing to fetch).
template <class T, int N>
void rows_by_group(const typename T::Row * first, int64_t nb, const typename T::Tokens * tok, __m256 * acc,
                   const uint8_t * next, size_t next_bytes) {
    for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
    const size_t slice = (next_bytes / static_cast<size_t>(nb) + 127) & ~size_t{63};
    for (int64_t b = 0; b < nb; ++b) {
        if (next != nullptr) {
            for (size_t off = static_cast<size_t>(b) * slice, end = std::min(next_bytes, off + slice); off < end; off += 64) {
                _mm_prefetch(reinterpret_cast<const char *>(next + off), _MM_HINT_T1);
            }
        }
        const typename T::Row * rows[2] = {first + b, first + nb + b};
        T::template block<N>(rows, tok[b], acc);
    }
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
        Workspace::scratch().kernel_block(KernelBlock::tile_weights, 2 * static_cast<size_t>(nb) * sizeof(Row)));
    const int64_t groups = (n_tok + kGroup - 1) / kGroup;
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / (static_cast<size_t>(nb) * sizeof(Tok))));
    const auto * wb = static_cast<const uint8_t *>(w);
    for (int64_t g0 = 0; g0 < groups; g0 += chunk) {
        const int64_t g1 = std::min(groups, g0 + chunk);
        for (int64_t r = 0; r < n_rows; r += 2) {
            const int rows = n_rows - r >= 2 ? 2 : 1;
            for (int i = 0; i < rows; ++i) {
                const auto * row = reinterpret_cast<const typename T::Weight *>(wb + (r + i) * w_stride);
                for (int64_t b = 0; b < nb; ++b) {
                    prefetch_ahead(row + b);
                    T::decode(row[b], decoded[i * nb + b]);
                }
            }
            // The next pair's rows, fetched during this pair's first group.
            const int next_rows = static_cast<int>(std::min<int64_t>(2, n_rows - r - 2));
            const uint8_t * next = next_rows > 0 ? wb + (r + 2) * w_stride : nullptr;
            const size_t next_bytes = next_rows > 0 ? (next_rows - 1) * w_stride + nb * sizeof(typename T::Weight) : 0;
            for (int64_t g = g0; g < g1; ++g) {
                __m256 acc[2];
                const uint8_t * fetch = g == g0 ? next : nullptr;
                if (rows == 2) {
                    rows_by_group<T, 2>(decoded, nb, tokens + g * nb, acc, fetch, next_bytes);
                } else {
                    rows_by_group<T, 1>(decoded, nb, tokens + g * nb, acc, fetch, next_bytes);
                }
                const int toks = static_cast<int>(std::min<int64_t>(kGroup, n_tok - g * kGroup));
                for (int i = 0; i < rows; ++i) {
                    alignas(32) float v[kGroup];
                    _mm256_store_ps(v, acc[i]);
                    for (int t = 0; t < toks; ++t) y[(g * kGroup + t) * static_cast<int64_t>(y_stride) + r + i] = v[t];
                }
            }
        }
    }
}

template <class T>
size_t token_bytes(int64_t n, int64_t n_tok) {
    return static_cast<size_t>((n_tok + kGroup - 1) / kGroup * (n / T::kBlock)) * sizeof(typename T::Tokens);
}

}  // namespace

size_t int8_gemm_avx2_token_bytes(tensor::ElemType type, int64_t n, int64_t n_tok) {
    switch (type) {
        case tensor::ElemType::Q4_K: return token_bytes<Q4K>(n, n_tok);
        case tensor::ElemType::Q5_K: return token_bytes<Q5K>(n, n_tok);
        case tensor::ElemType::Q6_K: return token_bytes<Q6K>(n, n_tok);
        case tensor::ElemType::Q5_0: return token_bytes<Q50>(n, n_tok);
        case tensor::ElemType::Q8_0: return token_bytes<Q80>(n, n_tok);
        default: return 0;
    }
}

size_t int8_gemm_avx2_weight_bytes(tensor::ElemType type, int64_t n) {
    switch (type) {
        case tensor::ElemType::Q4_K: return 2 * static_cast<size_t>(n / Q4K::kBlock) * sizeof(Q4K::Row);
        case tensor::ElemType::Q5_K: return 2 * static_cast<size_t>(n / Q5K::kBlock) * sizeof(Q5K::Row);
        case tensor::ElemType::Q6_K: return 2 * static_cast<size_t>(n / Q6K::kBlock) * sizeof(Q6K::Row);
        case tensor::ElemType::Q5_0: return 2 * static_cast<size_t>(n / Q50::kBlock) * sizeof(Q50::Row);
        case tensor::ElemType::Q8_0: return 2 * static_cast<size_t>(n / Q80::kBlock) * sizeof(Q80::Row);
        default: return 0;
    }
}

// From 5 tokens: one group, partly empty, costs about what its 8 tokens do, and from 5 tokens less than the row
// kernels' 4-token tiles plus a second pass (bench_quant_batch 2, scale shapes from DRAM, Zen 3, microseconds, rows
// against gemm at 5 / 6 / 7 tokens, two runs each: q4_K 2560 -> 640 121-158 / 147-184 / 162-206 against 148 / 151-153
// / 133-150; 2560 -> 4096 926-1145 / 1389-1407 / 962-1532 against 766-939 / 902-966 / 801-909; q5_0 640 -> 2560
// 272-447 / 311-516 / 349-451 against 210-233 / 218-245 / 221-253; at 4 tokens the rows still win, 93-121 against
// 143-145 for q4_K 2560 -> 640).
constexpr int kGemmMinTokensAvx2 = 5;

void add_int8_gemm_avx2(TypeKernels * table) {
    table[static_cast<uint32_t>(tensor::ElemType::Q4_K)].gemm = gemm<Q4K>;
    table[static_cast<uint32_t>(tensor::ElemType::Q5_K)].gemm = gemm<Q5K>;
    table[static_cast<uint32_t>(tensor::ElemType::Q6_K)].gemm = gemm<Q6K>;
    table[static_cast<uint32_t>(tensor::ElemType::Q5_0)].gemm = gemm<Q50>;
    for (auto type : {tensor::ElemType::Q4_K, tensor::ElemType::Q5_K, tensor::ElemType::Q6_K, tensor::ElemType::Q5_0}) {
        table[static_cast<uint32_t>(type)].set_gemm_min_tokens(kGemmMinTokensAvx2, kGemmMinTokensAvx2);
    }
}

void add_q8_0_int8_gemm_avx2(TypeKernels & k) {
    if (k.act_type != tensor::ElemType::Q8_0) return;
    k.gemm = gemm<Q80>;
    k.set_gemm_min_tokens(kGemmMinTokensAvx2, kGemmMinTokensAvx2);
}

}  // namespace offgrid::ops::cpu::quant

#else

namespace offgrid::ops::cpu::quant {
size_t int8_gemm_avx2_token_bytes(tensor::ElemType, int64_t, int64_t) { return 0; }
size_t int8_gemm_avx2_weight_bytes(tensor::ElemType, int64_t) { return 0; }
void add_int8_gemm_avx2(TypeKernels *) {}
void add_q8_0_int8_gemm_avx2(TypeKernels &) {}
}  // namespace offgrid::ops::cpu::quant

#endif
