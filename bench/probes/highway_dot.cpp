// Probe behind the Highway-or-intrinsics decision of docs/kernels.md (not part of the build): the F32 and F16
// dot products written with Google Highway's dynamic dispatch (Debian libhwy-dev 1.0.3) against the same
// products from offgrid's dispatch table, on rows in cache and on rows streamed from memory, one thread.
// Build by hand from the repository root, after the main build:
//   g++ -O2 -std=c++20 -I. -Isrc -Iinclude bench/probes/highway_dot.cpp build/liboffgrid_ops.a \
//       build/liboffgrid_tensor.a build/liboffgrid_common.a -lhwy -o /tmp/highway_dot && /tmp/highway_dot
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/probes/highway_dot.cpp"
#include <hwy/foreach_target.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace probe {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotF32(const float * a, const float * b, size_t n) {
    const hn::ScalableTag<float> d;
    const size_t N = hn::Lanes(d);
    auto acc = hn::Zero(d);
    for (size_t i = 0; i + N <= n; i += N) acc = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc);
    return hn::GetLane(hn::SumOfLanes(d, acc));
}

float DotF16(const float * a, const hwy::float16_t * b, size_t n) {
    const hn::ScalableTag<float> d;
    const hn::Rebind<hwy::float16_t, decltype(d)> dh;
    const size_t N = hn::Lanes(d);
    auto acc = hn::Zero(d);
    for (size_t i = 0; i + N <= n; i += N) acc = hn::MulAdd(hn::LoadU(d, a + i), hn::PromoteTo(d, hn::LoadU(dh, b + i)), acc);
    return hn::GetLane(hn::SumOfLanes(d, acc));
}

}  // namespace HWY_NAMESPACE
}  // namespace probe
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ops/cpu/dispatch.h"

namespace probe {
HWY_EXPORT(DotF32);
HWY_EXPORT(DotF16);
}  // namespace probe

int main() {
    using namespace offgrid;
    constexpr size_t kCols = 1024;
    const ops::cpu::Isa isa = ops::cpu::active_isa();
    const auto & f32 = *ops::cpu::kernels_for(tensor::ElemType::F32, isa);
    const auto & f16 = *ops::cpu::kernels_for(tensor::ElemType::F16, isa);
    std::printf("offgrid level: %s; highway target: %s\n", ops::cpu::isa_name(isa),
                hwy::TargetName(hwy::SupportedAndGeneratedTargets()[0]));
    for (size_t rows : {size_t(64), size_t(16384)}) {  // 256 KiB in cache, 64 MiB streamed (f32)
        std::vector<float> w(rows * kCols), x(kCols), y(rows);
        std::vector<uint16_t> h(rows * kCols);
        for (size_t i = 0; i < w.size(); ++i) {
            w[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
            h[i] = 0x3c00 ^ uint16_t(i & 0x3ff);
        }
        for (size_t i = 0; i < kCols; ++i) x[i] = float(i % 7) - 3.0f;
        auto time = [&](const char * what, auto && fn, size_t bytes) {
            const int reps = rows == 64 ? 4000 : 16;
            fn();
            const auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; ++r) fn();
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("  %-28s rows %6zu: %7.2f GFLOP/s %7.2f GB/s\n", what, rows, 2.0 * rows * kCols * reps / s / 1e9,
                        double(bytes) * reps / s / 1e9);
        };
        time("f32 highway", [&] { for (size_t r = 0; r < rows; ++r) y[r] = HWY_DYNAMIC_DISPATCH(probe::DotF32)(&w[r * kCols], x.data(), kCols); }, w.size() * 4);
        time("f32 offgrid vec_dot", [&] { for (size_t r = 0; r < rows; ++r) y[r] = f32.vec_dot(&w[r * kCols], x.data(), kCols); }, w.size() * 4);
        time("f16 highway", [&] { for (size_t r = 0; r < rows; ++r) y[r] = HWY_DYNAMIC_DISPATCH(probe::DotF16)(x.data(), reinterpret_cast<const hwy::float16_t *>(&h[r * kCols]), kCols); }, h.size() * 2);
        time("f16 offgrid vec_dot", [&] { for (size_t r = 0; r < rows; ++r) y[r] = f16.vec_dot(&h[r * kCols], x.data(), kCols); }, h.size() * 2);
    }
    return 0;
}
#endif
