// PLE n-gram hash embeddings (spec 3.4): row indices from the token and its predecessors in the cache, and the
// PLE block with its dilated causal convolution whose history lives in the recurrent row.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/qwen4exp/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/sequence.h"

namespace offgrid::model::qwen4exp::detail {

namespace {

// Token of the sequence's cell with the greatest position <= target, or -1.
memory::Token predecessor(const memory::Plan & plan, const memory::SeqView & view, memory::Pos target) {
    if (target < 0) return -1;
    auto it = std::upper_bound(view.cells.begin(), view.cells.end(), target,
                               [](memory::Pos p, const memory::PosCell & c) { return p < c.pos; });
    if (it == view.cells.begin()) return -1;
    return plan.cell_token(std::prev(it)->cell);
}

}  // namespace

void ple_rows(const Batch & b, uint32_t * rows) {
    const Hparams & hp = b.hp;
    const size_t N = hp.ple_ngram, G = hp.ple_heads_per_ngram, Hp = hp.ple_heads();
    const int64_t eos = hp.ple_eos;
    ops::Scope scope(b.ws.local());
    int64_t * const ctx = scope.take<int64_t>(N).data();
    for (size_t t = 0; t < b.n_tokens; ++t) {
        const memory::TokenPlan & tp = b.plan.tokens[t];
        const memory::SeqView view = b.plan.seq_view(tp.seq);
        ctx[0] = tp.token;
        bool cut = false;
        for (size_t s = 1; s < N; ++s) {
            const int64_t prev = cut ? -1 : predecessor(b.plan, view, tp.pos - static_cast<memory::Pos>(s));
            // An EOS (or the start of the sequence) replaces itself and everything older with EOS.
            cut = cut || prev < 0 || prev == eos;
            ctx[s] = cut ? eos : prev;
        }
        for (size_t n = 2; n <= N; ++n) {
            uint64_t mixed = 0;
            for (size_t j = 0; j < n; ++j) mixed ^= static_cast<uint64_t>(ctx[j]) * hp.ple_multipliers[j];
            for (size_t g = 0; g < G; ++g) {
                const size_t h = (n - 2) * G + g;
                rows[t * Hp + h] = static_cast<uint32_t>(mixed % hp.ple_vocab_sizes[h]);
            }
        }
    }
}

void ple_block(const Batch & b, uint32_t il, const uint32_t * rows, float * R) {
    const Hparams & hp = b.hp;
    const PleWeights & w = b.model.weights().layers[il].ple;
    const PleProjections & proj = b.model.weights().ple_proj;
    const size_t T = b.n_tokens, E = hp.n_embd, hc = hp.hc, dim = hc * E, Hp = hp.ple_heads(), Dp = hp.ple_dim;
    ops::Scope scope(b.ws.local());
    const std::span<float> key = scope.take<float>(T * dim), value = scope.take<float>(T * E);
    if (!proj.empty()) {
        for (size_t t = 0; t < T; ++t) proj.token(rows + t * Hp, &key[t * dim], &value[t * E]);
    } else {
        // u_t: the heads' table rows side by side (spec 3.4.1), then the two products.
        const std::span<float> u = scope.take<float>(T * E);
        for (size_t t = 0; t < T; ++t) {
            for (size_t h = 0; h < Hp; ++h) {
                const int64_t row = static_cast<int64_t>(hp.ple_offsets[h] + rows[t * Hp + h]);
                ops::dequantize_matrix_row(b.model.weights().ple_table, row, &u[t * E + h * Dp]);
            }
        }
        const ops::MatmulTask products[2] = {{w.key, u.data(), static_cast<int64_t>(T), key.data()},
                                             {w.value, u.data(), static_cast<int64_t>(T), value.data()}};
        ops::matmul_group(products, b.pool);
    }

    // Gated value per stream (Gv) and its normed copy (Nc), the conv input.
    const std::span<float> gv = scope.take<float>(T * dim), nc = scope.take<float>(T * dim);
    const std::span<float> kn = scope.take<float>(E), qn = scope.take<float>(E);
    const float inv_sqrt_e = 1.0f / std::sqrt(static_cast<float>(E));
    for (size_t t = 0; t < T; ++t) {
        for (size_t h = 0; h < hc; ++h) {
            ops::rms_norm(&key[t * dim + h * E], E, hp.rms_eps, &w.norm_key[h * E], kn.data());
            ops::rms_norm(R + t * dim + h * E, E, hp.rms_eps, &w.norm_query[h * E], qn.data());
            float s = 0.0f;
            for (size_t i = 0; i < E; ++i) s += kn[i] * qn[i];
            s *= inv_sqrt_e;
            const float sgn = s > 0.0f ? 1.0f : (s < 0.0f ? -1.0f : 0.0f);
            const float gate = ops::sigmoid(sgn * std::sqrt(std::max(std::fabs(s), 1e-6f)));
            float * g = &gv[t * dim + h * E];
            for (size_t i = 0; i < E; ++i) g[i] = value[t * E + i] * gate;
            ops::rms_norm(g, E, hp.rms_eps, &w.norm_conv[h * E], &nc[t * dim + h * E]);
        }
    }

    // Dilated causal conv along each sequence group, history in the group's recurrent row.
    const size_t Kp = hp.ple_conv_kernel, N = hp.ple_ngram;
    const size_t state_floats = b.shape.row_floats;
    const std::span<float> conv = scope.take<float>(dim);
    auto copy_row = [&](uint32_t from, uint32_t to) {
        std::memcpy(b.storage.row_state(to), b.storage.row_state(from), state_floats * sizeof(float));
    };
    for (const memory::SeqGroup & g : b.plan.groups) {
        float * history = b.storage.row_state(g.row);
        snapshot_if_due(g, 0, copy_row);
        for (size_t i = 0; i < g.tokens.size(); ++i) {
            const size_t t = g.tokens[i];
            ops::causal_conv_step(w.conv.data(), Kp, N, dim, history, &nc[t * dim], conv.data());
            float * r = R + t * dim;
            for (size_t c = 0; c < dim; ++c) r[c] += gv[t * dim + c] + ops::silu(conv[c]);
            snapshot_if_due(g, i + 1, copy_row);
        }
    }
}

ops::WorkspaceSize ple_bytes(const Model & m, size_t T) {
    const Hparams & hp = m.hparams();
    const size_t E = hp.n_embd, dim = hp.hc * E;
    const size_t block = 3 * ops::arena_bytes<float>(T * dim) + 2 * ops::arena_bytes<float>(T * E) +
                         2 * ops::arena_bytes<float>(E) + ops::arena_bytes<float>(dim);
    return {std::max(block, ops::arena_bytes<int64_t>(hp.ple_ngram)), 0};
}

}  // namespace offgrid::model::qwen4exp::detail
