#include "model/common/moe.h"

#include <algorithm>
#include <cstring>

#include "ops/matmul_group.h"
#include "ops/thread_pool.h"

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

namespace {

// Scratch of run_experts that only grows (one per thread): no allocation once a context has run its largest batch.
struct ExpertScratch {
    std::vector<size_t> slots;        // t * n_used + k, grouped by expert
    std::vector<size_t> first, count; // per expert: its range in slots
    std::vector<float> x, gu, h, d;   // gathered inputs, gate|up, SwiGLU, down
    std::vector<float> sg, su;        // the shared expert's gate and up
    std::vector<ops::MatmulTask> tasks;
};

ExpertScratch & expert_scratch() {
    thread_local ExpertScratch s;
    return s;
}

template <typename V>
void grow(V & v, size_t n) {
    if (v.size() < n) v.resize(n);
}

// h[j] = swiglu(g[j] * gs, u[j] * us, limit) for j < n with swiglu's bits, the silus 16 at a time. h may alias g.
void swiglu_row(const float * g, float gs, const float * u, float us, float limit, size_t n, float * h) {
    thread_local std::vector<float> act;
    grow(act, n);
    for (size_t j = 0; j < n; ++j) act[j] = g[j] * gs;
    ops::silu_n(act.data(), act.data(), n);
    for (size_t j = 0; j < n; ++j) h[j] = swiglu_of_silu(act[j], u[j] * us, limit);
}

}  // namespace

void run_experts(const ExpertWeights & m, size_t n_expert, size_t n_ff, const float * f, size_t T, size_t E,
                 const Routing & r, size_t n_used, float clamp_limit, float * out, ops::ThreadPool * pool,
                 const SharedExpert * shared) {
    ExpertScratch & s = expert_scratch();
    const size_t S = T * n_used;
    // Slots grouped by expert (counting sort: within an expert, slots stay in token order).
    s.count.assign(n_expert, 0);
    s.first.assign(n_expert + 1, 0);
    for (size_t i = 0; i < S; ++i) ++s.count[r.chosen[i]];
    for (size_t e = 0; e < n_expert; ++e) s.first[e + 1] = s.first[e] + s.count[e];
    grow(s.slots, S);
    {
        std::vector<size_t> & fill = s.count;  // reused as the write cursor, restored below
        for (size_t e = 0; e < n_expert; ++e) fill[e] = s.first[e];
        for (size_t i = 0; i < S; ++i) s.slots[fill[r.chosen[i]]++] = i;
        for (size_t e = 0; e < n_expert; ++e) fill[e] -= s.first[e];
    }
    grow(s.x, S * E);
    grow(s.gu, S * 2 * n_ff);
    grow(s.h, S * n_ff);
    grow(s.d, S * E);
    for (size_t i = 0; i < S; ++i) std::memcpy(&s.x[i * E], f + (s.slots[i] / n_used) * E, E * sizeof(float));
    const size_t n_sh = shared ? static_cast<size_t>(shared->gate.rows) : 0;
    if (shared) {
        grow(s.sg, T * n_sh);
        grow(s.su, T * n_sh);
    }

    // Gate and up of every expert (fused: one product of 2 n_ff rows, gate then up), and the shared expert's.
    s.tasks.clear();
    for (size_t e = 0; e < n_expert; ++e) {
        const size_t n = s.count[e], at = s.first[e];
        if (n == 0) continue;
        const float * x = &s.x[at * E];
        float * gu = &s.gu[at * 2 * n_ff];
        const auto tokens = static_cast<int64_t>(n);
        if (m.fused_gate_up) {
            s.tasks.push_back({m.gate_up.row_slice(static_cast<int64_t>(e * 2 * n_ff), static_cast<int64_t>(2 * n_ff)), x,
                               tokens, gu});
        } else {
            // Separate products into the two halves of the same layout (gate rows, then up rows, per token).
            s.tasks.push_back({m.gate.row_slice(static_cast<int64_t>(e * n_ff), static_cast<int64_t>(n_ff)), x, tokens, gu});
            s.tasks.push_back({m.up.row_slice(static_cast<int64_t>(e * n_ff), static_cast<int64_t>(n_ff)), x, tokens,
                               gu + n * n_ff});
        }
    }
    if (shared) {
        s.tasks.push_back({shared->gate, f, static_cast<int64_t>(T), s.sg.data()});
        s.tasks.push_back({shared->up, f, static_cast<int64_t>(T), s.su.data()});
    }
    ops::matmul_group(s.tasks, pool);

    // SwiGLU per slot (expert slots, then the shared expert's tokens) on the pool: every element is computed
    // alike on any thread; then the down products. A decode step's few rows (the exponentials 16 lanes at a time)
    // take a few microseconds, less than a pool job's hand-off, so below kSpread elements they run here.
    {
        const float * const gu_all = s.gu.data();
        float * const h_all = s.h.data();
        float * const sg = shared ? s.sg.data() : nullptr;
        const float * const su = shared ? s.su.data() : nullptr;
        const size_t rows = S + (shared ? T : 0);
        constexpr size_t kSpread = 4096;  // a one-token step (5 rows of 256) runs here, a step of 8 (40 rows) spreads
        ops::ThreadPool * const spread = rows * std::max(n_ff, n_sh) >= kSpread ? pool : nullptr;
        ops::parallel_for(spread, rows, [&](size_t q0, size_t q1) {
            for (size_t q = q0; q < q1; ++q) {
                if (q >= S) {
                    const size_t t = q - S;
                    swiglu_row(sg + t * n_sh, shared->gate_scale, su + t * n_sh, shared->up_scale, shared->clamp_limit,
                               n_sh, sg + t * n_sh);
                    continue;
                }
                const size_t e = r.chosen[s.slots[q]], n = s.count[e], at = s.first[e], i = q - at;
                const float * gu = gu_all + at * 2 * n_ff;
                // fused: token i's row is [gate | up]; separate: all gates, then all ups.
                const float * g = m.fused_gate_up ? gu + i * 2 * n_ff : gu + i * n_ff;
                const float * u = m.fused_gate_up ? g + n_ff : gu + (n + i) * n_ff;
                float * h = h_all + q * n_ff;
                swiglu_row(g, m.gate_scale[e], u, m.up_scale[e], clamp_limit, n_ff, h);
            }
        }, 4);
    }
    s.tasks.clear();
    for (size_t e = 0; e < n_expert; ++e) {
        const size_t n = s.count[e], at = s.first[e];
        if (n == 0) continue;
        s.tasks.push_back({m.down.row_slice(static_cast<int64_t>(e * E), static_cast<int64_t>(E)), &s.h[at * n_ff],
                           static_cast<int64_t>(n), &s.d[at * E]});
    }
    if (shared) s.tasks.push_back({shared->down, s.sg.data(), static_cast<int64_t>(T), shared->out});
    ops::matmul_group(s.tasks, pool);

    for (size_t e = 0; e < n_expert; ++e) {
        for (size_t i = s.first[e]; i < s.first[e] + s.count[e]; ++i) {
            float * o = out + s.slots[i] * E;
            const float * d = &s.d[i * E];
            for (size_t j = 0; j < E; ++j) o[j] = d[j] * m.down_scale[e];
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
