// The out-of-place steps of the recurrence (causal_conv_step_into, gated_delta_step_into, and the vector
// kernel's state_in / state_out at every ISA level) give the in-place step's bits exactly, leave the input
// state as it was, and also work with in == out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
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

TEST(SequenceInto, ConvFramesHaveTheStepBitsWithCopiesAndChannelRanges) {
    for (size_t kernel : {1u, 2u, 4u, 5u}) {
        const size_t C = 37, h = kernel - 1, n = 9;
        const auto weights = random_floats(C * kernel, 100 + kernel);
        const auto start = random_floats(C * h, 200 + kernel);
        // The frames are rows 3, 0, 7, ... of a 10-row input (a sequence's tokens among others in a ubatch).
        const auto x = random_floats(10 * C, 300 + kernel);
        const std::vector<uint32_t> rows = {3, 0, 7, 1, 2, 9, 4, 8, 5};
        // The reference: causal_conv_step frame after frame, with the history after frames 2 and 8 kept.
        std::vector<float> hist = start, want(n * C), want_after2, want_after8;
        for (size_t f = 0; f < n; ++f) {
            causal_conv_step(weights.data(), kernel, 1, C, hist.data(), &x[rows[f] * C], &want[f * C]);
            if (f + 1 == 2) want_after2 = hist;
            if (f + 1 == 8) want_after8 = hist;
        }
        for (bool in_place : {true, false}) {
            std::vector<float> in = start, out_hist(C * h, -1.0f), got(n * C, -1.0f), after2(C * h, -1.0f),
                               after8(C * h, -1.0f);
            const ConvHistoryCopy copies[2] = {{2, after2.data()}, {8, after8.data()}};
            float * hist_out = in_place ? in.data() : out_hist.data();
            // Three uneven channel ranges, as threads would take them.
            for (auto [c0, c1] : {std::pair<size_t, size_t>{0, 5}, {5, 22}, {22, C}}) {
                causal_conv_frames(weights.data(), kernel, c0, c1, in.data(), hist_out, x.data(), C, rows.data(), n,
                                   got.data(), C, copies, 2);
            }
            EXPECT_EQ(got, want) << "kernel " << kernel;
            EXPECT_EQ(std::vector<float>(hist_out, hist_out + C * h), hist) << "kernel " << kernel;
            EXPECT_EQ(after2, want_after2) << "kernel " << kernel;
            EXPECT_EQ(after8, want_after8) << "kernel " << kernel;
            if (!in_place) {
                EXPECT_EQ(in, start) << "the input history changed";
            }
        }
    }
}

}  // namespace
}  // namespace offgrid::ops
