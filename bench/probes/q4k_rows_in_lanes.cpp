// Probe behind "Decode against the bus" (docs/kernels.md; not part of the build): q4_K weights repacked 16 rows at a
// time so that the 16 int32 lanes of a vpdpwssd are 16 rows (each lane a pair of one row's weights, the token's
// activation pair broadcast), against the table's one-row int16 tile. Sub-block scales then multiply a lane sum
// once per 32 weights of 16 rows (vpmulld) instead of every weight (vpmullw), and no lane fold is needed. Its sums
// are not the table's contract (one int32 per row and super-block, not eight lanes), so it is compared with a
// relative tolerance only. Times 1 token (from cache and from 2 MiB pages of DRAM, 1 or 2 threads, beside a plain
// read of the same bytes) and 8 tokens (one thread). Build by hand after the main build, on an AVX-512 VNNI CPU:
//   g++ -O2 -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c -Isrc
//     bench/probes/q4k_rows_in_lanes.cpp build/liboffgrid_ops.a build/liboffgrid_tensor.a build/liboffgrid_common.a
//     -lpthread -o /tmp/q4k_rows_in_lanes
//   /tmp/q4k_rows_in_lanes MB THREADS        (MB of q4_K weights: 1 stays in cache, 400 streams from DRAM)
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "tensor/blocks.h"

using namespace offgrid;
using tensor::BlockQ16_K;
using tensor::BlockQ4_K;

namespace {

// 16 rows' super-block b: scales and mins unpacked per (group, row); qs[g][c] holds, for row j, the weights
// 2c, 2c + 1 of group g in the low nibbles of bytes 2j, 2j + 1 and the weights 2c + 16, 2c + 17 in their high ones.
struct Q4Kx16 {
    uint16_t d[16], dmin[16];
    uint8_t sc[8][16], mn[8][16];
    uint8_t qs[8][8][32];
};

void scale_min(int j, const uint8_t * q, uint8_t & d, uint8_t & m) {
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

int nibble(const BlockQ4_K & b, int i) {
    const int c = i / 64, r = i % 64;
    return r < 32 ? (b.qs[32 * c + r] & 0xF) : (b.qs[32 * c + r - 32] >> 4);
}

void repack(const BlockQ4_K * const rows[16], int b, Q4Kx16 & o) {
    for (int j = 0; j < 16; ++j) {
        const BlockQ4_K & x = rows[j][b];
        o.d[j] = x.d;
        o.dmin[j] = x.dmin;
        for (int g = 0; g < 8; ++g) {
            scale_min(g, x.scales, o.sc[g][j], o.mn[g][j]);
            for (int c = 0; c < 8; ++c) {
                for (int h = 0; h < 2; ++h) {
                    o.qs[g][c][2 * j + h] =
                        static_cast<uint8_t>(nibble(x, 32 * g + 2 * c + h) | (nibble(x, 32 * g + 2 * c + 16 + h) << 4));
                }
            }
        }
    }
}

// 16 rows against NT token rows (super-block b of token t at a[t * a_blocks + b]); y[t * ys + row].
template <int NT>
void dot16(const Q4Kx16 * w, const BlockQ16_K * a, size_t a_blocks, int nb, float * y, size_t ys) {
    __m512 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi16(0x0f);
    for (int b = 0; b < nb; ++b) {
        const Q4Kx16 & x = w[b];
        __m512i P[NT];
        for (int t = 0; t < NT; ++t) P[t] = _mm512_setzero_si512();
        for (int g = 0; g < 8; ++g) {  // (unrolling this loop too made GCC spill at 8 tokens)
            if constexpr (NT == 1) {  // the stream, two super-blocks ahead
                const char * ahead = reinterpret_cast<const char *>(x.qs[g]) + 2 * sizeof(Q4Kx16);
                for (int off = 0; off < 256; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
            }
            __m512i s[NT];
            for (int t = 0; t < NT; ++t) s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int c = 0; c < 8; ++c) {
                const __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.qs[g][c])));
                const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_srli_epi16(v, 4);
#pragma GCC unroll 8
                for (int t = 0; t < NT; ++t) {
                    const int16_t * aq = a[t * a_blocks + b].qs + 32 * g + 2 * c;
                    int32_t p0, p1;
                    std::memcpy(&p0, aq, 4);
                    std::memcpy(&p1, aq + 16, 4);
                    s[t] = _mm512_dpwssd_epi32(s[t], lo, _mm512_set1_epi32(p0));
                    s[t] = _mm512_dpwssd_epi32(s[t], hi, _mm512_set1_epi32(p1));
                }
            }
            const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x.sc[g])));
            for (int t = 0; t < NT; ++t) P[t] = _mm512_add_epi32(P[t], _mm512_mullo_epi32(s[t], sc));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.d)));
        const __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x.dmin)));
        for (int t = 0; t < NT; ++t) {
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[t]), _mm512_mul_ps(d, _mm512_set1_ps(a[t * a_blocks + b].d)), acc[t]);
        }
        for (int g = 0; g < 8; ++g) {
            const __m512 m = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                                   _mm_loadu_si128(reinterpret_cast<const __m128i *>(x.mn[g])))));
            for (int t = 0; t < NT; ++t) {
                acc[t] = _mm512_fnmadd_ps(m, _mm512_set1_ps(a[t * a_blocks + b].dsum32[g]), acc[t]);
            }
        }
    }
    for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * ys, acc[t]);
}

template <class T>
T * huge_alloc(size_t n) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (n * sizeof(T) + kHuge) / kHuge * kHuge;
    void * p = std::aligned_alloc(kHuge, bytes);
    ::madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T *>(p);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double max_rel(const std::vector<float> & a, const std::vector<float> & b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]) / (std::fabs(double(a[i])) + 1e-3));
    return m;
}

}  // namespace

int main(int argc, char ** argv) {
    const int K = 2560, nb = K / 256;
    const double mb = argc > 1 ? std::atof(argv[1]) : 1;
    const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
    const int R = static_cast<int>(mb * 1e6 / (nb * sizeof(BlockQ4_K))) / 16 * 16;
    std::mt19937 rng(1);
    BlockQ4_K * W = huge_alloc<BlockQ4_K>(static_cast<size_t>(R) * nb);
    for (size_t i = 0; i < static_cast<size_t>(R) * nb; ++i) {
        for (auto & q : W[i].qs) q = static_cast<uint8_t>(rng());
        for (auto & s : W[i].scales) s = static_cast<uint8_t>(rng());
        W[i].d = _cvtss_sh(0.001f + static_cast<float>(rng() % 100) * 1e-5f, 0);
        W[i].dmin = _cvtss_sh(static_cast<float>(rng() % 100) * 1e-5f, 0);
    }
    Q4Kx16 * P = huge_alloc<Q4Kx16>(static_cast<size_t>(R / 16) * nb);
    for (int r = 0; r < R; r += 16) {
        const BlockQ4_K * rows[16];
        for (int j = 0; j < 16; ++j) rows[j] = W + static_cast<size_t>(r + j) * nb;
        for (int b = 0; b < nb; ++b) repack(rows, b, P[static_cast<size_t>(r / 16) * nb + b]);
    }
    const ops::cpu::TypeKernels * k = ops::cpu::kernels_for(tensor::ElemType::Q4_K, ops::cpu::Isa::Avx512);
    constexpr int kTok = 8;
    std::vector<float> x(K);
    std::vector<BlockQ16_K> act(static_cast<size_t>(kTok) * nb);
    for (int t = 0; t < kTok; ++t) {
        for (float & v : x) v = std::normal_distribution<float>()(rng);
        k->quantize_act(x.data(), &act[static_cast<size_t>(t) * nb], K);
    }
    auto split = [&](auto fn) {  // rows in 16-row groups over the threads
        std::vector<std::thread> th;
        for (int i = 0; i < threads; ++i) {
            th.emplace_back([&, i] {
                const int per = R / 16 / threads * 16, r0 = i * per, r1 = i == threads - 1 ? R : r0 + per;
                fn(r0, r1);
            });
        }
        for (auto & t : th) t.join();
    };
    const size_t row_bytes = sizeof(BlockQ4_K) * nb;
    const double bytes = static_cast<double>(R) * row_bytes;
    std::vector<float> y0(R), y1(R);
    double t_read = 1e30, t_tab = 1e30, t_lanes = 1e30;
    std::vector<long long> sink(threads);
    for (int pass = 0; pass < 7; ++pass) {
        double t = now();
        split([&](int r0, int r1) {
            const auto * p = reinterpret_cast<const __m512i *>(W + static_cast<size_t>(r0) * nb);
            const auto * e = reinterpret_cast<const __m512i *>(W + static_cast<size_t>(r1) * nb);
            __m512i s = _mm512_setzero_si512();
            for (; p < e; ++p) s = _mm512_xor_si512(s, _mm512_loadu_si512(p));
            sink[r0 * threads / R] = _mm512_reduce_add_epi64(s);
        });
        t_read = std::min(t_read, now() - t);
        t = now();
        split([&](int r0, int r1) {
            for (int r = r0; r < r1; ++r) k->dot_tile(W + static_cast<size_t>(r) * nb, row_bytes, act.data(), 0, K, 1, 1, &y0[r], 1);
        });
        t_tab = std::min(t_tab, now() - t);
        t = now();
        split([&](int r0, int r1) {
            for (int r = r0; r < r1; r += 16) dot16<1>(P + static_cast<size_t>(r / 16) * nb, act.data(), nb, nb, &y1[r], R);
        });
        t_lanes = std::min(t_lanes, now() - t);
    }
    std::printf("1 token, %d rows (%.0f MB), %d threads: plain read %.1f GB/s, table tile %.1f GB/s, rows in lanes %.1f GB/s "
                "(x%.2f), max rel diff %.1e\n", R, bytes / 1e6, threads, bytes / t_read / 1e9, bytes / t_tab / 1e9,
                bytes / t_lanes / 1e9, t_tab / t_lanes, max_rel(y0, y1));
    std::vector<float> z0(static_cast<size_t>(R) * kTok), z1(z0.size());
    double u_tab = 1e30, u_lanes = 1e30;
    for (int pass = 0; pass < 5; ++pass) {
        double t = now();
        for (int r = 0; r < R; ++r) {
            k->dot_tile(W + static_cast<size_t>(r) * nb, row_bytes, act.data(), sizeof(BlockQ16_K) * nb, K, 1, kTok, &z0[r], R);
        }
        u_tab = std::min(u_tab, now() - t);
        t = now();
        for (int r = 0; r < R; r += 16) dot16<kTok>(P + static_cast<size_t>(r / 16) * nb, act.data(), nb, nb, &z1[r], R);
        u_lanes = std::min(u_lanes, now() - t);
    }
    const double flop = 2.0 * R * K * kTok;
    std::printf("%d tokens, one thread: table 1 x %d tile %.0f GFLOP/s, rows in lanes %.0f GFLOP/s (x%.2f), max rel diff %.1e\n",
                kTok, kTok, flop / u_tab / 1e9, flop / u_lanes / 1e9, u_tab / u_lanes, max_rel(z0, z1));
}
