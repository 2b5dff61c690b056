// Kimi Delta Attention (spec 3.4): three projections with their own causal depthwise convs (histories of the
// projected, pre-conv inputs in the recurrent row), SiLU, per-head L2 norm of q and k, a per-key-channel decay
// from a low-rank gate, the delta rule per head, and an RMSNorm'd, sigmoid-gated output.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/glm5next/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/sequence.h"
#include "ops/thread_pool.h"

namespace offgrid::model::glm5next::detail {

void kda_layer(const Batch & b, uint32_t il, const float * a, float * y) {
    const Hparams & hp = b.hp;
    const KdaWeights & w = b.model.weights().layers[il].kda;
    const uint32_t ri = static_cast<uint32_t>(b.model.recr_index(il));
    const size_t T = b.n_tokens, H = hp.n_head, hd = hp.kda_head_dim, d_in = hp.d_inner(), K = hp.conv_kernel;

    ops::Scope scope(b.ws.local());
    const std::span<float> uq = scope.take<float>(T * d_in), uk = scope.take<float>(T * d_in), uv = scope.take<float>(T * d_in);
    const std::span<float> fa = scope.take<float>(T * hd), g1 = scope.take<float>(T * d_in), beta = scope.take<float>(T * H);
    const std::span<float> ga = scope.take<float>(T * hd), g2 = scope.take<float>(T * d_in);
    // The products of the layer input in one parallel region, then the two low-rank ups (same bits as one product
    // at a time: every output is one dot).
    const auto tokens = static_cast<int64_t>(T);
    const ops::MatmulTask first[6] = {{w.q, a, tokens, uq.data()},     {w.k, a, tokens, uk.data()},
                                      {w.v, a, tokens, uv.data()},     {w.f_a, a, tokens, fa.data()},
                                      {w.beta, a, tokens, beta.data()}, {w.g_a, a, tokens, ga.data()}};
    ops::matmul_group(first, b.pool);
    const ops::MatmulTask second[2] = {{w.f_b, fa.data(), tokens, g1.data()}, {w.g_b, ga.data(), tokens, g2.data()}};
    ops::matmul_group(second, b.pool);

    // Decay in log space per channel: lb * sigmoid(-(g1 * A)) with a lower bound, else softplus(g1) * A.
    const bool bounded = !std::isinf(hp.gate_lower_bound);
    for (size_t t = 0; t < T; ++t) {
        for (size_t c = 0; c < d_in; ++c) {
            const float x = g1[t * d_in + c] + w.dt_bias[c];
            const float A = w.a[c / hd];
            g1[t * d_in + c] = bounded ? hp.gate_lower_bound * ops::sigmoid(-(x * A)) : ops::softplus(x) * A;
        }
    }

    const size_t hist = (K - 1) * d_in, conv_floats = b.shape.recr(ri).conv_floats,
                 ssm_floats = b.shape.recr(ri).state_floats;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const std::span<float> o = scope.take<float>(T * d_in);
    auto copy_row = [&](uint32_t from, uint32_t to) {
        std::memcpy(b.storage.conv_state(ri, to), b.storage.conv_state(ri, from), conv_floats * sizeof(float));
        std::memcpy(b.storage.ssm_state(ri, to), b.storage.ssm_state(ri, from), ssm_floats * sizeof(float));
    };
    // Snapshot k-1 holds the state before the group's last k tokens (memory/plan.h, SeqGroup).
    auto snapshot_if_due = [&](const memory::SeqGroup & g, size_t done) {
        const size_t n = g.tokens.size();
        for (size_t k = 1; k <= g.snapshots.size(); ++k) {
            if (k <= n && n - k == done) copy_row(g.row, g.snapshots[k - 1]);
        }
    };
    // Token t's three convs and SiLU (the conv history advances by one token) into c = [q | k | v], each head's
    // q and k L2-normed.
    auto conv_token = [&](float * conv, size_t t, float * c) {
        float * cq = c;
        float * ck = c + d_in;
        float * cv = c + 2 * d_in;
        ops::causal_conv_step(w.conv_q.data(), K, 1, d_in, conv, &uq[t * d_in], cq);
        ops::causal_conv_step(w.conv_k.data(), K, 1, d_in, conv + hist, &uk[t * d_in], ck);
        ops::causal_conv_step(w.conv_v.data(), K, 1, d_in, conv + 2 * hist, &uv[t * d_in], cv);
        for (size_t i = 0; i < 3 * d_in; ++i) c[i] = ops::silu(c[i]);
        for (size_t h = 0; h < H; ++h) {
            ops::l2_norm(&cq[h * hd], hd, 1e-6f, &cq[h * hd]);  // a fixed 1e-6, not the GGUF epsilon
            ops::l2_norm(&ck[h * hd], hd, 1e-6f, &ck[h * hd]);
        }
    };
    // Head h of token t, whose convolved [q | k | v] is c: the delta rule on its state, RMSNorm, the sigmoid gate.
    auto head_step = [&](float * S, size_t t, const float * c, size_t h) {
        ops::Scope local(b.ws.local());
        const std::span<float> head = local.take<float>(hd), decay = local.take<float>(hd);
        const float bt = ops::sigmoid(beta[t * H + h]);
        ops::kda_step(S + h * hd * hd, hd, &c[h * hd], &c[d_in + h * hd], &c[2 * d_in + h * hd], &g1[t * d_in + h * hd],
                      bt, scale, head.data(), decay.data());
        float * oh = &o[t * d_in + h * hd];
        ops::rms_norm(head.data(), hd, hp.rms_eps, w.norm.data(), oh);
        ops::sigmoid_n(&g2[t * d_in + h * hd], head.data(), hd);  // the gate, into the head's buffer (read above)
        for (size_t j = 0; j < hd; ++j) oh[j] *= head[j];
    };
    // Heads are independent, and so are sequences: (sequence, head) steps run on the pool, each computed alike on
    // any thread. A step of several sequences of one token each: every conv first, then one region of all pairs.
    const auto & groups = b.plan.groups;
    const bool one_token_each =
        std::all_of(groups.begin(), groups.end(), [](const memory::SeqGroup & g) { return g.tokens.size() == 1; });
    if (one_token_each && groups.size() > 1) {
        const std::span<float> cs = scope.take<float>(groups.size() * 3 * d_in);
        ops::parallel_for(b.pool, groups.size(), [&](size_t begin, size_t end) {
            for (size_t gi = begin; gi < end; ++gi) {
                snapshot_if_due(groups[gi], 0);
                conv_token(b.storage.conv_state(ri, groups[gi].row), groups[gi].tokens[0], &cs[gi * 3 * d_in]);
            }
        });
        ops::parallel_for(b.pool, groups.size() * H, [&](size_t begin, size_t end) {
            for (size_t k = begin; k < end; ++k) {
                const memory::SeqGroup & g = groups[k / H];
                head_step(b.storage.ssm_state(ri, g.row), g.tokens[0], &cs[(k / H) * 3 * d_in], k % H);
            }
        });
        for (const memory::SeqGroup & g : groups) snapshot_if_due(g, 1);
    } else {
        const std::span<float> c = scope.take<float>(3 * d_in);
        for (const memory::SeqGroup & g : groups) {
            float * conv = b.storage.conv_state(ri, g.row);
            float * S = b.storage.ssm_state(ri, g.row);
            snapshot_if_due(g, 0);
            for (size_t step = 0; step < g.tokens.size(); ++step) {
                const size_t t = g.tokens[step];
                conv_token(conv, t, c.data());
                ops::parallel_for(b.pool, H, [&](size_t h0, size_t h1) {
                    for (size_t h = h0; h < h1; ++h) head_step(S, t, c.data(), h);
                });
                snapshot_if_due(g, step + 1);
            }
        }
    }
    ops::matmul(w.o, o.data(), T, y, b.pool);
}

ops::WorkspaceSize kda_bytes(const Hparams & hp, size_t T) {
    const size_t H = hp.n_head, hd = hp.kda_head_dim, d_in = hp.d_inner();
    const size_t per_thread = 2 * ops::arena_bytes<float>(hd);
    // Groups: at most one per token.
    const size_t main = 5 * ops::arena_bytes<float>(T * d_in) + 2 * ops::arena_bytes<float>(T * hd) +
                        ops::arena_bytes<float>(T * H) + ops::arena_bytes<float>(T * d_in) +
                        ops::arena_bytes<float>(T * 3 * d_in) + per_thread;
    return {main, per_thread};
}

}  // namespace offgrid::model::glm5next::detail
