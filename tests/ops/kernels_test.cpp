// The dispatch table: every kernel at every ISA level this CPU has against the Scalar entry of its type, the
// Scalar entry against dequantise + double dot, dot_tile bit for bit against vec_dot, and the activation
// quantisers of every level byte for byte against the Scalar one.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/cpu/attn_rows.h"
#include "ops/cpu/dispatch.h"
#include "ops/cpu/kernels_quant_int16.h"
#include "ops/cpu/levels.h"
#include "ops/cpu/vec.h"
#include "ops/half.h"
#include "random_data.h"
#include "tensor/quantize.h"
#include "tensor/types.h"

namespace offgrid::ops::cpu {
namespace {

using tensor::ElemType;

using test_data::random_floats;

// Weight types with a Scalar entry that the tests can build from floats.
std::vector<ElemType> tested_types() {
    std::vector<ElemType> out;
    for (uint32_t id = 0; id < kTypeTableSize; ++id) {
        const auto t = tensor::type_traits(id);
        if (!t) continue;
        const auto type = static_cast<ElemType>(id);
        if (kernels_for(type, Isa::Scalar) != nullptr && tensor::can_quantize(type)) out.push_back(type);
    }
    return out;
}

// Row widths: whole blocks, and for plain types also widths with a partial SIMD vector at the end, and rows
// whose last summation block (128 elements in the avx2 kernels) is partial: 200, 333.
std::vector<int64_t> widths(ElemType type) {
    const int64_t b = tensor::traits(type).block_size;
    if (b == 1) return {1, 7, 8, 13, 16, 24, 29, 37, 64, 100, 200, 333, 1024};
    return {b, 2 * b, 3 * b, 7 * b, 11 * b, std::max<int64_t>(b, 1024 / b * b)};
}

struct Rows {
    std::vector<uint8_t> bytes;
    size_t stride = 0;
};

Rows encode_rows(ElemType type, const std::vector<float> & x, int64_t n, int count) {
    Rows r;
    r.stride = tensor::row_bytes(type, n) + 16;  // padded: strides need not equal the row size
    r.bytes.assign(r.stride * count, 0);
    for (int i = 0; i < count; ++i) tensor::quantize_row(type, x.data() + i * n, r.bytes.data() + i * r.stride, n);
    return r;
}

Rows activations(const TypeKernels & k, const std::vector<float> & x, int64_t n, int count) {
    Rows r;
    r.stride = act_row_bytes(k.act_type, n) + 8;
    r.bytes.assign(r.stride * count, 0);
    for (int i = 0; i < count; ++i) {
        if (k.act_type == ElemType::F32) {
            std::memcpy(r.bytes.data() + i * r.stride, x.data() + i * n, n * sizeof(float));
        } else {
            k.quantize_act(x.data() + i * n, r.bytes.data() + i * r.stride, n);
        }
    }
    return r;
}

TEST(Dispatch, LevelsAndNames) {
    const auto levels = available_isas();
    ASSERT_FALSE(levels.empty());
    EXPECT_EQ(levels.front(), Isa::Scalar);
    EXPECT_EQ(levels.back(), detected_isa());
    EXPECT_NE(std::find(levels.begin(), levels.end(), active_isa()), levels.end()) << isa_name(active_isa());
    EXPECT_STREQ(isa_name(Isa::Scalar), "scalar");
    EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
    EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
    EXPECT_STREQ(isa_name(Isa::Neon), "neon");
    EXPECT_STREQ(isa_name(Isa::NeonDot), "neondot");
    EXPECT_STREQ(isa_name(Isa::Amx), "amx");
    // Levels are a set: x86 and ARM levels never share a build.
    const auto has = [&](Isa isa) { return std::find(levels.begin(), levels.end(), isa) != levels.end(); };
    EXPECT_FALSE((has(Isa::Avx2) || has(Isa::Avx512)) && (has(Isa::Neon) || has(Isa::NeonDot)));
    EXPECT_TRUE(!has(Isa::Avx512) || has(Isa::Avx2)) << "a level runs only with its base";
    EXPECT_TRUE(!has(Isa::NeonDot) || has(Isa::Neon)) << "a level runs only with its base";
    EXPECT_TRUE(!has(Isa::Amx) || has(Isa::Avx512)) << "a level runs only with its base";
    for (ElemType t : {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::Q8_0}) {
        for (Isa isa : levels) EXPECT_NE(kernels_for(t, isa), nullptr) << isa_name(isa);
    }
    EXPECT_EQ(kernels_for(ElemType::I32, Isa::Scalar), nullptr);
}

// A level this CPU cannot run has no tables: its fill functions are compiled for its instructions (the compiler
// may use them even to store the entries), so building them on a CPU without those instructions ends the process
// with SIGILL. Its lookups answer null, and the primitive sets fall back to the scalar level's.
TEST(Dispatch, LevelsThisCpuCannotRunAreNeverBuilt) {
    const auto levels = available_isas();
    int absent = 0;
    for (int i = 0; i < kIsaCount; ++i) {
        const auto isa = static_cast<Isa>(i);
        if (std::find(levels.begin(), levels.end(), isa) != levels.end()) continue;
        ++absent;
        EXPECT_EQ(kernels_for(ElemType::F32, isa), nullptr) << isa_name(isa);
        EXPECT_EQ(exact_kernels_for(ElemType::Q4_K, isa), nullptr) << isa_name(isa);
        EXPECT_EQ(int8_kernels_for(ElemType::Q4_K, isa), nullptr) << isa_name(isa);
        EXPECT_EQ(q8_0_int8_kernels(isa), nullptr) << isa_name(isa);
        EXPECT_EQ(&vec_kernels(isa), &vec_kernels(Isa::Scalar)) << isa_name(isa);
        EXPECT_EQ(&attn_row_kernels(isa), &attn_row_kernels(Isa::Scalar)) << isa_name(isa);
    }
    EXPECT_GT(absent, 0) << "every build names levels of another architecture";
}

TEST(Dispatch, ScalarEntriesMatchDequantisedDoubleDot) {
    for (ElemType type : tested_types()) {
        const TypeKernels & k = *kernels_for(type, Isa::Scalar);
        for (int64_t n : widths(type)) {
            const auto wf = random_floats(n, 1 + n);
            const auto xf = random_floats(n, 2 + n);
            const Rows w = encode_rows(type, wf, n, 1);
            const Rows a = activations(k, xf, n, 1);
            std::vector<float> wd(n), xd(n);
            tensor::dequantize_row(type, w.bytes.data(), wd.data(), n);
            if (k.act_type == ElemType::F32) {
                xd = xf;
            } else if (tensor::traits(k.act_type).can_dequantize) {
                tensor::dequantize_row(k.act_type, a.bytes.data(), xd.data(), n);
            } else {
                continue;  // no reference reader of this activation format yet
            }
            double exact = 0, magnitude = 0;
            for (int64_t i = 0; i < n; ++i) {
                exact += double(wd[i]) * xd[i];
                magnitude += std::fabs(double(wd[i]) * xd[i]);
            }
            const float got = k.vec_dot(w.bytes.data(), a.bytes.data(), n);
            EXPECT_NEAR(got, exact, 1e-5 * magnitude + 1e-30) << tensor::traits(type).name << " n=" << n;
        }
    }
}

TEST(Dispatch, EveryLevelMatchesScalarTwin) {
    std::array<TypeKernels, kTypeTableSize> int16_twins{};
    quant::add_int16_entries_scalar(int16_twins.data());
    for (ElemType type : tested_types()) {
        for (Isa isa : available_isas()) {
            const TypeKernels & k = *kernels_for(type, isa);
            const std::string what = std::string(tensor::traits(type).name) + " " + isa_name(isa);
            // A level whose int16 Q8_0 entry was measured faster takes it (LevelFills::q8_0_int16) where the scalar
            // level keeps the exact one: its twin is then the scalar int16 entry.
            const bool q8_0_int16 = type == ElemType::Q8_0 && level_fills(isa)->q8_0_int16 &&
                                    kernels_for(type, Isa::Scalar)->act_type == ElemType::F32;
            const TypeKernels & ref = q8_0_int16 ? int16_twins[static_cast<uint32_t>(type)] : *kernels_for(type, Isa::Scalar);
            ASSERT_EQ(k.act_type, ref.act_type) << what;
            for (int64_t n : widths(type)) {
                const auto wf = random_floats(n, 3 + n);
                const auto xf = random_floats(n, 4 + n);
                const Rows w = encode_rows(type, wf, n, 1);
                const Rows a_ref = activations(ref, xf, n, 1);
                const Rows a = activations(k, xf, n, 1);
                if (k.act_type != ElemType::F32) {
                    ASSERT_EQ(0, std::memcmp(a.bytes.data(), a_ref.bytes.data(), act_row_bytes(k.act_type, n)))
                        << what << ": activation quantisers differ, n=" << n;
                }
                std::vector<float> wd(n);
                tensor::dequantize_row(type, w.bytes.data(), wd.data(), n);
                double magnitude = 0;
                for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(double(wd[i]) * xf[i]);
                const float want = ref.vec_dot(w.bytes.data(), a_ref.bytes.data(), n);
                const float got = k.vec_dot(w.bytes.data(), a.bytes.data(), n);
                // Only the summation order differs: a few roundings of partial sums of |w x|.
                EXPECT_NEAR(got, want, 1e-5 * magnitude + 1e-30) << what << " n=" << n;
            }
        }
    }
}

TEST(Dispatch, TileIsBitIdenticalToVecDot) {
    for (ElemType type : tested_types()) {
        for (Isa isa : available_isas()) {
            const TypeKernels & k = *kernels_for(type, isa);
            if (k.dot_tile == nullptr) continue;
            const std::string what = std::string(tensor::traits(type).name) + " " + isa_name(isa);
            for (int64_t n : widths(type)) {
                const Rows w = encode_rows(type, random_floats(n * kTileMax, 5 + n), n, kTileMax);
                const Rows a = activations(k, random_floats(n * kTileMax, 6 + n), n, kTileMax);
                for (int nr = 1; nr <= kTileMax; ++nr) {
                    for (int nt = 1; nt <= kTileMax; ++nt) {
                        const size_t y_stride = kTileMax + 3;
                        std::vector<float> y(y_stride * kTileMax, -1.0f);
                        k.dot_tile(w.bytes.data(), w.stride, a.bytes.data(), a.stride, n, nr, nt, y.data(), y_stride);
                        for (int t = 0; t < kTileMax; ++t) {
                            for (size_t r = 0; r < y_stride; ++r) {
                                const float v = y[t * y_stride + r];
                                if (t < nt && r < static_cast<size_t>(nr)) {
                                    const float one = k.vec_dot(w.bytes.data() + r * w.stride,
                                                                a.bytes.data() + t * a.stride, n);
                                    ASSERT_EQ(std::memcmp(&v, &one, 4), 0)
                                        << what << " n=" << n << " tile " << nr << "x" << nt << " (" << r << "," << t << ")";
                                } else {
                                    ASSERT_EQ(v, -1.0f) << what << ": the tile wrote outside its " << nr << "x" << nt;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

// The int8 variant of Q8_0 (outside the table unless OFFGRID_QUANT_ACT=int8): the same checks as the table's entries.
// AVX2 and NEON sum in their own float order (within 1e-5 of the twin); AVX-512 gives the twin's bits.
TEST(Dispatch, Q8_0Int8VariantMatchesItsTwin) {
    const ElemType type = ElemType::Q8_0;
    const TypeKernels & ref = *q8_0_int8_kernels(Isa::Scalar);
    ASSERT_EQ(ref.act_type, ElemType::Q8_0);
    for (Isa isa : available_isas()) {
        const TypeKernels & k = *q8_0_int8_kernels(isa);
        ASSERT_EQ(k.act_type, ElemType::Q8_0);
        for (int64_t n : widths(type)) {
            const Rows w = encode_rows(type, random_floats(n * kTileMax, 13 + n), n, kTileMax);
            const auto xf = random_floats(n * kTileMax, 14 + n);
            const Rows a = activations(k, xf, n, kTileMax), a_ref = activations(ref, xf, n, kTileMax);
            ASSERT_EQ(a.bytes, a_ref.bytes) << isa_name(isa) << ": activation quantisers differ, n=" << n;
            for (int r = 0; r < kTileMax; ++r) {
                std::vector<float> wd(n), xd(n);
                tensor::dequantize_row(type, w.bytes.data() + r * w.stride, wd.data(), n);
                tensor::dequantize_row(ElemType::Q8_0, a.bytes.data() + r * a.stride, xd.data(), n);
                double exact = 0, magnitude = 0;
                for (int64_t i = 0; i < n; ++i) {
                    exact += double(wd[i]) * xd[i];
                    magnitude += std::fabs(double(wd[i]) * xd[i]);
                }
                const float want = ref.vec_dot(w.bytes.data() + r * w.stride, a_ref.bytes.data() + r * a.stride, n);
                const float got = k.vec_dot(w.bytes.data() + r * w.stride, a.bytes.data() + r * a.stride, n);
                EXPECT_NEAR(want, exact, 1e-5 * magnitude + 1e-30) << "scalar n=" << n;
                EXPECT_NEAR(got, want, 1e-5 * magnitude + 1e-30) << isa_name(isa) << " n=" << n;
                // The x86 kernels keep the twin's order (their prompt products fold the same way).
                if (isa == Isa::Avx2 || isa == Isa::Avx512 || isa == Isa::Amx) {
                    EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << isa_name(isa) << " n=" << n;
                }
            }
            if (k.dot_tile == nullptr) continue;
            for (int nr = 1; nr <= kTileMax; ++nr) {
                for (int nt = 1; nt <= kTileMax; ++nt) {
                    std::vector<float> y(kTileMax * kTileMax, -1.0f);
                    k.dot_tile(w.bytes.data(), w.stride, a.bytes.data(), a.stride, n, nr, nt, y.data(), kTileMax);
                    for (int t = 0; t < nt; ++t) {
                        for (int r = 0; r < nr; ++r) {
                            const float one = k.vec_dot(w.bytes.data() + r * w.stride, a.bytes.data() + t * a.stride, n);
                            ASSERT_EQ(std::memcmp(&y[t * kTileMax + r], &one, 4), 0)
                                << isa_name(isa) << " n=" << n << " tile " << nr << "x" << nt;
                        }
                    }
                }
            }
        }
    }
}

TEST(Dispatch, Q8_0ActivationQuantiser) {
    // Hand-checked block: max |x| = 127 gives d = 1, so the quants are x rounded to nearest even.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = -2.5f;  // tie: to even, -2
    x[2] = 3.5f;   // tie: to even, 4
    x[3] = -127.0f;
    x[4] = 0.49f;
    for (Isa isa : available_isas()) {
        const TypeKernels & k = *q8_0_int8_kernels(isa);
        ASSERT_EQ(k.act_type, ElemType::Q8_0);
        std::vector<uint8_t> out(34);
        k.quantize_act(x.data(), out.data(), 32);
        uint16_t d;
        std::memcpy(&d, out.data(), 2);
        EXPECT_EQ(d, 0x3c00) << isa_name(isa);  // 1.0 in f16
        const auto * q = reinterpret_cast<const int8_t *>(out.data() + 2);
        EXPECT_EQ(q[0], 127);
        EXPECT_EQ(q[1], -2);
        EXPECT_EQ(q[2], 4);
        EXPECT_EQ(q[3], -127);
        EXPECT_EQ(q[4], 0);
        std::vector<float> zeros(64, 0.0f);
        std::vector<uint8_t> z(68, 0xff);
        k.quantize_act(zeros.data(), z.data(), 64);
        for (uint8_t byte : z) EXPECT_EQ(byte, 0);  // d = 0 and q = 0
    }
}

std::vector<uint16_t> to_f16(const std::vector<float> & x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = float_to_half(x[i]);
    return h;
}

double abs_dot(const float * a, const float * b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += std::fabs(double(a[i]) * b[i]);
    return s;
}

TEST(VecKernels, EveryLevelMatchesScalarTwin) {
    const VecKernels & ref = vec_kernels(Isa::Scalar);
    for (Isa isa : available_isas()) {
        const VecKernels & k = vec_kernels(isa);
        for (size_t n : {1u, 5u, 8u, 15u, 16u, 31u, 32u, 33u, 100u, 128u}) {
            const auto a = random_floats(n, 10 + n), b = random_floats(n, 20 + n);
            const auto bh = to_f16(b);
            std::vector<float> bw(n);
            for (size_t i = 0; i < n; ++i) bw[i] = half_to_float(bh[i]);
            EXPECT_NEAR(k.dot_f32(a.data(), b.data(), n), ref.dot_f32(a.data(), b.data(), n),
                        1e-6 * abs_dot(a.data(), b.data(), n)) << isa_name(isa) << " n=" << n;
            EXPECT_NEAR(k.dot_f16(a.data(), bh.data(), n), ref.dot_f16(a.data(), bh.data(), n),
                        1e-6 * abs_dot(a.data(), bw.data(), n)) << isa_name(isa) << " n=" << n;
            auto y1 = random_floats(n, 30 + n), y2 = y1, y3 = y1, y4 = y1;
            k.axpy_f32(0.37f, a.data(), y1.data(), n);
            ref.axpy_f32(0.37f, a.data(), y2.data(), n);
            k.axpy_f16(-1.5f, bh.data(), y3.data(), n);
            ref.axpy_f16(-1.5f, bh.data(), y4.data(), n);
            for (size_t i = 0; i < n; ++i) {
                // An FMA rounds once where the twin rounds twice: at most one rounding of the product apart.
                EXPECT_NEAR(y1[i], y2[i], 1e-6 * (std::fabs(y2[i]) + std::fabs(0.37f * a[i]))) << isa_name(isa);
                EXPECT_NEAR(y3[i], y4[i], 1e-6 * (std::fabs(y4[i]) + std::fabs(1.5f * bw[i]))) << isa_name(isa);
            }
            auto z1 = a, z2 = a;
            k.scale(0.3f, z1.data(), n);
            ref.scale(0.3f, z2.data(), n);
            for (size_t i = 0; i < n; ++i) EXPECT_EQ(z1[i], z2[i]) << isa_name(isa);  // one rounding either way
        }
        for (size_t dk : {8u, 20u, 128u}) {
            const size_t dv = 6;
            auto s_a = random_floats(dk * dv, 7 + dk), s_b = s_a;
            for (int t = 0; t < 4; ++t) {
                auto q = random_floats(dk, 40 + t), kk = random_floats(dk, 50 + t);
                for (auto * v : {&q, &kk}) {  // unit vectors, as the model feeds it
                    double n2 = 0;
                    for (float x : *v) n2 += double(x) * x;
                    for (float & x : *v) x = float(x / std::sqrt(n2));
                }
                const auto v = random_floats(dv, 60 + t);
                std::vector<float> oa(dv), ob(dv);
                k.gated_delta_step(s_a.data(), s_a.data(), dk, dv, q.data(), kk.data(), v.data(), 0.9f, 0.3f, 0.25f, oa.data());
                ref.gated_delta_step(s_b.data(), s_b.data(), dk, dv, q.data(), kk.data(), v.data(), 0.9f, 0.3f, 0.25f, ob.data());
                for (size_t m = 0; m < dv; ++m) EXPECT_NEAR(oa[m], ob[m], 1e-5) << isa_name(isa) << " dk=" << dk;
            }
            for (size_t i = 0; i < s_a.size(); ++i) EXPECT_NEAR(s_a[i], s_b[i], 1e-5) << isa_name(isa);
        }
    }
}

// attend_heads gives each query attend_head's bits; both follow the plain twin within float rounding, over
// more rows than one key block and with F16 rows.
TEST(VecKernels, BlockOfQueriesEqualsOneQueryAtATime) {
    const size_t d = 128, width = 2 * d, n = 77, n_q = 5;
    const auto q = random_floats(n_q * d, 80);
    for (ElemType type : {ElemType::F32, ElemType::F16}) {
        std::vector<std::vector<uint8_t>> kr(n, std::vector<uint8_t>(width * 4)), vr(n, std::vector<uint8_t>(width * 4));
        std::vector<const void *> kp, vp;
        for (size_t j = 0; j < n; ++j) {
            auto kf = random_floats(width, 90 + j);
            for (float & x : kf) x *= 0.3f;
            const auto vf = random_floats(width, 300 + j);
            store_cache_row(kr[j].data(), type, kf.data(), width);
            store_cache_row(vr[j].data(), type, vf.data(), width);
            kp.push_back(kr[j].data());
            vp.push_back(vr[j].data());
        }
        const CacheRows k{kp, type}, v{vp, type};
        std::vector<float> block(n_q * d), one(d), ref(d);
        attend_heads(q.data(), n_q, d, d, k, v, d, 0.125f, block.data(), d);
        for (size_t i = 0; i < n_q; ++i) {
            attend_head(q.data() + i * d, d, k, v, d, 0.125f, nullptr, one.data());
            attend_head_ref(q.data() + i * d, d, k, v, d, 0.125f, ref.data());
            for (size_t e = 0; e < d; ++e) {
                ASSERT_EQ(std::memcmp(&block[i * d + e], &one[e], 4), 0) << "query " << i << " element " << e;
                EXPECT_NEAR(one[e], ref[e], 2e-6) << "query " << i << " element " << e;
            }
        }
    }
}

}  // namespace
}  // namespace offgrid::ops::cpu
