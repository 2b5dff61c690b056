#include "reference_forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/attention.h"
#include "ops/cpu/dispatch.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "ops/sequence.h"

namespace offgrid::test {

namespace {

using Vec = std::vector<float>;

// A weight type whose kernel at the active level quantises activations (int16 or 8-bit, by type, level and
// OFFGRID_QUANT_ACT) sees x quantised per row: the reference does the same round trip (a level's quantiser writes
// its scalar twin's bytes, tests/ops and tests/quant check it), then the plain dot.
bool g_f32_activations = false;  // ReferenceOptions::f32_activations of the running call

// exact: a product the engine computes with f32 activations whatever the type's kernel (the PLE key and value
// when they are folded into the table at load: model/qwen4exp/ple_projection.h; a hyper-connection up product of
// low rank, on weights widened to f32 at load: model/common/hyper_connections.h).
Vec mul(const ops::Matrix & w, const float * x, bool exact = false) {
    const ops::cpu::TypeKernels * k = ops::cpu::kernels_for(w.type, ops::cpu::active_isa());
    Vec seen;
    if (!g_f32_activations && !exact && k != nullptr && k->act_type != tensor::ElemType::F32) {
        std::vector<uint8_t> q(ops::cpu::act_row_bytes(k->act_type, w.cols));
        seen.resize(w.cols);
        k->quantize_act(x, q.data(), w.cols);
        tensor::dequantize_row(k->act_type, q.data(), seen.data(), w.cols);
        x = seen.data();
    }
    Vec y(w.rows);
    for (int64_t o = 0; o < w.rows; ++o) y[o] = ops::dot_row_ref(w, o, x);
    return y;
}

Vec norm(const float * x, size_t n, float eps, const float * g) {
    // Plain RMSNorm: mean of squares in double, as the spec fixes it.
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
    const float scale = 1.0f / std::sqrt(float(s / n) + eps);
    Vec y(n);
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * scale * (g ? g[i] : 1.0f);
    return y;
}

float sig(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sig(x); }

struct Ref {
    const model::qwen4exp::Model & m;
    const model::qwen4exp::Hparams & hp;
    size_t n;

    // HC mixer of one token's residual (hc x E).
    Vec hc_mix(const model::qwen4exp::HcWeights & w, const Vec & X, Vec * inject) const {
        const size_t E = hp.n_embd, hc = hp.hc;
        Vec xn(hc * E);
        for (size_t h = 0; h < hc; ++h) {
            Vec r = norm(&X[h * E], E, hp.rms_eps, &w.norm[h * E]);
            std::copy(r.begin(), r.end(), xn.begin() + h * E);
        }
        Vec lo = mul(w.down, xn.data());
        for (auto & v : lo) v = silu(v / float(hc));
        Vec g = mul(w.up, lo.data(), !w.up_grouped.empty());  // the engine's grouped up product is f32
        Vec mixed(E);
        for (size_t i = 0; i < E; ++i) {
            float s = 0;
            for (size_t h = 0; h < hc; ++h) s += xn[h * E + i] * sig(g[h * E + i]);
            mixed[i] = s / float(hc);
        }
        if (inject) *inject = mul(w.inject, xn.data());
        return mixed;
    }

    void combine(Vec & X, const Vec & y, const Vec & inj) const {
        const size_t E = hp.n_embd;
        for (size_t h = 0; h < hp.hc; ++h) {
            const float w = 2.0f * sig(inj[h] / float(hp.hc));
            for (size_t i = 0; i < E; ++i) X[h * E + i] += w * y[i];
        }
    }

    Vec ple_u(const std::vector<int32_t> & tok, size_t t) const {
        const size_t N = hp.ple_ngram, G = hp.ple_heads_per_ngram, Dp = hp.ple_dim;
        std::vector<uint64_t> ctx(N);
        ctx[0] = uint64_t(tok[t]);
        bool cut = false;
        for (size_t s = 1; s < N; ++s) {
            const bool none = cut || s > t;
            const int64_t prev = none ? -1 : tok[t - s];
            cut = none || prev == int64_t(hp.ple_eos);
            ctx[s] = cut ? hp.ple_eos : uint64_t(prev);
        }
        Vec u(hp.n_embd);
        for (size_t nn = 2; nn <= N; ++nn) {
            uint64_t mixed = 0;
            for (size_t j = 0; j < nn; ++j) mixed ^= ctx[j] * hp.ple_multipliers[j];
            for (size_t g = 0; g < G; ++g) {
                const size_t h = (nn - 2) * G + g;
                ops::dequantize_matrix_row(m.weights().ple_table, int64_t(mixed % hp.ple_vocab_sizes[h] + hp.ple_offsets[h]),
                                           &u[h * Dp]);
            }
        }
        return u;
    }

    void ple(uint32_t il, const std::vector<int32_t> & tok, std::vector<Vec> & R) const {
        const auto & w = m.weights().layers[il].ple;
        const size_t E = hp.n_embd, hc = hp.hc, dim = hc * E, Kp = hp.ple_conv_kernel, N = hp.ple_ngram;
        std::vector<Vec> gv(n, Vec(dim)), nc(n, Vec(dim));
        for (size_t t = 0; t < n; ++t) {
            const Vec u = ple_u(tok, t);
            const bool folded = !m.weights().ple_proj.empty();
            const Vec K = mul(w.key, u.data(), folded), v = mul(w.value, u.data(), folded);
            for (size_t h = 0; h < hc; ++h) {
                const Vec kn = norm(&K[h * E], E, hp.rms_eps, &w.norm_key[h * E]);
                const Vec qn = norm(&R[t][h * E], E, hp.rms_eps, &w.norm_query[h * E]);
                float s = 0;
                for (size_t i = 0; i < E; ++i) s += kn[i] * qn[i];
                s /= std::sqrt(float(E));
                const float sg = (s > 0) - (s < 0);
                const float gate = sig(sg * std::sqrt(std::max(std::fabs(s), 1e-6f)));
                for (size_t i = 0; i < E; ++i) gv[t][h * E + i] = v[i] * gate;
                const Vec c = norm(&gv[t][h * E], E, hp.rms_eps, &w.norm_conv[h * E]);
                std::copy(c.begin(), c.end(), nc[t].begin() + h * E);
            }
        }
        for (size_t t = 0; t < n; ++t) {
            for (size_t c = 0; c < dim; ++c) {
                float s = 0;
                for (size_t k = 0; k < Kp; ++k) {
                    const int64_t src = int64_t(t) - int64_t((Kp - 1 - k) * N);
                    s += w.conv[c * Kp + k] * (src >= 0 ? nc[src][c] : 0.0f);
                }
                R[t][c] += gv[t][c] + silu(s);
            }
        }
    }

    std::vector<Vec> gdn(uint32_t il, const std::vector<Vec> & a) const {
        const auto & w = m.weights().layers[il].recr;
        const size_t dk = hp.ssm_d_state, Hk = hp.ssm_n_k_heads, Hv = hp.ssm_n_v_heads;
        const size_t kd = hp.ssm_key_dim(), vd = hp.ssm_value_dim(), cd = hp.ssm_conv_dim(), K = hp.ssm_d_conv;
        std::vector<Vec> x(n);
        for (size_t t = 0; t < n; ++t) {
            x[t] = mul(w.qkv, a[t].data());
            for (auto & v : x[t]) v *= w.qkv_scale;
        }
        Vec S(dk * dk * Hv, 0.0f);
        std::vector<Vec> y(n);
        for (size_t t = 0; t < n; ++t) {
            Vec c(cd);
            for (size_t ch = 0; ch < cd; ++ch) {
                float s = 0;
                for (size_t k = 0; k < K; ++k) {
                    const int64_t src = int64_t(t) - int64_t(K - 1 - k);
                    s += w.conv[ch * K + k] * (src >= 0 ? x[src][ch] : 0.0f);
                }
                c[ch] = silu(s);
            }
            auto l2 = [&](float * v) {
                double s = 0;
                for (size_t i = 0; i < dk; ++i) s += double(v[i]) * v[i];
                const float sc = 1.0f / std::sqrt(float(s) + hp.rms_eps);
                for (size_t i = 0; i < dk; ++i) v[i] *= sc;
            };
            for (size_t i = 0; i < Hk; ++i) {
                l2(&c[i * dk]);
                l2(&c[kd + i * dk]);
            }
            const Vec z = mul(w.gate, a[t].data()), bl = mul(w.beta, a[t].data()), al = mul(w.alpha, a[t].data());
            Vec o(vd);
            for (size_t j = 0; j < Hv; ++j) {
                const size_t kh = j % Hk;
                const float g = ops::softplus(al[j] * w.alpha_scale + w.dt_bias[j]) * w.a[j];
                Vec oj(dk);
                ops::gated_delta_step_ref(&S[j * dk * dk], dk, dk, &c[kh * dk], &c[kd + kh * dk], &c[2 * kd + j * dk],
                                          std::exp(g), sig(bl[j] * w.beta_scale), 1.0f / std::sqrt(float(dk)), oj.data());
                const Vec nj = norm(oj.data(), dk, hp.rms_eps, w.norm.data());
                for (size_t mm = 0; mm < dk; ++mm) o[j * dk + mm] = nj[mm] * sig(z[j * dk + mm] * w.gate_scale);
            }
            y[t] = mul(w.out, o.data());
            for (auto & v : y[t]) v *= w.out_scale;
        }
        return y;
    }

    std::vector<Vec> attention(uint32_t il, const std::vector<Vec> & a, const ReferenceOptions & opt) const {
        const bool force_dense = opt.force_dense;
        const auto & w = m.weights().layers[il].attn;
        const size_t D = hp.head_dim, H = hp.n_head, Hkv = hp.n_head_kv, Di = hp.idx_dim, Hi = hp.idx_heads;
        ops::RopeParams rp;
        rp.n_rot = int(hp.n_rot);
        rp.sections = hp.rope_sections;
        rp.freq_base = hp.rope_freq_base;
        rp.freq_scale = hp.rope_freq_scale;
        rp.attn_factor = hp.rope_attn_factor;
        std::vector<Vec> q(n), k(n), v(n), kr(n), qi(n);
        for (size_t t = 0; t < n; ++t) {
            const std::array<int32_t, 4> pos{int32_t(t), int32_t(t), int32_t(t), 0};
            q[t] = mul(w.q, a[t].data());
            k[t] = mul(w.k, a[t].data());
            v[t] = mul(w.v, a[t].data());
            for (auto & x : q[t]) x *= w.q_scale;
            for (auto & x : k[t]) x *= w.k_scale;
            for (auto & x : v[t]) x *= w.v_scale;
            for (size_t h = 0; h < H; ++h) {
                Vec r = norm(&q[t][2 * D * h], D, hp.rms_eps, w.q_norm.data());
                ops::imrope(r.data(), 1, int(D), rp, pos);
                std::copy(r.begin(), r.end(), q[t].begin() + 2 * D * h);
            }
            for (size_t j = 0; j < Hkv; ++j) {
                Vec r = norm(&k[t][D * j], D, hp.rms_eps, w.k_norm.data());
                ops::imrope(r.data(), 1, int(D), rp, pos);
                std::copy(r.begin(), r.end(), k[t].begin() + D * j);
            }
            if (hp.is_qsa(il)) {
                kr[t] = mul(w.idx_k, a[t].data());
                qi[t] = mul(w.idx_q, a[t].data());
                for (size_t h = 0; h < Hi; ++h) {
                    Vec r = norm(&qi[t][h * Di], Di, hp.rms_eps, w.idx_q_norm.data());
                    ops::imrope(r.data(), 1, int(Di), rp, pos);
                    std::copy(r.begin(), r.end(), qi[t].begin() + h * Di);
                }
            }
        }
        // Pooled keys of every complete pool of r consecutive tokens.
        const size_t r = hp.kpool;
        std::vector<Vec> pooled;
        if (hp.is_qsa(il)) {
            for (size_t p = 0; (p + 1) * r <= n; ++p) {
                Vec s(Di, 0.0f);
                for (size_t mm = 0; mm < r; ++mm) for (size_t i = 0; i < Di; ++i) s[i] += kr[p * r + mm][i];
                for (auto & x : s) x *= 1.0f / float(r);
                Vec pk = norm(s.data(), Di, hp.rms_eps, w.idx_k_norm.data());
                const int32_t p0 = int32_t(p * r);
                ops::imrope(pk.data(), 1, int(Di), rp, {p0, p0, p0, p0});
                pooled.push_back(pk);
            }
        }
        std::vector<Vec> y(n);
        for (size_t t = 0; t < n; ++t) {
            std::vector<size_t> sel;
            const size_t n_pools = hp.is_qsa(il) ? (t + 1) / r : 0;
            const size_t budget = hp.is_qsa(il) ? hp.idx_top_k / r : 0;
            if (!hp.is_qsa(il) || force_dense || n_pools <= budget) {
                const size_t lo = opt.window > 0 && t + 1 > opt.window ? t + 1 - opt.window : 0;
                for (size_t j = lo; j <= t; ++j) sel.push_back(j);
            } else {
                std::vector<float> score(n_pools);
                for (size_t p = 0; p < n_pools; ++p) {
                    float s = 0;
                    for (size_t h = 0; h < Hi; ++h) {
                        float d = 0;
                        for (size_t i = 0; i < Di; ++i) d += qi[t][h * Di + i] * pooled[p][i];
                        s += std::max(d, 0.0f);
                    }
                    score[p] = s;
                }
                std::vector<size_t> order(n_pools);
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t z) { return score[x] > score[z]; });
                const double kept = score[order[budget - 1]], dropped = score[order[budget]];
                // Exact zeros (every head rectified) tie identically in any implementation; skip them.
                if (!(kept == 0.0 && dropped == 0.0)) {
                    opt.min_selection_gap = std::min(opt.min_selection_gap, (kept - dropped) / std::fabs(kept));
                }
                order.resize(budget);
                std::sort(order.begin(), order.end());
                for (size_t p : order) for (size_t mm = 0; mm < r; ++mm) sel.push_back(p * r + mm);
                for (size_t j = n_pools * r; j <= t; ++j) sel.push_back(j);
            }
            std::vector<const void *> kp, vp;
            for (size_t j : sel) {
                kp.push_back(k[j].data());
                vp.push_back(v[j].data());
            }
            Vec o(D * H);
            for (size_t h = 0; h < H; ++h) {
                const size_t g = h / (H / Hkv);
                Vec head(D);
                ops::attend_head_ref(&q[t][2 * D * h], D, {kp, tensor::ElemType::F32}, {vp, tensor::ElemType::F32}, g * D,
                                     1.0f / std::sqrt(float(D)), head.data());
                for (size_t d = 0; d < D; ++d) o[h * D + d] = head[d] * sig(q[t][2 * D * h + D + d]);
            }
            y[t] = mul(w.o, o.data());
            for (auto & x : y[t]) x *= w.o_scale;
        }
        return y;
    }

    Vec moe(uint32_t il, const Vec & f) const {
        const auto & w = m.weights().layers[il].moe;
        const size_t E = hp.n_embd, ne = hp.n_expert, nu = hp.n_expert_used, nf = hp.n_ff_exp;
        Vec p = mul(w.router, f.data());
        const float mx = *std::max_element(p.begin(), p.end());
        float z = 0;
        for (auto & x : p) z += (x = std::exp(x - mx));
        for (auto & x : p) x /= z;
        std::vector<size_t> order(ne);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return p[x] > p[y]; });
        float wsum = 0;
        for (size_t kk = 0; kk < nu; ++kk) wsum += p[order[kk]];
        wsum = std::max(wsum, 6.103515625e-5f);
        Vec y(E, 0.0f);
        for (size_t kk = 0; kk < nu; ++kk) {
            const size_t e = order[kk];
            const ops::Matrix gm = w.fused_gate_up ? w.gate_up.row_slice(e * 2 * nf, nf) : w.gate.row_slice(e * nf, nf);
            const ops::Matrix um = w.fused_gate_up ? w.gate_up.row_slice(e * 2 * nf + nf, nf) : w.up.row_slice(e * nf, nf);
            const Vec g = mul(gm, f.data()), u = mul(um, f.data());
            Vec hdn(nf);
            for (size_t i = 0; i < nf; ++i) hdn[i] = silu(g[i] * w.gate_scale[e]) * (u[i] * w.up_scale[e]);
            const Vec d = mul(w.down.row_slice(e * E, E), hdn.data());
            for (size_t i = 0; i < E; ++i) y[i] += d[i] * w.down_scale[e] * (p[e] / wsum);
        }
        const Vec sg = mul(w.shared_gate, f.data()), su = mul(w.shared_up, f.data());
        Vec hdn(sg.size());
        for (size_t i = 0; i < hdn.size(); ++i) hdn[i] = silu(sg[i] * w.shared_gate_scale) * (su[i] * w.shared_up_scale);
        const Vec sd = mul(w.shared_down, hdn.data());
        float gl = 0;
        for (size_t i = 0; i < E; ++i) gl += w.shared_gate_inp[i] * f[i];
        for (size_t i = 0; i < E; ++i) y[i] += sd[i] * w.shared_down_scale * sig(gl);
        return y;
    }
};

}  // namespace

std::vector<float> reference_forward(const model::qwen4exp::Model & m, const std::vector<int32_t> & tokens,
                                     const ReferenceOptions & opt) {
    g_f32_activations = opt.f32_activations;
    const model::qwen4exp::Hparams & hp = m.hparams();
    const size_t n = tokens.size(), E = hp.n_embd, hc = hp.hc;
    const Ref ref{m, hp, n};
    std::vector<Vec> R(n, Vec(hc * E));
    for (size_t t = 0; t < n; ++t) {
        Vec e(E);
        ops::dequantize_matrix_row(m.weights().token_embd, tokens[t], e.data());
        for (size_t h = 0; h < hc; ++h) std::copy(e.begin(), e.end(), R[t].begin() + h * E);
    }
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        const auto & lw = m.weights().layers[il];
        if (hp.has_ple && il == hp.ple_layer) ref.ple(il, tokens, R);
        std::vector<Vec> a(n), inj(n);
        for (size_t t = 0; t < n; ++t) a[t] = ref.hc_mix(lw.hc_attn, R[t], &inj[t]);
        const auto y = hp.is_recurrent[il] ? ref.gdn(il, a) : ref.attention(il, a, opt);
        for (size_t t = 0; t < n; ++t) ref.combine(R[t], y[t], inj[t]);
        for (size_t t = 0; t < n; ++t) {
            Vec fi;
            const Vec f = ref.hc_mix(lw.hc_ffn, R[t], &fi);
            ref.combine(R[t], ref.moe(il, f), fi);
        }
    }
    std::vector<float> logits;
    for (size_t t = 0; t < n; ++t) {
        const Vec x = ref.hc_mix(m.weights().output_hc, R[t], nullptr);
        const Vec l = mul(m.weights().output, x.data());
        logits.insert(logits.end(), l.begin(), l.end());
    }
    return logits;
}

}  // namespace offgrid::test
