#include "model/common/moe.h"

#include <algorithm>
#include <cstring>

#include "memory/huge_pages.h"
#include "offgrid/system.h"
#include "ops/matmul_group.h"
#include "ops/rows16.h"
#include "ops/thread_pool.h"

namespace offgrid::model::common {

void group_expert_rows(ExpertWeights & w, int64_t n_expert) {
    if (!offgrid::expert_rows16() || n_expert <= 0) return;
    // Each expert's rows must be whole groups, so that an expert's slice is one.
    const auto whole = [&](const ops::Matrix & m) {
        return m.data != nullptr && ops::rows16_eligible(m) && (m.rows / n_expert) % ops::kRows16 == 0;
    };
    std::vector<ops::Matrix *> chosen;
    for (ops::Matrix * m : {&w.gate_up, &w.gate, &w.up, &w.down}) {
        if (whole(*m)) chosen.push_back(m);
    }
    if (chosen.empty()) return;
    size_t total = 0;
    for (const ops::Matrix * m : chosen) total += static_cast<size_t>(m->rows) * m->row_bytes;
    using Bytes = std::vector<uint8_t, memory::HugePageAllocator<uint8_t>>;
    auto bytes = std::make_shared<Bytes>(total);
    size_t at = 0;
    for (ops::Matrix * m : chosen) {
        const size_t n = static_cast<size_t>(m->rows) * m->row_bytes;
        *m = ops::repack_rows16(*m, bytes->data() + at);
        at += n;
    }
    w.rows16 = std::move(bytes);
}

namespace {

Routing take_routing(ops::Arena & scratch, size_t T, size_t n_used) {
    return {scratch.take<uint32_t>(T * n_used), scratch.take<float>(T * n_used)};
}

}  // namespace

size_t routing_bytes(size_t T, size_t n_expert, size_t n_used) {
    return ops::arena_bytes<uint32_t>(T * n_used) + ops::arena_bytes<float>(T * n_used) +
           ops::arena_bytes<uint32_t>(n_expert) + 2 * ops::arena_bytes<float>(n_expert);
}

Routing route_softmax_top_k(float * logits, size_t T, size_t n_expert, size_t n_used, ops::Arena & scratch) {
    Routing r = take_routing(scratch, T, n_used);
    ops::Scope work(scratch);
    uint32_t * sel = work.take<uint32_t>(n_expert).data();
    for (size_t t = 0; t < T; ++t) {
        float * p = logits + t * n_expert;
        ops::softmax(p, n_expert);
        ops::top_k_into(p, n_expert, n_used, sel);
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
                             bool normalise, float scale, ops::Arena & scratch) {
    Routing r = take_routing(scratch, T, n_used);
    ops::Scope work(scratch);
    uint32_t * sel = work.take<uint32_t>(n_expert).data();
    float * p = work.take<float>(n_expert).data();
    float * biased = work.take<float>(n_expert).data();
    for (size_t t = 0; t < T; ++t) {
        for (size_t e = 0; e < n_expert; ++e) {
            p[e] = ops::sigmoid(logits[t * n_expert + e]);
            biased[e] = p[e] + bias[e];
        }
        ops::top_k_into(biased, n_expert, n_used, sel);
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

// h[j] = swiglu(g[j] * gs, u[j] * us, limit) for j < n with swiglu's bits, the silus 16 at a time, act n floats of
// working space. h may alias g.
void swiglu_row(const float * g, float gs, const float * u, float us, float limit, size_t n, float * act, float * h) {
    for (size_t j = 0; j < n; ++j) act[j] = g[j] * gs;
    ops::silu_n(act, act, n);
    for (size_t j = 0; j < n; ++j) h[j] = swiglu_of_silu(act[j], u[j] * us, limit);
}

}  // namespace

size_t run_experts_main_bytes(size_t n_expert, size_t n_ff, size_t T, size_t E, size_t n_used, size_t n_shared_ff) {
    const size_t S = T * n_used;
    return ops::arena_bytes<size_t>(S) + 2 * ops::arena_bytes<size_t>(n_expert + 1) + ops::arena_bytes<float>(S * E) +
           ops::arena_bytes<float>(S * 2 * n_ff) + ops::arena_bytes<float>(S * n_ff) + ops::arena_bytes<float>(S * E) +
           2 * ops::arena_bytes<float>(T * n_shared_ff) + ops::arena_bytes<ops::MatmulTask>(2 * n_expert + 3) +
           run_experts_thread_bytes(n_ff, n_shared_ff);
}

size_t run_experts_thread_bytes(size_t n_ff, size_t n_shared_ff) {
    return ops::arena_bytes<float>(std::max(n_ff, n_shared_ff));
}

void run_experts(const ExpertWeights & m, size_t n_expert, size_t n_ff, const float * f, size_t T, size_t E,
                 const Routing & r, size_t n_used, float clamp_limit, float * out, ops::ThreadPool * pool,
                 ops::Workspace & workspace, const SharedExpert * shared) {
    ops::Scope scope(workspace.local());
    const size_t S = T * n_used;
    // Slots grouped by expert (counting sort: within an expert, slots stay in token order).
    const std::span<size_t> slots = scope.take<size_t>(S);  // t * n_used + k, grouped by expert
    const std::span<size_t> count = scope.take<size_t>(n_expert + 1), first = scope.take<size_t>(n_expert + 1);
    std::fill(count.begin(), count.end(), size_t{0});
    std::fill(first.begin(), first.end(), size_t{0});
    for (size_t i = 0; i < S; ++i) ++count[r.chosen[i]];
    for (size_t e = 0; e < n_expert; ++e) first[e + 1] = first[e] + count[e];
    {
        const std::span<size_t> fill = count;  // reused as the write cursor, restored below
        for (size_t e = 0; e < n_expert; ++e) fill[e] = first[e];
        for (size_t i = 0; i < S; ++i) slots[fill[r.chosen[i]]++] = i;
        for (size_t e = 0; e < n_expert; ++e) fill[e] -= first[e];
    }
    // Gathered inputs, gate|up, SwiGLU, down.
    float * const xs = scope.take<float>(S * E).data();
    float * const gu_all = scope.take<float>(S * 2 * n_ff).data();
    float * const h_all = scope.take<float>(S * n_ff).data();
    float * const d_all = scope.take<float>(S * E).data();
    for (size_t i = 0; i < S; ++i) std::memcpy(&xs[i * E], f + (slots[i] / n_used) * E, E * sizeof(float));
    const size_t n_sh = shared ? static_cast<size_t>(shared->gate.rows) : 0;
    float * const sg = shared ? scope.take<float>(T * n_sh).data() : nullptr;  // the shared expert's gate and up
    float * const su = shared ? scope.take<float>(T * n_sh).data() : nullptr;
    const std::span<ops::MatmulTask> tasks = scope.take<ops::MatmulTask>(2 * n_expert + 3);
    size_t n_tasks = 0;

    // Gate and up of every expert (fused: one product of 2 n_ff rows, gate then up), and the shared expert's.
    for (size_t e = 0; e < n_expert; ++e) {
        const size_t n = count[e], at = first[e];
        if (n == 0) continue;
        const float * x = &xs[at * E];
        float * gu = &gu_all[at * 2 * n_ff];
        const auto tokens = static_cast<int64_t>(n);
        if (m.fused_gate_up) {
            tasks[n_tasks++] = {m.gate_up.row_slice(static_cast<int64_t>(e * 2 * n_ff), static_cast<int64_t>(2 * n_ff)), x,
                                tokens, gu};
        } else {
            // Separate products into the two halves of the same layout (gate rows, then up rows, per token).
            tasks[n_tasks++] = {m.gate.row_slice(static_cast<int64_t>(e * n_ff), static_cast<int64_t>(n_ff)), x, tokens, gu};
            tasks[n_tasks++] = {m.up.row_slice(static_cast<int64_t>(e * n_ff), static_cast<int64_t>(n_ff)), x, tokens,
                                gu + n * n_ff};
        }
    }
    if (shared) {
        tasks[n_tasks++] = {shared->gate, f, static_cast<int64_t>(T), sg};
        tasks[n_tasks++] = {shared->up, f, static_cast<int64_t>(T), su};
    }
    ops::matmul_group(tasks.first(n_tasks), pool);

    // SwiGLU per slot (expert slots, then the shared expert's tokens) on the pool: every element is computed
    // alike on any thread; then the down products. A decode step's few rows (the exponentials 16 lanes at a time)
    // take a few microseconds, less than a pool job's hand-off, so below kSpread elements they run here.
    {
        const size_t rows = S + (shared ? T : 0);
        constexpr size_t kSpread = 4096;  // a one-token step (5 rows of 256) runs here, a step of 8 (40 rows) spreads
        ops::ThreadPool * const spread = rows * std::max(n_ff, n_sh) >= kSpread ? pool : nullptr;
        ops::parallel_for(spread, rows, [&](size_t q0, size_t q1) {
            ops::Scope local(workspace.local());
            float * act = local.take<float>(std::max(n_ff, n_sh)).data();
            for (size_t q = q0; q < q1; ++q) {
                if (q >= S) {
                    const size_t t = q - S;
                    swiglu_row(sg + t * n_sh, shared->gate_scale, su + t * n_sh, shared->up_scale, shared->clamp_limit,
                               n_sh, act, sg + t * n_sh);
                    continue;
                }
                const size_t e = r.chosen[slots[q]], n = count[e], at = first[e], i = q - at;
                const float * gu = gu_all + at * 2 * n_ff;
                // fused: token i's row is [gate | up]; separate: all gates, then all ups.
                const float * g = m.fused_gate_up ? gu + i * 2 * n_ff : gu + i * n_ff;
                const float * u = m.fused_gate_up ? g + n_ff : gu + (n + i) * n_ff;
                float * h = h_all + q * n_ff;
                swiglu_row(g, m.gate_scale[e], u, m.up_scale[e], clamp_limit, n_ff, act, h);
            }
        }, 4);
    }
    n_tasks = 0;
    for (size_t e = 0; e < n_expert; ++e) {
        const size_t n = count[e], at = first[e];
        if (n == 0) continue;
        tasks[n_tasks++] = {m.down.row_slice(static_cast<int64_t>(e * E), static_cast<int64_t>(E)), &h_all[at * n_ff],
                            static_cast<int64_t>(n), &d_all[at * E]};
    }
    if (shared) tasks[n_tasks++] = {shared->down, sg, static_cast<int64_t>(T), shared->out};
    ops::matmul_group(tasks.first(n_tasks), pool);

    for (size_t e = 0; e < n_expert; ++e) {
        for (size_t i = first[e]; i < first[e] + count[e]; ++i) {
            float * o = out + slots[i] * E;
            const float * d = &d_all[i * E];
            for (size_t j = 0; j < E; ++j) o[j] = d[j] * m.down_scale[e];
        }
    }
}

void weighted_sum(const float * out, const Routing & r, size_t T, size_t n_used, size_t E, float * y) {
    // Element j of token t: 0 + (out_0 w_0) + (out_1 w_1) + ... in slot order. The slots run outside the elements
    // so that the element loop is contiguous (vectorised); each element's sum keeps that order.
    for (size_t t = 0; t < T; ++t) {
        float * yt = y + t * E;
        std::fill(yt, yt + E, 0.0f);
        for (size_t k = 0; k < n_used; ++k) {
            const float w = r.weight[t * n_used + k];
            const float * o = out + (t * n_used + k) * E;
            for (size_t j = 0; j < E; ++j) yt[j] += o[j] * w;
        }
    }
}

}  // namespace offgrid::model::common
