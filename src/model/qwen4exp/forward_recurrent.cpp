// Gated DeltaNet layer (spec 3.7): projections for the whole ubatch, then the causal conv and the delta rule
// token by token along each sequence group, with the state in the group's recurrent row.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/qwen4exp/forward_internal.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/sequence.h"

namespace offgrid::model::qwen4exp::detail {

void recurrent_layer(const Batch & b, uint32_t il, const float * a, float * y) {
    const Hparams & hp = b.hp;
    const RecurrentWeights & w = b.model.weights().layers[il].recr;
    const uint32_t ri = static_cast<uint32_t>(b.model.recr_index(il));
    const size_t T = b.n_tokens, E = hp.n_embd;
    const size_t dk = hp.ssm_d_state, dv = hp.ssm_d_state, Hk = hp.ssm_n_k_heads, Hv = hp.ssm_n_v_heads;
    const size_t key_dim = hp.ssm_key_dim(), vdim = hp.ssm_value_dim(), conv_dim = hp.ssm_conv_dim();

    ops::Scope scope(b.ws.local());
    const std::span<float> x = scope.take<float>(T * conv_dim), z = scope.take<float>(T * vdim);
    const std::span<float> beta = scope.take<float>(T * Hv), alpha = scope.take<float>(T * Hv);
    const auto tokens = static_cast<int64_t>(T);  // the four projections in one parallel region (ops/matmul_group.h)
    const ops::MatmulTask projections[4] = {{w.qkv, a, tokens, x.data()}, {w.gate, a, tokens, z.data()},
                                            {w.beta, a, tokens, beta.data()}, {w.alpha, a, tokens, alpha.data()}};
    ops::matmul_group(projections, b.pool);
    for (float & v : x) v *= w.qkv_scale;
    for (float & v : z) v *= w.gate_scale;

    const std::span<float> o = scope.take<float>(T * vdim), c = scope.take<float>(conv_dim);
    const float out_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const size_t conv_floats = b.shape.recr(ri).conv_floats,
                 ssm_floats = b.shape.recr(ri).state_floats;
    auto copy_row = [&](uint32_t from, uint32_t to) {
        std::memcpy(b.storage.conv_state(ri, to), b.storage.conv_state(ri, from), conv_floats * sizeof(float));
        std::memcpy(b.storage.ssm_state(ri, to), b.storage.ssm_state(ri, from), ssm_floats * sizeof(float));
    };
    // Activation and key/query norms of a token's conv output, in place.
    auto activate = [&](float * ct) {
        ops::silu_n(ct, ct, conv_dim);  // ops::silu's bits
        for (size_t i = 0; i < Hk; ++i) {
            ops::l2_norm(&ct[i * dk], dk, hp.rms_eps, &ct[i * dk]);
            ops::l2_norm(&ct[key_dim + i * dk], dk, hp.rms_eps, &ct[key_dim + i * dk]);
        }
    };
    // Conv, activation and key/query norms of token t (the conv history advances by one token, read from hist_in
    // and written to hist_out, which may be the same rows).
    auto conv_token = [&](const float * hist_in, float * hist_out, size_t t, float * ct) {
        ops::causal_conv_step_into(w.conv.data(), hp.ssm_d_conv, 1, conv_dim, hist_in, hist_out, &x[t * conv_dim], ct);
        activate(ct);
    };
    // The delta rule of value head j for token t of a sequence whose state is read from ssm_in and written to
    // ssm_out (the same rows, or the memory's other bank).
    auto delta_head = [&](const float * ssm_in, float * ssm_out, size_t t, const float * ct, size_t j) {
        ops::Scope local(b.ws.local());
        const std::span<float> head_out = local.take<float>(dv), gate = local.take<float>(dv);
        const size_t kh = j % Hk;  // tiled V-head order: value head j reads key head j mod Hk
        const float gdec = ops::softplus(alpha[t * Hv + j] * w.alpha_scale + w.dt_bias[j]) * w.a[j];
        const float bt = ops::sigmoid(beta[t * Hv + j] * w.beta_scale);
        ops::gated_delta_step_into(ssm_in + j * dk * dv, ssm_out + j * dk * dv, dk, dv, &ct[kh * dk],
                                   &ct[key_dim + kh * dk], &ct[2 * key_dim + j * dv], std::exp(gdec), bt, out_scale,
                                   head_out.data());
        float * oj = &o[t * vdim + j * dv];
        ops::rms_norm(head_out.data(), dv, hp.rms_eps, w.norm.data(), oj);
        ops::sigmoid_n(&z[t * vdim + j * dv], gate.data(), dv);
        for (size_t m = 0; m < dv; ++m) oj[m] *= gate[m];
    };
    // A group's rows for this layer. One token with no snapshot due: the memory hands the old state and the place
    // for the new one (recurrent_cache.h: on the first access of a call these are its two banks, so the step
    // copies nothing into the undo journal). Otherwise the snapshot before the first token, then in place.
    auto group_rows = [&](const memory::SeqGroup & g) {
        if (g.tokens.size() == 1 && g.snapshots.empty()) return b.storage.recurrent_rewrite(ri, g.row);
        float * conv_state = b.storage.conv_state(ri, g.row);
        float * ssm_state = b.storage.ssm_state(ri, g.row);
        snapshot_if_due(g, 0, copy_row);
        return memory::Storage::RecurrentRewrite{conv_state, ssm_state, conv_state, ssm_state};
    };
    // Value heads are independent, and so are sequences: their (sequence, head) steps are spread over the pool
    // (each one's arithmetic is the same on any thread, so the result does not depend on the thread count).
    const size_t min_heads = std::max<size_t>(1, 16384 / (dk * dv));
    const auto & groups = b.plan.groups;
    const bool one_token_each =
        std::all_of(groups.begin(), groups.end(), [](const memory::SeqGroup & g) { return g.tokens.size() == 1; });
    if (one_token_each && groups.size() > 1) {
        // A decode step of several sequences: every conv first (snapshots are due only before the token), then
        // one parallel region over every (sequence, head) pair instead of one region per sequence.
        const std::span<float> cs = scope.take<float>(groups.size() * conv_dim);
        const std::span<memory::Storage::RecurrentRewrite> rows = scope.take<memory::Storage::RecurrentRewrite>(groups.size());
        // Sequences are independent up to here too: each one's rows (distinct groups have distinct slots, so the
        // memory's first accesses run side by side), snapshot and conv on the pool.
        ops::parallel_for(b.pool, groups.size(), [&](size_t begin, size_t end) {
            for (size_t gi = begin; gi < end; ++gi) {
                rows[gi] = group_rows(groups[gi]);
                conv_token(rows[gi].conv_in, rows[gi].conv_out, groups[gi].tokens[0], &cs[gi * conv_dim]);
            }
        });
        ops::parallel_for(b.pool, groups.size() * Hv, [&](size_t begin, size_t end) {
            for (size_t k = begin; k < end; ++k) {
                const memory::SeqGroup & g = groups[k / Hv];
                delta_head(rows[k / Hv].ssm_in, rows[k / Hv].ssm_out, g.tokens[0], &cs[(k / Hv) * conv_dim], k % Hv);
            }
        }, min_heads);
        for (const memory::SeqGroup & g : groups) snapshot_if_due(g, 1, copy_row);
    } else {
        // The conv outputs of a prompt's runs (below): every group's run in one buffer, within the layer's budget.
        const std::span<float> runs = scope.take<float>(T * conv_dim);
        size_t run_at = 0;
        for (const memory::SeqGroup & g : groups) {
            memory::Storage::RecurrentRewrite r = group_rows(g);
            const size_t n = g.tokens.size();
            // More snapshots than this (never configured) or a wider conv take the loop below.
            constexpr size_t kMaxCopies = 16;
            const bool runs_conv = hp.ssm_d_conv >= 1 && hp.ssm_d_conv <= ops::kConvFramesMaxTaps;
            if (n > 1 && g.snapshots.size() <= kMaxCopies && runs_conv) {
                // A prompt's run of tokens: the conv of every token first, spread over the pool by channels (each
                // channel's history stays in registers), the histories of the snapshots due on the way written
                // as it passes them; then activation and norms token by token on the pool; then the delta rule
                // token by token, snapshotting the state alone. The same bits as the loop below.
                const std::span<float> cs = runs.subspan(run_at * conv_dim, n * conv_dim);
                run_at += n;
                ops::ConvHistoryCopy copies[kMaxCopies];
                size_t n_copies = 0;
                for (size_t k = 1; k <= g.snapshots.size(); ++k) {
                    if (k < n) copies[n_copies++] = {n - k, b.storage.conv_state(ri, g.snapshots[k - 1])};
                }
                ops::parallel_for(b.pool, conv_dim, [&](size_t c0, size_t c1) {
                    ops::causal_conv_frames(w.conv.data(), hp.ssm_d_conv, c0, c1, r.conv_in, r.conv_out, x.data(),
                                            conv_dim, g.tokens.data(), n, cs.data(), conv_dim, copies, n_copies);
                }, 256);
                ops::parallel_for(b.pool, n, [&](size_t s0, size_t s1) {
                    for (size_t step = s0; step < s1; ++step) activate(&cs[step * conv_dim]);
                });
                auto copy_state = [&](uint32_t from, uint32_t to) {
                    std::memcpy(b.storage.ssm_state(ri, to), b.storage.ssm_state(ri, from), ssm_floats * sizeof(float));
                };
                for (size_t step = 0; step < n; ++step) {
                    const float * ct = &cs[step * conv_dim];
                    ops::parallel_for(b.pool, Hv, [&](size_t j_begin, size_t j_end) {
                        for (size_t j = j_begin; j < j_end; ++j) delta_head(r.ssm_in, r.ssm_out, g.tokens[step], ct, j);
                    }, min_heads);
                    r.ssm_in = r.ssm_out;
                    snapshot_if_due(g, step + 1, copy_state);
                }
                continue;
            }
            for (size_t step = 0; step < g.tokens.size(); ++step) {
                const size_t t = g.tokens[step];
                conv_token(r.conv_in, r.conv_out, t, c.data());
                ops::parallel_for(b.pool, Hv, [&](size_t j_begin, size_t j_end) {
                    for (size_t j = j_begin; j < j_end; ++j) delta_head(r.ssm_in, r.ssm_out, t, c.data(), j);
                }, min_heads);
                r.conv_in = r.conv_out;  // the next token continues from the new state
                r.ssm_in = r.ssm_out;
                snapshot_if_due(g, step + 1, copy_row);
            }
        }
    }
    ops::matmul(w.out, o.data(), T, y, b.pool);
    for (size_t i = 0; i < T * E; ++i) y[i] *= w.out_scale;
}

ops::WorkspaceSize recurrent_bytes(const Model & m, size_t T) {
    const Hparams & hp = m.hparams();
    const size_t vdim = hp.ssm_value_dim(), conv_dim = hp.ssm_conv_dim(), Hv = hp.ssm_n_v_heads, dv = hp.ssm_d_state;
    // Groups: at most one per token.
    const size_t per_thread = 2 * ops::arena_bytes<float>(dv);
    const size_t main = ops::arena_bytes<float>(T * conv_dim) + 2 * ops::arena_bytes<float>(T * vdim) +
                        2 * ops::arena_bytes<float>(T * Hv) + ops::arena_bytes<float>(conv_dim) +
                        ops::arena_bytes<float>(T * conv_dim) + ops::arena_bytes<memory::Storage::RecurrentRewrite>(T) +
                        per_thread;
    return {main, per_thread};
}

}  // namespace offgrid::model::qwen4exp::detail
