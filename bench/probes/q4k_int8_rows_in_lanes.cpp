// Probe (not part of the build): q4_K weights repacked 16 rows at a time for the 8-bit-activation path, so that
// the 16 int32 lanes of a `vpdpbusd` are 16 rows and the token's 4 activation bytes are a 32-bit broadcast from
// memory: no horizontal sums, no per-row fold chain, and a token costs two `vpdpbusd` per 64 bytes of weights
// however many tokens share the decoded vector. The repack is a 16 x 32 transpose of the rows' qs dwords (every
// nibble stays where the format put it), the 12 scale bytes by planes, and d, dmin: 2304 bytes for 2304. Per
// 32 weights of 16 rows one `vpmulld` applies the sub-block scales; the mins take one `vpdpwssd` per two
// sub-blocks. A row's integer sums of a super-block are the twin's (isum, imin: exact) and the fold is the
// twin's, lane for lane, so the results must be the table's bits: the probe checks that, then times both on the
// same weights, the table through ops::matmul (its 4-row tiles, the lanes, as the engine picks for the count), the
// probe through the same pool. Run it with OFFGRID_QUANT_ACT=int8; PROBE_NEAR and PROBE_FAR set how many blocks
// ahead the probe fetches into L1 and L2 (defaults 2 and 32: of 1-16 and 0-64, the best from DRAM). Build by
// hand after the main build, on an AVX-512 VNNI CPU (no contraction, as the kernels: the fold must round as the
// twin's):
//   g++ -O3 -std=c++20 -march=native -ffp-contract=off -Isrc bench/probes/q4k_int8_rows_in_lanes.cpp
//     build/liboffgrid_ops.a build/liboffgrid_tensor.a build/liboffgrid_common.a -lpthread -o /tmp/q4k_int8_ril
//   OFFGRID_QUANT_ACT=int8 /tmp/q4k_int8_ril ROWS THREADS [TOKENS...]
//   (2560 columns; ROWS 512 stays in L2, 4096 in the L3, 131072 streams 189 MB from DRAM)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "memory/huge_pages.h"
#include "ops/cpu/dispatch.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "tensor/blocks.h"
#include "tensor/half.h"

using namespace offgrid;
using tensor::BlockQ4_K;
using tensor::BlockQ8_K;

namespace {

constexpr int kCols = 2560, kNb = kCols / 256, kMaxTok = 8;
const int g_far = std::getenv("PROBE_FAR") ? std::atoi(std::getenv("PROBE_FAR")) : 32;  // blocks ahead into L2
const int g_near = std::getenv("PROBE_NEAR") ? std::atoi(std::getenv("PROBE_NEAR")) : 2;  // blocks ahead into L1

// 16 rows' super-block: qs[k] holds, in dword lane r, row r's qs dword k (the GGUF bytes 4k .. 4k + 3: a 16 x 32
// dword transpose, every nibble stays where the format put it: chunk c = k / 8, low nibbles elements 64c + 4i ..
// +3 of sub-block 2c, high nibbles 64c + 32 + 4i .. +3 of sub-block 2c + 1, i = k % 8); planes[k][r] is byte k of
// row r's packed scales; d, dmin per row. 2304 bytes, as the 16 rows' blocks.
struct alignas(64) Q4Kx16 {
    uint8_t qs[32][64];
    uint8_t planes[12][16];
    uint16_t d[16], dmin[16];
};

void repack(const BlockQ4_K * rows, size_t row_blocks, Q4Kx16 * out, int64_t n_rows) {
    for (int64_t g = 0; g < n_rows / 16; ++g) {
        for (int b = 0; b < kNb; ++b) {
            Q4Kx16 & o = out[g * kNb + b];
            for (int r = 0; r < 16; ++r) {
                const BlockQ4_K & x = rows[(g * 16 + r) * row_blocks + b];
                o.d[r] = x.d;
                o.dmin[r] = x.dmin;
                for (int k = 0; k < 12; ++k) o.planes[k][r] = x.scales[k];
                for (int k = 0; k < 32; ++k) std::memcpy(&o.qs[k][4 * r], x.qs + 4 * k, 4);
            }
        }
    }
}

// A token's super-block as the probe reads it: its q8_K block, and its 32-element sums in pairs (2p, 2p + 1) as
// two int16 in one dword (a broadcast operand of vpdpwssd).
struct TokBlock {
    const BlockQ8_K * a;
    int32_t bs_pair[4];
};

// The sums of super-block B for NT <= 4 tokens (tok[t] its blocks), folded into acc[t] (16 rows).
template <int NT>
inline void block(const Q4Kx16 & B, const TokBlock * const * tok, int b, float (*acc)[16], const char * ahead) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m6 = _mm512_set1_epi8(63), m30 = _mm512_set1_epi8(0x30);
    // Scales and mins of the 16 rows, sub-block j in bytes 16j .. 16j + 15 of lo (j < 4) or hi (j - 4).
    const __m512i p0 = _mm512_loadu_si512(B.planes[0]), p1 = _mm512_loadu_si512(B.planes[4]),
                  p2 = _mm512_loadu_si512(B.planes[8]);
    const __m512i sc_lo = _mm512_and_si512(p0, m6), mn_lo = _mm512_and_si512(p1, m6);
    const __m512i sc_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(p2, m4), _mm512_srli_epi16(p0, 2), m30, 0xF8);
    const __m512i mn_hi =
        _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(p2, 4), m4), _mm512_srli_epi16(p1, 2), m30, 0xF8);
    __m512i isum[NT], imin[NT];
    for (int t = 0; t < NT; ++t) isum[t] = imin[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
        __m512i s0[NT], s1[NT];  // sub-blocks 2c (low nibbles) and 2c + 1 (high), a chain each per token
        for (int t = 0; t < NT; ++t) s0[t] = s1[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
            if (ahead != nullptr) _mm_prefetch(ahead + 64 * (8 * c + i), _MM_HINT_T0);
            const __m512i v = _mm512_load_si512(B.qs[8 * c + i]);
            const __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            for (int t = 0; t < NT; ++t) {
                const int8_t * q = tok[t][b].a->qs + 64 * c + 4 * i;
                s0[t] = _mm512_dpbusd_epi32(s0[t], lo, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(q)));
                s1[t] = _mm512_dpbusd_epi32(s1[t], hi, _mm512_set1_epi32(*reinterpret_cast<const int32_t *>(q + 32)));
            }
        }
        // Scales of sub-blocks 2c and 2c + 1: bytes 16 (2c % 4) .. of lo (c < 2) or hi.
        const __m512i src = c < 2 ? sc_lo : sc_hi;
        const bool upper = (c & 1) != 0;
        const __m512i sa =
            _mm512_cvtepu8_epi32(upper ? _mm512_extracti32x4_epi32(src, 2) : _mm512_extracti32x4_epi32(src, 0));
        const __m512i sb =
            _mm512_cvtepu8_epi32(upper ? _mm512_extracti32x4_epi32(src, 3) : _mm512_extracti32x4_epi32(src, 1));
        for (int t = 0; t < NT; ++t) {
            const __m512i scaled = _mm512_add_epi32(_mm512_mullo_epi32(s0[t], sa), _mm512_mullo_epi32(s1[t], sb));
            isum[t] = _mm512_add_epi32(isum[t], scaled);
        }
    }
    // Mins of sub-blocks 2p, 2p + 1 as int16 pairs per row.
    for (int p = 0; p < 4; ++p) {
        const __m512i src = p < 2 ? mn_lo : mn_hi;
        const bool upper = (p & 1) != 0;
        const __m128i a = upper ? _mm512_extracti32x4_epi32(src, 2) : _mm512_extracti32x4_epi32(src, 0);
        const __m128i c = upper ? _mm512_extracti32x4_epi32(src, 3) : _mm512_extracti32x4_epi32(src, 1);
        const __m512i pair = _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(a, c), _mm_unpacklo_epi8(a, c)));
        for (int t = 0; t < NT; ++t) {
            imin[t] = _mm512_dpwssd_epi32(imin[t], pair, _mm512_set1_epi32(tok[t][b].bs_pair[p]));
        }
    }
    const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.d)));
    const __m512 wm = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(B.dmin)));
    for (int t = 0; t < NT; ++t) {
        const __m512 ad = _mm512_set1_ps(tok[t][b].a->d);
        const __m512 d = _mm512_mul_ps(ad, wd), dm = _mm512_mul_ps(ad, wm);
        const __m512 a = _mm512_loadu_ps(acc[t]);
        _mm512_storeu_ps(acc[t], _mm512_add_ps(a, _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[t])),
                                                                _mm512_mul_ps(dm, _mm512_cvtepi32_ps(imin[t])))));
    }
}

// 16 rows against nt tokens, in groups of up to 4 tokens per super-block.
void group(const Q4Kx16 * W, const TokBlock (*tok)[kNb], int nt, float * y, size_t ys) {
    alignas(64) float acc[kMaxTok][16] = {};
    for (int b = 0; b < kNb; ++b) {
        const Q4Kx16 & B = W[b];
        const char * ahead = reinterpret_cast<const char *>(&B) + g_near * sizeof(Q4Kx16);
        for (size_t off = 2048; off < sizeof(Q4Kx16); off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
        const char * far = reinterpret_cast<const char *>(&B) + g_far * sizeof(Q4Kx16);
        if (g_far > 0)
            for (size_t off = 0; off < sizeof(Q4Kx16); off += 64) _mm_prefetch(far + off, _MM_HINT_T1);
        for (int t0 = 0; t0 < nt; t0 += 4) {
            const TokBlock * tb[4];
            for (int t = t0; t < std::min(nt, t0 + 4); ++t) tb[t - t0] = tok[t];
            const char * a = t0 == 0 ? ahead : nullptr;
            switch (std::min(4, nt - t0)) {
                case 1: block<1>(B, tb, b, acc + t0, a); break;
                case 2: block<2>(B, tb, b, acc + t0, a); break;
                case 3: block<3>(B, tb, b, acc + t0, a); break;
                default: block<4>(B, tb, b, acc + t0, a); break;
            }
        }
    }
    for (int t = 0; t < nt; ++t) std::memcpy(y + t * ys, acc[t], sizeof(acc[t]));
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char ** argv) {
    const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 4096;
    const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
    std::vector<int> toks;
    for (int i = 3; i < argc; ++i) toks.push_back(std::atoi(argv[i]));
    if (toks.empty()) toks = {1, 2, 3, 4, 8};
    const size_t rb = sizeof(BlockQ4_K) * kNb;
    std::vector<uint8_t, memory::HugePageAllocator<uint8_t>> w(rb * static_cast<size_t>(rows));
    std::mt19937 rng(3);
    for (auto & c : w) c = static_cast<uint8_t>(rng());
    auto * blocks = reinterpret_cast<BlockQ4_K *>(w.data());
    for (int64_t i = 0; i < rows * kNb; ++i) {
        blocks[i].d = tensor::f32_to_f16(0.001f + 0.0001f * static_cast<float>(rng() % 16));
        blocks[i].dmin = tensor::f32_to_f16(0.0005f + 0.0001f * static_cast<float>(rng() % 16));
    }
    std::vector<Q4Kx16, memory::HugePageAllocator<Q4Kx16>> packed(static_cast<size_t>(rows / 16 * kNb));
    repack(blocks, kNb, packed.data(), rows);

    const ops::Matrix m = ops::make_matrix(tensor::ElemType::Q4_K, w.data(), kCols, rows);
    const ops::cpu::TypeKernels * k = ops::cpu::int8_kernels_for(tensor::ElemType::Q4_K, ops::cpu::Isa::Avx512);
    ops::ThreadPool pool(threads);
    std::normal_distribution<float> nd;
    std::printf("q4_K %lld x %d (%.1f MB), %d thread(s); the table (ops::matmul) against rows in lanes, us a call\n",
                static_cast<long long>(rows), kCols, static_cast<double>(w.size()) / 1e6, threads);
    for (int nt : toks) {
        std::vector<float> x(static_cast<size_t>(nt) * kCols);
        for (auto & v : x) v = nd(rng);
        std::vector<float> y0(static_cast<size_t>(nt * rows)), y1(y0.size());
        const size_t ab = ops::cpu::act_row_bytes(k->act_type, kCols);
        std::vector<uint8_t> act(ab * static_cast<size_t>(nt));
        auto probe = [&] {
            for (int t = 0; t < nt; ++t) k->quantize_act(x.data() + t * kCols, act.data() + t * ab, kCols);
            TokBlock tb[kMaxTok][kNb];
            for (int t = 0; t < nt; ++t) {
                const auto * A = reinterpret_cast<const BlockQ8_K *>(act.data() + t * ab);
                for (int b = 0; b < kNb; ++b) {
                    tb[t][b].a = &A[b];
                    for (int p = 0; p < 4; ++p) {
                        const int16_t s0 = static_cast<int16_t>(A[b].bsums[4 * p] + A[b].bsums[4 * p + 1]);
                        const int16_t s1 = static_cast<int16_t>(A[b].bsums[4 * p + 2] + A[b].bsums[4 * p + 3]);
                        tb[t][b].bs_pair[p] =
                            static_cast<int32_t>(static_cast<uint16_t>(s0)) | (static_cast<int32_t>(s1) << 16);
                    }
                }
            }
            ops::parallel_claims(&pool, static_cast<size_t>(rows / 16), [&](size_t g0, size_t g1) {
                for (size_t g = g0; g < g1; ++g) {
                    group(packed.data() + g * kNb, tb, nt, y1.data() + g * 16, static_cast<size_t>(rows));
                }
            });
        };
        ops::matmul(m, x.data(), nt, y0.data(), &pool);
        probe();
        const bool same = std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) == 0;
        if (!same && std::getenv("PROBE_DEBUG")) {
            for (int i = 0; i < 20; ++i) std::printf("  y[%d] table %.9g probe %.9g\n", i, y0[i], y1[i]);
        }
        double best0 = 1e30, best1 = 1e30;
        const int reps = rows >= 65536 ? 8 : 200;
        for (int round = 0; round < 5; ++round) {
            double t0 = now();
            for (int r = 0; r < reps; ++r) ops::matmul(m, x.data(), nt, y0.data(), &pool);
            best0 = std::min(best0, (now() - t0) / reps);
            t0 = now();
            for (int r = 0; r < reps; ++r) probe();
            best1 = std::min(best1, (now() - t0) / reps);
        }
        std::printf("tokens %d: table %9.1f us (%5.1f GB/s)  rows in lanes %9.1f us (%5.1f GB/s)  %.2fx  bits %s\n", nt,
                    best0 * 1e6, static_cast<double>(w.size()) / best0 / 1e9, best1 * 1e6,
                    static_cast<double>(w.size()) / best1 / 1e9, best0 / best1, same ? "same" : "DIFFER");
    }
    return 0;
}
