#include "ops/elementwise.h"

#include <algorithm>
#include <numeric>

#include "ops/cpu/vec.h"

namespace offgrid::ops {

void sigmoid_n(const float * x, float * y, size_t n) { cpu::vec_kernels().sigmoid_f32(x, y, n); }
void silu_n(const float * x, float * y, size_t n) { cpu::vec_kernels().silu_f32(x, y, n); }
void exp_n(const float * x, float * y, size_t n) { cpu::vec_kernels().exp_f32(x, y, n); }

namespace {
// NaN ranks as -inf so that the order stays a strict weak order (a NaN score never crashes the sort).
inline float rank_key(float v) { return std::isnan(v) ? -INFINITY : v; }
}  // namespace

void rms_norm(const float * x, size_t n, float eps, const float * gamma, float * out) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (gamma) {
        for (size_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * gamma[i];
    } else {
        for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale;
    }
}

void l2_norm(const float * x, size_t n, float eps, float * out) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum) + eps);
    for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale;
}

void softmax(float * x, size_t n) {
    if (n == 0) return;
    float mx = x[0];
    for (size_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    float sum = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = 1.0f / sum;
    for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

std::vector<uint32_t> top_k(const float * values, size_t n, size_t k) {
    k = std::min(k, n);
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    // A strict total order (value descending, index ascending) makes the selected set unique.
    auto before = [values](uint32_t a, uint32_t b) {
        const float va = rank_key(values[a]);
        const float vb = rank_key(values[b]);
        return va > vb || (va == vb && a < b);
    };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
    idx.resize(k);
    return idx;
}

std::vector<uint32_t> top_k_ref(const float * values, size_t n, size_t k) {
    k = std::min(k, n);
    std::vector<bool> taken(n, false);
    std::vector<uint32_t> out;
    for (size_t r = 0; r < k; ++r) {
        size_t best = n;
        for (size_t i = 0; i < n; ++i) {
            if (taken[i]) continue;
            if (best == n || rank_key(values[i]) > rank_key(values[best])) best = i;
        }
        taken[best] = true;
        out.push_back(static_cast<uint32_t>(best));
    }
    return out;
}

}  // namespace offgrid::ops
