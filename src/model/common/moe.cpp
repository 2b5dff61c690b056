#include "model/common/moe.h"

#include <algorithm>
#include <cstring>

namespace offgrid::model::common {

Routing route_softmax_top_k(float * logits, size_t T, size_t n_expert, size_t n_used) {
    Routing r;
    r.chosen.resize(T * n_used);
    r.weight.resize(T * n_used);
    for (size_t t = 0; t < T; ++t) {
        float * p = logits + t * n_expert;
        ops::softmax(p, n_expert);
        const auto sel = ops::top_k(p, n_expert, n_used);
        float sum = 0.0f;
        for (size_t k = 0; k < n_used; ++k) sum += p[sel[k]];
        sum = std::max(sum, 6.103515625e-5f);
        for (size_t k = 0; k < n_used; ++k) {
            r.chosen[t * n_used + k] = sel[k];
            r.weight[t * n_used + k] = p[sel[k]] / sum;
        }
    }
    return r;
}

Routing route_sigmoid_biased(const float * logits, const float * bias, size_t T, size_t n_expert, size_t n_used,
                             bool normalise, float scale) {
    Routing r;
    r.chosen.resize(T * n_used);
    r.weight.resize(T * n_used);
    std::vector<float> p(n_expert), biased(n_expert);
    for (size_t t = 0; t < T; ++t) {
        for (size_t e = 0; e < n_expert; ++e) {
            p[e] = ops::sigmoid(logits[t * n_expert + e]);
            biased[e] = p[e] + bias[e];
        }
        const auto sel = ops::top_k(biased.data(), n_expert, n_used);
        float sum = 0.0f;
        for (size_t k = 0; k < n_used; ++k) sum += p[sel[k]];
        sum = std::max(sum, 6.103515625e-5f);
        for (size_t k = 0; k < n_used; ++k) {
            float w = p[sel[k]];
            if (normalise) w /= sum;
            if (scale != 0.0f && scale != 1.0f) w *= scale;
            r.chosen[t * n_used + k] = sel[k];
            r.weight[t * n_used + k] = w;
        }
    }
    return r;
}

void run_experts(const ExpertWeights & m, size_t n_expert, size_t n_ff, const float * f, size_t T, size_t E,
                 const Routing & r, size_t n_used, float clamp_limit, float * out, ops::ThreadPool * pool) {
    for (size_t e = 0; e < n_expert; ++e) {
        std::vector<size_t> slots;  // t * n_used + k
        for (size_t s = 0; s < T * n_used; ++s) {
            if (r.chosen[s] == e) slots.push_back(s);
        }
        if (slots.empty()) continue;
        const size_t n = slots.size();
        std::vector<float> x(n * E), gate(n * n_ff), up(n * n_ff), down(n * E);
        for (size_t i = 0; i < n; ++i) std::memcpy(&x[i * E], f + (slots[i] / n_used) * E, E * sizeof(float));
        if (m.fused_gate_up) {
            ops::matmul(m.gate_up.row_slice(e * 2 * n_ff, n_ff), x.data(), n, gate.data(), pool);
            ops::matmul(m.gate_up.row_slice(e * 2 * n_ff + n_ff, n_ff), x.data(), n, up.data(), pool);
        } else {
            ops::matmul(m.gate.row_slice(e * n_ff, n_ff), x.data(), n, gate.data(), pool);
            ops::matmul(m.up.row_slice(e * n_ff, n_ff), x.data(), n, up.data(), pool);
        }
        for (size_t i = 0; i < n * n_ff; ++i) {
            gate[i] = swiglu(gate[i] * m.gate_scale[e], up[i] * m.up_scale[e], clamp_limit);
        }
        ops::matmul(m.down.row_slice(e * E, E), gate.data(), n, down.data(), pool);
        for (size_t i = 0; i < n; ++i) {
            float * o = out + slots[i] * E;
            for (size_t j = 0; j < E; ++j) o[j] = down[i * E + j] * m.down_scale[e];
        }
    }
}

void weighted_sum(const float * out, const Routing & r, size_t T, size_t n_used, size_t E, float * y) {
    for (size_t t = 0; t < T; ++t) {
        for (size_t j = 0; j < E; ++j) {
            float acc = 0.0f;
            for (size_t k = 0; k < n_used; ++k) acc += out[(t * n_used + k) * E + j] * r.weight[t * n_used + k];
            y[t * E + j] = acc;
        }
    }
}

}  // namespace offgrid::model::common
