#include "ops/elementwise.h"

#include <algorithm>
#include <numeric>

#include "ops/cpu/vec.h"

namespace offgrid::ops {

void mul_n(float a, const float * x, float * y, size_t n) { cpu::vec_kernels().mul_f32(a, x, y, n); }
void add_mul_n(float a, const float * x, float * y, size_t n) { cpu::vec_kernels().add_mul_f32(a, x, y, n); }
void add_prod_n(const float * x, const float * g, float * y, size_t n) { cpu::vec_kernels().add_prod_f32(x, g, y, n); }
void lowrank_interleaved_n(const float * u, size_t lr, const float * l, size_t o0, size_t n, float * y) {
    static_assert(kLowrankGroup == cpu::kLowrankGroup);
    cpu::vec_kernels().lowrank_interleaved_f32(u, lr, l, o0, n, y);
}
void sigmoid_n(const float * x, float * y, size_t n) { cpu::vec_kernels().sigmoid_f32(x, y, n); }
void silu_n(const float * x, float * y, size_t n) { cpu::vec_kernels().silu_f32(x, y, n); }
void exp_n(const float * x, float * y, size_t n) { cpu::vec_kernels().exp_f32(x, y, n); }

namespace {
// NaN ranks as -inf so that the order stays a strict weak order (a NaN score never crashes the sort).
inline float rank_key(float v) { return std::isnan(v) ? -INFINITY : v; }
}  // namespace

namespace {

// The second half of rms_norm, from the row's sum of squares.
void scale_row(const float * x, size_t n, double sum, float eps, const float * gamma, float * out) {
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (gamma) {
        for (size_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * gamma[i];
    } else {
        for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale;
    }
}

}  // namespace

void rms_norm(const float * x, size_t n, float eps, const float * gamma, float * out) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    scale_row(x, n, sum, eps, gamma, out);
}

void rms_norm_rows(const float * x, size_t n_rows, size_t n, float eps, const float * const * gammas, float * out) {
    size_t r = 0;
    // Four rows at a time: four independent chains of double additions (each row's sum in index order, as in
    // rms_norm), so an addition does not wait for the one before it in the same row.
    for (; r + 4 <= n_rows; r += 4) {
        const float * a = x + r * n;
        const float * b = a + n;
        const float * c = b + n;
        const float * d = c + n;
        double sa = 0.0, sb = 0.0, sc = 0.0, sd = 0.0;
        for (size_t i = 0; i < n; ++i) {
            sa += static_cast<double>(a[i]) * static_cast<double>(a[i]);
            sb += static_cast<double>(b[i]) * static_cast<double>(b[i]);
            sc += static_cast<double>(c[i]) * static_cast<double>(c[i]);
            sd += static_cast<double>(d[i]) * static_cast<double>(d[i]);
        }
        const double sums[4] = {sa, sb, sc, sd};
        for (size_t k = 0; k < 4; ++k) {
            scale_row(x + (r + k) * n, n, sums[k], eps, gammas ? gammas[r + k] : nullptr, out + (r + k) * n);
        }
    }
    for (; r < n_rows; ++r) rms_norm(x + r * n, n, eps, gammas ? gammas[r] : nullptr, out + r * n);
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

size_t top_k_into(const float * values, size_t n, size_t k, uint32_t * idx) {
    k = std::min(k, n);
    std::iota(idx, idx + n, 0u);
    // A strict total order (value descending, index ascending) makes the selected set unique.
    auto before = [values](uint32_t a, uint32_t b) {
        const float va = rank_key(values[a]);
        const float vb = rank_key(values[b]);
        return va > vb || (va == vb && a < b);
    };
    std::partial_sort(idx, idx + k, idx + n, before);
    return k;
}

std::vector<uint32_t> top_k(const float * values, size_t n, size_t k) {
    std::vector<uint32_t> idx(n);
    idx.resize(top_k_into(values, n, k, idx.data()));
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
