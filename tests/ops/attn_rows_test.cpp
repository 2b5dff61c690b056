// The attn_rows kernels (ops/cpu/attn_rows.h): every ISA level against its scalar twin (scores bit for bit,
// attention within 2e-5) and against the plain reference of ops/attention.h, and the invariants the sparse path relies on: a block of queries gives each query
// the bits of one query at a time, and pools scored in slices give the bits of one call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/attention.h"
#include "ops/cpu/attn_rows.h"
#include "ops/cpu/dispatch.h"
#include "ops/half.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu {
namespace {

using tensor::ElemType;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto & x : v) x = dist(rng);
    return v;
}

// A cache of n_cells rows of `width` elements of `type`, filled from random floats (F16 rounded).
struct Rows {
    std::vector<uint8_t> bytes;
    size_t stride;
    ElemType type;
    Rows(size_t n_cells, size_t width, ElemType t, uint32_t seed, float scale) : type(t) {
        const size_t es = t == ElemType::F32 ? 4 : 2;
        stride = width * es;
        bytes.resize(n_cells * stride);
        const auto f = randn(n_cells * width, seed, scale);
        for (size_t i = 0; i < f.size(); ++i) {
            if (t == ElemType::F32) {
                std::memcpy(&bytes[i * 4], &f[i], 4);
            } else {
                const uint16_t h = float_to_half(f[i]);
                std::memcpy(&bytes[i * 2], &h, 2);
            }
        }
    }
    const void * row(uint32_t c, size_t offset_elems) const {
        return bytes.data() + c * stride + offset_elems * (type == ElemType::F32 ? 4 : 2);
    }
};

// Cells in no particular order, repeats allowed (a pool and a tail cell may never repeat in the model, but the
// kernels must not care).
std::vector<uint32_t> random_cells(size_t n, size_t n_cells, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint32_t> c(n);
    for (auto & x : c) x = static_cast<uint32_t>(rng() % n_cells);
    return c;
}

void attend_with(const AttnRowKernels & k, ElemType type, const float * q, size_t n_q, size_t q_stride, size_t dim,
                 const Rows & K, const Rows & V, size_t offset, const std::vector<uint32_t> & cells, float scale,
                 float * out, size_t out_stride) {
    const size_t es = type == ElemType::F32 ? 4 : 2;
    (type == ElemType::F32 ? k.attend_f32 : k.attend_f16)(q, n_q, q_stride, dim, K.bytes.data() + offset * es, K.stride,
                                                          V.bytes.data() + offset * es, V.stride, cells.data(),
                                                          cells.size(), scale, out, out_stride);
}

TEST(AttnRows, AttendEveryLevelMatchesTwinAndReference) {
    const size_t n_cells = 300;
    for (ElemType type : {ElemType::F32, ElemType::F16}) {
        for (size_t dim : {16u, 20u, 64u, 128u, 256u}) {
            const size_t width = 2 * dim, offset = dim;  // the second head of each row
            const Rows K(n_cells, width, type, 11 + dim, 0.5f), V(n_cells, width, type, 12 + dim, 1.0f);
            for (size_t n : {0u, 1u, 31u, 32u, 33u, 50u, 100u}) {
                const auto cells = random_cells(n, n_cells, 13 + n);
                for (size_t n_q : {1u, 3u, 4u, 5u, 12u, 17u}) {
                    const auto q = randn(n_q * dim, 14 + n_q);
                    std::vector<float> want(n_q * dim), ref(dim);
                    attend_with(attn_row_kernels(Isa::Scalar), type, q.data(), n_q, dim, dim, K, V, offset, cells,
                                0.3f, want.data(), dim);
                    // The plain reference of ops/attention.h (pointers, exact softmax).
                    std::vector<const void *> kp, vp;
                    for (uint32_t c : cells) {
                        kp.push_back(K.row(c, 0));
                        vp.push_back(V.row(c, 0));
                    }
                    for (size_t i = 0; i < n_q; ++i) {
                        attend_head_ref(&q[i * dim], dim, {kp, type}, {vp, type}, offset, 0.3f, ref.data());
                        for (size_t d = 0; d < dim; ++d) EXPECT_NEAR(want[i * dim + d], ref[d], 2e-5) << "twin vs reference";
                    }
                    for (Isa isa : available_isas()) {
                        std::vector<float> got(n_q * dim, -1.0f);
                        attend_with(attn_row_kernels(isa), type, q.data(), n_q, dim, dim, K, V, offset, cells, 0.3f,
                                    got.data(), dim);
                        for (size_t i = 0; i < got.size(); ++i) {
                            EXPECT_NEAR(got[i], want[i], 2e-5) << isa_name(isa) << " dim " << dim << " n " << n;
                        }
                        // Each query alone gives the same bits as in the block.
                        for (size_t i = 0; i < n_q; ++i) {
                            std::vector<float> one(dim);
                            attend_with(attn_row_kernels(isa), type, &q[i * dim], 1, dim, dim, K, V, offset, cells, 0.3f,
                                        one.data(), dim);
                            EXPECT_EQ(0, std::memcmp(one.data(), &got[i * dim], dim * sizeof(float)))
                                << isa_name(isa) << " query " << i << " of " << n_q;
                        }
                    }
                }
            }
        }
    }
}

TEST(AttnRows, ScoreEveryLevelMatchesTwinAndSlicesGiveTheSameBits) {
    const size_t n_cells = 500;
    for (ElemType type : {ElemType::F32, ElemType::F16}) {
        for (size_t dim : {16u, 20u, 24u, 128u}) {
            for (size_t heads : {1u, 3u, 4u, 6u, 9u}) {
                const size_t width = 2 * dim;  // [raw | pooled]: the pooled key is the second half
                const Rows keys(n_cells, width, type, 21 + dim, 1.0f);
                const auto rows = random_cells(211, n_cells, 22 + heads);
                const size_t n_q = 5;
                const auto q = randn(n_q * heads * dim, 23 + heads, 0.3f);
                const size_t es = type == ElemType::F32 ? 4 : 2;
                const uint8_t * base = keys.bytes.data() + dim * es;
                std::vector<float> want(n_q * rows.size());
                const AttnRowKernels & twin = attn_row_kernels(Isa::Scalar);
                (type == ElemType::F32 ? twin.score_f32 : twin.score_f16)(q.data(), n_q, heads * dim, heads, dim, base,
                                                                          keys.stride, rows.data(), rows.size(),
                                                                          want.data(), rows.size());
                // Against score_pools_ref (pointers, one pool at a time).
                std::vector<const void *> kp;
                for (uint32_t c : rows) kp.push_back(keys.row(c, dim));
                std::vector<float> ref(rows.size());
                for (size_t i = 0; i < n_q; ++i) {
                    score_pools_ref(&q[i * heads * dim], heads, dim, kp, type, ref.data());
                    for (size_t p = 0; p < rows.size(); ++p) EXPECT_NEAR(want[i * rows.size() + p], ref[p], 1e-5);
                }
                for (Isa isa : available_isas()) {
                    const AttnRowKernels & k = attn_row_kernels(isa);
                    auto score = type == ElemType::F32 ? k.score_f32 : k.score_f16;
                    std::vector<float> got(want.size());
                    score(q.data(), n_q, heads * dim, heads, dim, base, keys.stride, rows.data(), rows.size(), got.data(),
                          rows.size());
                    // Every level reproduces the twin's dot order (products rounded, added in index order), so
                    // the selection never depends on the ISA level: the same bits, not just close.
                    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
                        << isa_name(isa) << " dim " << dim << " heads " << heads;
                    // One query at a time, over uneven slices of the pools: the same bits.
                    for (size_t i = 0; i < n_q; ++i) {
                        std::vector<float> one(rows.size());
                        for (size_t p0 = 0; p0 < rows.size(); p0 += 37) {
                            const size_t n = std::min<size_t>(37, rows.size() - p0);
                            score(&q[i * heads * dim], 1, 0, heads, dim, base, keys.stride, rows.data() + p0, n,
                                  one.data() + p0, 0);
                        }
                        EXPECT_EQ(0, std::memcmp(one.data(), &got[i * rows.size()], rows.size() * sizeof(float)))
                            << isa_name(isa) << " query " << i;
                    }
                    // The same keys stored one after the other (rows null, as memory::Storage::pool_keys hands
                    // them out): the same bits, also over slices.
                    const size_t kb = dim * es;
                    std::vector<uint8_t> packed(rows.size() * kb);
                    for (size_t p = 0; p < rows.size(); ++p) std::memcpy(&packed[p * kb], keys.row(rows[p], dim), kb);
                    std::vector<float> in_order(want.size());
                    for (size_t p0 = 0; p0 < rows.size(); p0 += 64) {
                        const size_t n = std::min<size_t>(64, rows.size() - p0);
                        score(q.data(), n_q, heads * dim, heads, dim, &packed[p0 * kb], kb, nullptr, n,
                              in_order.data() + p0, rows.size());
                    }
                    EXPECT_EQ(0, std::memcmp(in_order.data(), got.data(), got.size() * sizeof(float))) << isa_name(isa);
                    // In element-major blocks of 16 (memory::PoolKeyTable's layout, the last block partial and its
                    // spare lanes filled with junk), whole and from block boundaries on: the same bits.
                    const size_t B = kScoreBlock, n_blocks = (rows.size() + B - 1) / B;
                    std::vector<uint8_t> blocked(n_blocks * B * kb, 0x7f);
                    for (size_t p = 0; p < rows.size(); ++p)
                        for (size_t e = 0; e < dim; ++e)
                            std::memcpy(&blocked[((p / B) * dim * B + e * B + p % B) * es], keys.row(rows[p], dim + e), es);
                    auto blocked_score = type == ElemType::F32 ? k.score_blocked_f32 : k.score_blocked_f16;
                    std::vector<float> by_block(want.size(), -1.0f), by_slices(want.size(), -1.0f);
                    blocked_score(q.data(), n_q, heads * dim, heads, dim, blocked.data(), rows.size(), by_block.data(),
                                  rows.size());
                    EXPECT_EQ(0, std::memcmp(by_block.data(), want.data(), want.size() * sizeof(float)))
                        << isa_name(isa) << " blocked, dim " << dim << " heads " << heads;
                    for (size_t b0 = 0; b0 < n_blocks; b0 += 3) {
                        const size_t p0 = b0 * B, n = std::min(3 * B, rows.size() - p0);
                        blocked_score(q.data(), n_q, heads * dim, heads, dim, &blocked[b0 * B * kb], n,
                                      by_slices.data() + p0, rows.size());
                    }
                    EXPECT_EQ(0, std::memcmp(by_slices.data(), want.data(), want.size() * sizeof(float)))
                        << isa_name(isa) << " blocked slices";
                    for (size_t i = 0; i < n_q; ++i) {  // one query at a time (the decode path)
                        std::vector<float> one(rows.size());
                        blocked_score(&q[i * heads * dim], 1, 0, heads, dim, blocked.data(), rows.size(), one.data(), 0);
                        EXPECT_EQ(0, std::memcmp(one.data(), &want[i * rows.size()], rows.size() * sizeof(float)))
                            << isa_name(isa) << " blocked, query " << i;
                    }
                }
            }
        }
    }
}

// Softmax over rows whose scores differ by far more than float's exp range: the online rescaling must keep
// the tiny weights at zero and the result finite, at every level.
TEST(AttnRows, ExtremeScoresStayFinite) {
    const size_t dim = 32, n_cells = 70;
    const Rows K(n_cells, dim, ElemType::F32, 31, 1.0f), V(n_cells, dim, ElemType::F32, 32, 1.0f);
    std::vector<uint32_t> cells(n_cells);
    for (uint32_t c = 0; c < n_cells; ++c) cells[c] = c;
    const auto q = randn(dim, 33, 40.0f);
    std::vector<float> want(dim);
    attend_with(attn_row_kernels(Isa::Scalar), ElemType::F32, q.data(), 1, dim, dim, K, V, 0, cells, 1.0f, want.data(), dim);
    for (Isa isa : available_isas()) {
        std::vector<float> got(dim);
        attend_with(attn_row_kernels(isa), ElemType::F32, q.data(), 1, dim, dim, K, V, 0, cells, 1.0f, got.data(), dim);
        for (size_t d = 0; d < dim; ++d) {
            EXPECT_TRUE(std::isfinite(got[d])) << isa_name(isa);
            EXPECT_NEAR(got[d], want[d], 1e-4) << isa_name(isa);
        }
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu
