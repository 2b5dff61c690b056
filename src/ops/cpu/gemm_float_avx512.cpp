// AVX-512 prompt products of F32 weights (ops/cpu/gemm_float.h), compiled with the AVX-512 flags and reached only
// through the dispatch when active_isa() allows it.
//
// Register tile: 4 rows by 6 tokens, 24 accumulators + 4 weight vectors + 1 activation vector (29 of the 32 zmm):
// per step of 16 columns 10 loads feed 24 FMAs, where the 4x4 tiles of the few-token path load 8 for 16.
// Each accumulator is one (row, token) output and sees its row's vectors in index order, then the tail (weights
// masked, tokens zero-padded by the packing: the products vec_dot's masked loads give), then the same hsum as
// vec_dot_float (kernels_float_avx512.cpp; hsum4 adds the same pairs for four rows at once): bit for bit the
// level's vec_dot.
//
// Blocking (docs/kernels.md, "Prompt products (F32)"): the tokens packed once per thread per product
// (pack_tokens), rows in blocks of rb (their weights stay in L2 for every token group after the first), token
// groups, then the block's 4-row tiles. The table's entry takes whole rows; the variants for bench_gemm may cut
// the columns into chunks of kc with the accumulators parked between chunks (measured slower everywhere).
#include "ops/cpu/gemm_float.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)
// GCC 12's AVX-512 headers build results on _mm512_undefined_*(), which -Wall reports as uninitialised
// once inlined (a false positive of the compiler's own headers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "ops/cpu/hsum_avx512.h"
#include "ops/workspace.h"

#define OFFGRID_GEMM_AVX512 1
#endif

namespace offgrid::ops::cpu {

#ifdef OFFGRID_GEMM_AVX512

namespace {

using avx512::hsum;

constexpr int kLanes = 16;
constexpr int kRows = 4;    // rows of the register tile
constexpr int kTokens = 6;  // tokens of the register tile
constexpr int kTileFloats = kRows * kTokens * kLanes;  // one parked tile

// hsum(a), hsum(b), hsum(c), hsum(d) in lanes 0-3, bit for bit: the same pairs added in the same steps as hsum
// (halves of 256, then of 128, then lanes 0+2 / 1+3, then 0+1), four vectors per instruction.
inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));  // [s8 a | s8 b]
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));  // [s8 c | s8 d]
    const __m512 s4 = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));  // s4 of a, b, c, d
    const __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 s1 = _mm512_add_ps(s2, _mm512_permute_ps(s2, _MM_SHUFFLE(1, 1, 1, 1)));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), s1));
}

// Columns [i0, i1) (whole vectors) of NR rows by NT tokens. First: start from zero (else from the parked sums).
// Last: then the masked tail of `tail` columns at i1 and the sums into y (else the accumulators parked for the
// next chunk). Compile-time flags, so the accumulators stay in registers from entry to exit.
// x is the token group's packed block (pack_tokens: the NT vectors of each step side by side, the tail
// zero-padded). Prefetch: at the steps of columns [pf_lo, pf_hi), the same columns of the 4 rows at pf into L2
// (weights from memory come in short interleaved streams the hardware prefetcher does not follow; a prefetch
// never faults, so rows past the matrix are harmless).
template <int NR, int NT, bool First, bool Last, bool Prefetch>
void tile(const float * w, size_t ws, const float * x, int64_t i0, int64_t i1, int tail, float * park, float * y,
          size_t ys, const float * pf, int64_t pf_lo, int64_t pf_hi) {
    __m512 acc[NR][NT];
    for (int r = 0; r < NR; ++r)
        for (int t = 0; t < NT; ++t)
            acc[r][t] = First ? _mm512_setzero_ps() : _mm512_load_ps(park + (r * kTokens + t) * kLanes);
    for (int64_t i = i0; i < i1; i += kLanes) {
        __m512 wv[NR];
        if constexpr (Prefetch) {
            if (i >= pf_lo && i < pf_hi) {
                for (int r = 0; r < kRows; ++r) _mm_prefetch(reinterpret_cast<const char *>(pf + r * ws + i), _MM_HINT_T1);
            }
        }
        for (int r = 0; r < NR; ++r) wv[r] = _mm512_loadu_ps(w + r * ws + i);
        for (int t = 0; t < NT; ++t) {
            __m512 xv = _mm512_load_ps(x + i * NT + t * kLanes);
            asm("" : "+v"(xv));  // one load per token (GCC would fold it into each row's FMA)
            for (int r = 0; r < NR; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if constexpr (!Last) {
        for (int r = 0; r < NR; ++r)
            for (int t = 0; t < NT; ++t) _mm512_store_ps(park + (r * kTokens + t) * kLanes, acc[r][t]);
    } else {
        if (tail > 0) {
            const auto m = static_cast<__mmask16>((1u << tail) - 1);
            __m512 wv[NR];
            for (int r = 0; r < NR; ++r) wv[r] = _mm512_maskz_loadu_ps(m, w + r * ws + i1);
            for (int t = 0; t < NT; ++t) {
                const __m512 xv = _mm512_load_ps(x + i1 * NT + t * kLanes);
                for (int r = 0; r < NR; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
            }
        }
        for (int t = 0; t < NT; ++t) {
            if constexpr (NR == 4) {
                _mm_storeu_ps(y + t * ys, hsum4(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
            } else {
                for (int r = 0; r < NR; ++r) y[t * ys + r] = hsum(acc[r][t]);
            }
        }
    }
}

using TileFn = void (*)(const float *, size_t, const float *, int64_t, int64_t, int, float *, float *, size_t,
                        const float *, int64_t, int64_t);

// The four chunk positions of a tile shape, without and with the prefetch: [prefetch][first][last].
struct TileSet {
    TileFn fn[2][2][2];
};
template <int NR, int NT>
constexpr TileSet tile_set() {
    return {{{{tile<NR, NT, false, false, false>, tile<NR, NT, false, true, false>},
              {tile<NR, NT, true, false, false>, tile<NR, NT, true, true, false>}},
             {{tile<NR, NT, false, false, true>, tile<NR, NT, false, true, true>},
              {tile<NR, NT, true, false, true>, tile<NR, NT, true, true, true>}}}};
}
template <int NR, size_t... T>
constexpr std::array<TileSet, kTokens> tiles_of_rows(std::index_sequence<T...>) {
    return {tile_set<NR, static_cast<int>(T) + 1>()...};
}
// kTiles[nr - 1][nt - 1]: the tiles of nr rows by nt tokens (the edges of a product).
constexpr std::array<std::array<TileSet, kTokens>, kRows> kTiles = {
    tiles_of_rows<1>(std::make_index_sequence<kTokens>{}), tiles_of_rows<2>(std::make_index_sequence<kTokens>{}),
    tiles_of_rows<3>(std::make_index_sequence<kTokens>{}), tiles_of_rows<4>(std::make_index_sequence<kTokens>{})};

// The thread's block for parked partial sums (64-byte aligned; ops/workspace.h, invariant 4).
float * park_buffer(size_t floats) {
    return reinterpret_cast<float *>(
        ops::Workspace::scratch().kernel_block(ops::KernelBlock::parked_weights, floats * sizeof(float)));
}

// Token groups of a call: ceil(n_tok / kTokens) groups of near-equal size (32 tokens: 6 6 5 5 5 5, not five 6s
// and a 2, whose tile loads 6 vectors for 8 FMAs). Group g holds tokens [group_start(g), group_start(g + 1)).
struct Groups {
    int64_t n_tok, count;
    explicit Groups(int64_t n) : n_tok(n), count((n + kTokens - 1) / kTokens) {}
    int64_t start(int64_t g) const { return g * n_tok / count; }
};

// The tokens packed by groups: group g from float start(g) * steps * 16, its nt (<= kTokens) vectors of each step
// of 16 columns side by side, the last step zero-padded (the zeros vec_dot's masked load gives). Token rows 4 KB
// apart map to the same L1 set at a given column, so 4 weight rows and 6 token rows read side by side overflow its
// 8 ways; packed, the tokens' lines spread over the sets.
// key != 0: the rows named by it (TypeKernels::gemm's act_key) are packed once per thread: the block's tag keeps
// the key of what it holds (keys are unique per product, and the shapes of one product's calls are the same).
float * pack_tokens(const float * act, size_t xs, int64_t n, const Groups & groups, uint64_t key) {
    const int64_t steps = (n + kLanes - 1) / kLanes;
    bool fill;
    float * p = reinterpret_cast<float *>(ops::Workspace::scratch().kernel_block_for(
        ops::KernelBlock::packed_tokens, static_cast<size_t>(groups.n_tok * steps * kLanes) * sizeof(float),
        ops::packed_tokens_tag(key, 0), fill));
    if (!fill) return p;
    const int64_t full = n / kLanes * kLanes;
    const auto m = static_cast<__mmask16>((1u << (n - full)) - 1);
    for (int64_t g = 0; g < groups.count; ++g) {
        const int64_t g0 = groups.start(g), nt = groups.start(g + 1) - g0;
        float * base = p + g0 * steps * kLanes;
        for (int64_t t = 0; t < nt; ++t) {
            const float * x = act + (g0 + t) * xs;
            int64_t st = 0;
            for (; st * kLanes < full; ++st) _mm512_store_ps(base + (st * nt + t) * kLanes, _mm512_loadu_ps(x + st * kLanes));
            if (full < n) _mm512_store_ps(base + (st * nt + t) * kLanes, _mm512_maskz_loadu_ps(m, x + full));
        }
    }
    return p;
}

struct Blocking {
    int64_t kc;      // columns per chunk (a multiple of 16); 0: whole rows, nothing parked
    int64_t tb;      // tokens per block (a multiple of kTokens)
    int64_t rb;      // rows per block (a multiple of kRows)
    bool rows_inner; // within a chunk: token groups outer, row tiles inner (else the reverse)
    bool prefetch;   // weights prefetched into L2 ahead of their first use (see gemm_f32)
};

void gemm_f32(const Blocking & b, const void * wv, size_t w_stride, const void * actv, size_t act_stride, int64_t n,
              int64_t n_rows, int64_t n_tok, float * y, size_t y_stride, uint64_t act_key) {
    const auto * w = static_cast<const float *>(wv);
    const auto * act = static_cast<const float *>(actv);
    const size_t ws = w_stride / sizeof(float);
    const size_t xs = act_stride / sizeof(float);
    const int64_t full = n / kLanes * kLanes;
    const int tail = static_cast<int>(n - full);
    const int64_t kc = b.kc > 0 && b.kc < full ? b.kc : std::max<int64_t>(full, 1);
    const int64_t n_chunks = full == 0 ? 1 : (full + kc - 1) / kc;
    const int64_t row_tiles = (b.rb + kRows - 1) / kRows;
    const int64_t block_groups = std::max<int64_t>(1, b.tb / kTokens);  // token groups per block
    const int64_t steps = (n + kLanes - 1) / kLanes;
    const Groups groups(n_tok);
    const float * packed = pack_tokens(act, xs, n, groups, act_key);
    float * park = n_chunks > 1 ? park_buffer(static_cast<size_t>(row_tiles * block_groups) * kTileFloats) : nullptr;
    for (int64_t r0 = 0; r0 < n_rows; r0 += b.rb) {
        const int64_t r1 = std::min(n_rows, r0 + b.rb);
        for (int64_t g0 = 0; g0 < groups.count; g0 += block_groups) {
            const int64_t g1 = std::min(groups.count, g0 + block_groups);
            for (int64_t c = 0; c < n_chunks; ++c) {
                const int64_t i0 = std::min(full, c * kc);
                const int64_t i1 = std::min(full, i0 + kc);
                const bool first = c == 0, last = c == n_chunks - 1;
                auto one = [&](int64_t g, int64_t r) {
                    const int64_t t = groups.start(g);
                    const int nt = static_cast<int>(groups.start(g + 1) - t);
                    const int nr = static_cast<int>(std::min<int64_t>(kRows, r1 - r));
                    float * p = park == nullptr ? nullptr : park + ((g - g0) * row_tiles + (r - r0) / kRows) * kTileFloats;
                    // The first row block's first group prefetches its own rows two tiles ahead; every group of
                    // a block prefetches its share of the next block's columns (group g of G: columns g / G to
                    // (g + 1) / G of the row), so the next block's weights come from memory while this block
                    // computes, not in one burst when its first group starts (32-token prompts: 6 groups).
                    const float * pf = nullptr;
                    int64_t lo = 0, hi = 0;
                    if (b.prefetch && r0 == 0 && g == 0) {
                        pf = w + (r + 2 * kRows) * ws;
                        hi = full;
                    } else if (b.prefetch && r1 < n_rows) {
                        pf = w + (r + b.rb) * ws;
                        lo = g * steps / groups.count * kLanes;
                        hi = (g + 1) * steps / groups.count * kLanes;
                    }
                    kTiles[nr - 1][nt - 1].fn[pf != nullptr][first][last](w + r * ws, ws, packed + t * steps * kLanes,
                                                                          i0, i1, tail, p, y + t * y_stride + r,
                                                                          y_stride, pf, lo, hi);
                };
                if (b.rows_inner) {
                    for (int64_t g = g0; g < g1; ++g)
                        for (int64_t r = r0; r < r1; r += kRows) one(g, r);
                } else {
                    for (int64_t r = r0; r < r1; r += kRows)
                        for (int64_t g = g0; g < g1; ++g) one(g, r);
                }
            }
        }
    }
}

template <int64_t KC, int64_t TB, int64_t RB, bool RowsInner, bool Prefetch = true>
void gemm_f32_with(const void * w, size_t w_stride, const void * act, size_t act_stride, int64_t n, int64_t n_rows,
                   int64_t n_tok, float * y, size_t y_stride, uint64_t act_key) {
    static constexpr Blocking b{KC, TB, RB, RowsInner, Prefetch};
    gemm_f32(b, w, w_stride, act, act_stride, n, n_rows, n_tok, y, y_stride, act_key);
}

}  // namespace

void add_gemm_kernels_avx512(TypeKernels * table) {
    table[static_cast<uint32_t>(tensor::ElemType::F32)].gemm = gemm_f32_with<0, 6, 64, true>;
}

std::vector<GemmVariant> f32_gemm_variants_avx512() {
    return {
        {"whole rb64 prefetch", gemm_f32_with<0, 6, 64, true>},  // the table's entry
        {"whole rb64", gemm_f32_with<0, 6, 64, true, false>},
        {"whole rb32 prefetch", gemm_f32_with<0, 6, 32, true>},
        {"whole rb128 prefetch", gemm_f32_with<0, 6, 128, true>},
        {"kc512 rb32 prefetch", gemm_f32_with<512, 6, 32, true>},
    };
}

#else

void add_gemm_kernels_avx512(TypeKernels * /*table*/) {}
std::vector<GemmVariant> f32_gemm_variants_avx512() { return {}; }

#endif

}  // namespace offgrid::ops::cpu
