// Kimi Delta Attention (spec 3.4): three projections with their own causal depthwise convs (histories of the
// projected, pre-conv inputs in the recurrent row), SiLU, per-head L2 norm of q and k, a per-key-channel decay
// from a low-rank gate, the delta rule per head, and an RMSNorm'd, sigmoid-gated output.
#include <cmath>
#include <cstring>

#include "model/glm5next/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/sequence.h"

namespace offgrid::model::glm5next::detail {

void kda_step(float * S, size_t hd, const float * q, const float * k, const float * v, const float * g, float beta,
              float scale, float * out) {
    for (size_t j = 0; j < hd; ++j) {
        float * s = S + j * hd;
        float u = 0.0f;
        for (size_t i = 0; i < hd; ++i) {
            s[i] *= std::exp(g[i]);
            u += s[i] * k[i];
        }
        const float delta = (v[j] - u) * beta;
        float o = 0.0f;
        for (size_t i = 0; i < hd; ++i) {
            s[i] += k[i] * delta;
            o += s[i] * q[i];
        }
        out[j] = o * scale;
    }
}

void kda_layer(const Batch & b, uint32_t il, const float * a, float * y) {
    const Hparams & hp = b.hp;
    const KdaWeights & w = b.model.weights().layers[il].kda;
    const uint32_t ri = static_cast<uint32_t>(b.model.recr_index(il));
    const size_t T = b.n_tokens, H = hp.n_head, hd = hp.kda_head_dim, d_in = hp.d_inner(), K = hp.conv_kernel;

    std::vector<float> uq(T * d_in), uk(T * d_in), uv(T * d_in), fa(T * hd), g1(T * d_in), beta(T * H);
    std::vector<float> ga(T * hd), g2(T * d_in);
    ops::matmul(w.q, a, T, uq.data(), b.pool);
    ops::matmul(w.k, a, T, uk.data(), b.pool);
    ops::matmul(w.v, a, T, uv.data(), b.pool);
    ops::matmul(w.f_a, a, T, fa.data(), b.pool);
    ops::matmul(w.f_b, fa.data(), T, g1.data(), b.pool);
    ops::matmul(w.beta, a, T, beta.data(), b.pool);
    ops::matmul(w.g_a, a, T, ga.data(), b.pool);
    ops::matmul(w.g_b, ga.data(), T, g2.data(), b.pool);

    // Decay in log space per channel: lb * sigmoid(-(g1 * A)) with a lower bound, else softplus(g1) * A.
    const bool bounded = !std::isinf(hp.gate_lower_bound);
    for (size_t t = 0; t < T; ++t) {
        for (size_t c = 0; c < d_in; ++c) {
            const float x = g1[t * d_in + c] + w.dt_bias[c];
            const float A = w.a[c / hd];
            g1[t * d_in + c] = bounded ? hp.gate_lower_bound * ops::sigmoid(-(x * A)) : ops::softplus(x) * A;
        }
    }

    const size_t hist = (K - 1) * d_in, conv_floats = b.shape.conv_floats, ssm_floats = b.shape.ssm_floats;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> cq(d_in), ck(d_in), cv(d_in), head(hd), o(T * d_in);
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
    for (const memory::SeqGroup & g : b.plan.groups) {
        float * conv = b.storage.conv_state(ri, g.row);
        float * S = b.storage.ssm_state(ri, g.row);
        snapshot_if_due(g, 0);
        for (size_t step = 0; step < g.tokens.size(); ++step) {
            const size_t t = g.tokens[step];
            ops::causal_conv_step(w.conv_q.data(), K, 1, d_in, conv, &uq[t * d_in], cq.data());
            ops::causal_conv_step(w.conv_k.data(), K, 1, d_in, conv + hist, &uk[t * d_in], ck.data());
            ops::causal_conv_step(w.conv_v.data(), K, 1, d_in, conv + 2 * hist, &uv[t * d_in], cv.data());
            for (size_t c = 0; c < d_in; ++c) {
                cq[c] = ops::silu(cq[c]);
                ck[c] = ops::silu(ck[c]);
                cv[c] = ops::silu(cv[c]);
            }
            for (size_t h = 0; h < H; ++h) {
                ops::l2_norm(&cq[h * hd], hd, 1e-6f, &cq[h * hd]);  // a fixed 1e-6, not the GGUF epsilon
                ops::l2_norm(&ck[h * hd], hd, 1e-6f, &ck[h * hd]);
                const float bt = ops::sigmoid(beta[t * H + h]);
                kda_step(S + h * hd * hd, hd, &cq[h * hd], &ck[h * hd], &cv[h * hd], &g1[t * d_in + h * hd], bt, scale,
                         head.data());
                float * oh = &o[t * d_in + h * hd];
                ops::rms_norm(head.data(), hd, hp.rms_eps, w.norm.data(), oh);
                for (size_t j = 0; j < hd; ++j) oh[j] *= ops::sigmoid(g2[t * d_in + h * hd + j]);
            }
            snapshot_if_due(g, step + 1);
        }
    }
    ops::matmul(w.o, o.data(), T, y, b.pool);
}

}  // namespace offgrid::model::glm5next::detail
