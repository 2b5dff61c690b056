// The out-of-place steps of the recurrence (causal_conv_step_into, gated_delta_step_into, and the vector
// kernel's state_in / state_out at every ISA level) give the in-place step's bits exactly, leave the input
// state as it was, and also work with in == out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/cpu/dispatch.h"
#include "ops/cpu/vec.h"
#include "ops/sequence.h"
#include "random_data.h"

namespace offgrid::ops {
namespace {

using test_data::random_floats;

void normalise(std::vector<float> & v) {
    double n2 = 0;
    for (float x : v) n2 += double(x) * x;
    for (float & x : v) x = float(x / std::sqrt(n2));
}

TEST(SequenceInto, DeltaStepOutOfPlaceHasTheInPlaceBitsAtEveryLevel) {
    for (cpu::Isa isa : cpu::available_isas()) {
        const cpu::VecKernels & k = cpu::vec_kernels(isa);
        for (size_t dk : {8u, 20u, 64u, 128u, 256u}) {
            const size_t dv = 7;
            for (size_t offset : {0u, 1u}) {  // a 64-byte aligned output (non-temporal stores) and a misaligned one
                const auto start = random_floats(dk * dv, 3 + dk);
                auto in_place = start;
                // Two buffers the step alternates between, as the memory's two banks.
                std::vector<float> room_a(dk * dv + 32), room_b(dk * dv + 32);
                auto aligned = [&](std::vector<float> & room) {
                    auto p = reinterpret_cast<uintptr_t>(room.data());
                    return reinterpret_cast<float *>((p + 63) / 64 * 64) + offset;
                };
                float * chained_in = aligned(room_a);
                float * chained_out = aligned(room_b);
                std::copy(start.begin(), start.end(), chained_in);
                std::fill(chained_out, chained_out + dk * dv, -1.0f);
                for (int t = 0; t < 4; ++t) {
                    auto q = random_floats(dk, 40 + t), kk = random_floats(dk, 50 + t);
                    normalise(q);
                    normalise(kk);
                    const auto v = random_floats(dv, 60 + t);
                    std::vector<float> o1(dv), o2(dv);
                    k.gated_delta_step(in_place.data(), in_place.data(), dk, dv, q.data(), kk.data(), v.data(), 0.9f,
                                       0.3f, 0.25f, o1.data());
                    const std::vector<float> before(chained_in, chained_in + dk * dv);
                    k.gated_delta_step(chained_in, chained_out, dk, dv, q.data(), kk.data(), v.data(), 0.9f, 0.3f,
                                       0.25f, o2.data());
                    EXPECT_EQ(std::vector<float>(chained_in, chained_in + dk * dv), before)
                        << cpu::isa_name(isa) << ": the input state changed";
                    EXPECT_EQ(o1, o2) << cpu::isa_name(isa) << " dk=" << dk;
                    EXPECT_EQ(in_place, std::vector<float>(chained_out, chained_out + dk * dv))
                        << cpu::isa_name(isa) << " dk=" << dk << " offset " << offset;
                    std::swap(chained_in, chained_out);  // the flip a decode step does
                }
            }
        }
    }
}

TEST(SequenceInto, DeltaStepEntryPointsAgree) {
    const size_t dk = 16, dv = 5;
    auto a = random_floats(dk * dv, 9);
    const auto start = a;
    std::vector<float> b(dk * dv);
    auto q = random_floats(dk, 1), kk = random_floats(dk, 2);
    normalise(q);
    normalise(kk);
    const auto v = random_floats(dv, 3);
    std::vector<float> o1(dv), o2(dv);
    gated_delta_step(a.data(), dk, dv, q.data(), kk.data(), v.data(), 0.8f, 0.4f, 0.5f, o1.data());
    gated_delta_step_into(start.data(), b.data(), dk, dv, q.data(), kk.data(), v.data(), 0.8f, 0.4f, 0.5f, o2.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(o1, o2);
}

// The 4-tap fast path against the plain twin over a sequence (every output and the final history, bit for bit,
// with zeros of both signs among the inputs).
TEST(SequenceInto, FourTapConvMatchesTheTwin) {
    const size_t kernel = 4, channels = 37, h = 3, frames = 6;
    const auto w = random_floats(kernel * channels, 15);
    auto x = random_floats(frames * channels, 16);
    x[3] = 0.0f;
    x[4] = -0.0f;
    auto hist_fast = random_floats(channels * h, 17);
    auto hist_ref = hist_fast;
    std::vector<float> out_fast(frames * channels), out_ref(frames * channels);
    for (size_t t = 0; t < frames; ++t) {
        causal_conv_step(w.data(), kernel, 1, channels, hist_fast.data(), &x[t * channels], &out_fast[t * channels]);
    }
    causal_conv_ref(w.data(), kernel, 1, channels, hist_ref.data(), x.data(), frames, out_ref.data());
    for (size_t i = 0; i < out_ref.size(); ++i) {
        EXPECT_EQ(std::signbit(out_fast[i]), std::signbit(out_ref[i])) << i;
        EXPECT_EQ(out_fast[i], out_ref[i]) << i;
    }
    EXPECT_EQ(hist_fast, hist_ref);
}

TEST(SequenceInto, ConvStepOutOfPlaceHasTheInPlaceBits) {
    for (size_t dilation : {1u, 2u, 3u}) {
        const size_t kernel = dilation == 3 ? 3 : 4, channels = 37, h = (kernel - 1) * dilation;
        const auto w = random_floats(kernel * channels, 5);
        auto in_place = random_floats(channels * h, 6 + dilation);
        auto chained_in = in_place;
        std::vector<float> chained_out(channels * h, -1.0f);
        for (int t = 0; t < 5; ++t) {
            const auto x = random_floats(channels, 70 + t);
            std::vector<float> o1(channels), o2(channels);
            causal_conv_step(w.data(), kernel, dilation, channels, in_place.data(), x.data(), o1.data());
            const auto before = chained_in;
            causal_conv_step_into(w.data(), kernel, dilation, channels, chained_in.data(), chained_out.data(),
                                  x.data(), o2.data());
            EXPECT_EQ(chained_in, before);
            EXPECT_EQ(o1, o2) << "dilation " << dilation << " step " << t;
            EXPECT_EQ(in_place, chained_out) << "dilation " << dilation << " step " << t;
            std::swap(chained_in, chained_out);
        }
    }
}

}  // namespace
}  // namespace offgrid::ops
