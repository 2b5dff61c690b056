#include "reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace offgrid::test {

namespace {

using Vec = std::vector<float>;
using model::glm5next::Hparams;
using model::glm5next::LayerWeights;

std::vector<std::vector<uint32_t>> g_selections;

// y = W x over rows [first, first + n) of W.
Vec mul(const ops::Matrix & m, const Vec & x, int64_t first = 0, int64_t n = -1) {
    if (n < 0) n = m.rows;
    Vec y(n), w(m.cols);
    for (int64_t r = 0; r < n; ++r) {
        ops::dequantize_matrix_row(m, first + r, w.data());
        double s = 0;
        for (int64_t i = 0; i < m.cols; ++i) s += double(w[i]) * x[i];
        y[r] = float(s);
    }
    return y;
}

double dot(const float * a, const float * b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
    return s;
}

Vec rms(const Vec & x, float eps, const Vec * gamma) {
    const double ms = dot(x.data(), x.data(), x.size()) / double(x.size());
    const double scale = 1.0 / std::sqrt(ms + eps);
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = float(x[i] * scale * (gamma ? (*gamma)[i] : 1.0f));
    return y;
}

float sigm(double x) { return float(1.0 / (1.0 + std::exp(-x))); }
float silu_(float x) { return x * sigm(x); }

float act(float g, float u, float L) {
    const float s = silu_(g);
    if (L > 1e-6f) return std::min(s, L) * std::clamp(u, -L, L);
    return s * u;
}

void softmax_inplace(std::vector<double> & v) {
    const double m = *std::max_element(v.begin(), v.end());
    double sum = 0;
    for (double & x : v) sum += (x = std::exp(x - m));
    for (double & x : v) x /= sum;
}

// mHC, spec 3.3: X is hc streams of E.
struct Mhc {
    Vec a, post;
    std::vector<std::vector<double>> C;  // C[d][s]
};

Mhc mhc_pre(const Hparams & hp, const model::common::MhcWeights & w, const std::vector<Vec> & X) {
    const size_t hc = hp.hc, E = hp.n_embd;
    Vec flat;
    for (const Vec & x : X) flat.insert(flat.end(), x.begin(), x.end());
    const Vec m = mul(w.fn, rms(flat, hp.rms_eps, nullptr));
    Mhc r;
    Vec pre(hc);
    r.post.resize(hc);
    for (size_t h = 0; h < hc; ++h) {
        pre[h] = sigm(double(w.scale[0]) * m[h] + w.base[h]) + hp.hc_eps;
        r.post[h] = 2.0f * sigm(double(w.scale[1]) * m[hc + h] + w.base[hc + h]);
    }
    r.C.assign(hc, std::vector<double>(hc));
    const double eps = hp.hc_eps;
    for (size_t s = 0; s < hc; ++s) {
        std::vector<double> col(hc);
        for (size_t d = 0; d < hc; ++d) col[d] = double(w.scale[2]) * m[2 * hc + d + hc * s] + w.base[2 * hc + d + hc * s];
        softmax_inplace(col);
        for (size_t d = 0; d < hc; ++d) r.C[d][s] = col[d] + eps;
    }
    auto norm_src = [&] {
        for (size_t d = 0; d < hc; ++d) {
            double sum = eps;
            for (size_t s = 0; s < hc; ++s) sum += r.C[d][s];
            for (size_t s = 0; s < hc; ++s) r.C[d][s] /= sum;
        }
    };
    auto norm_dst = [&] {
        for (size_t s = 0; s < hc; ++s) {
            double sum = eps;
            for (size_t d = 0; d < hc; ++d) sum += r.C[d][s];
            for (size_t d = 0; d < hc; ++d) r.C[d][s] /= sum;
        }
    };
    norm_src();
    for (uint32_t it = 1; it < hp.sinkhorn_iterations; ++it) {
        norm_dst();
        norm_src();
    }
    r.a.assign(E, 0.0f);
    for (size_t i = 0; i < E; ++i) {
        double s = 0;
        for (size_t h = 0; h < hc; ++h) s += double(pre[h]) * X[h][i];
        r.a[i] = float(s);
    }
    return r;
}

void mhc_post(const Mhc & r, const Vec & y, std::vector<Vec> & X) {
    const std::vector<Vec> old = X;
    for (size_t d = 0; d < X.size(); ++d) {
        for (size_t i = 0; i < y.size(); ++i) {
            double v = double(r.post[d]) * y[i];
            for (size_t s = 0; s < X.size(); ++s) v += r.C[d][s] * old[s][i];
            X[d][i] = float(v);
        }
    }
}

// Per-layer history of one sequence.
struct KdaState {
    std::vector<Vec> uq, uk, uv;  // projected inputs of every past token
    std::vector<std::vector<double>> S;  // per head, S[i + hd*j]
};

struct DsaState {
    std::vector<Vec> latent, key, gate;
    std::vector<Vec> pooled;  // per complete pool k (positions k*kp .. k*kp + kp - 1)
};

Vec kda(const Hparams & hp, const model::glm5next::KdaWeights & w, const Vec & a, KdaState & st) {
    const size_t H = hp.n_head, hd = hp.kda_head_dim, d_in = hp.d_inner(), K = hp.conv_kernel;
    st.uq.push_back(mul(w.q, a));
    st.uk.push_back(mul(w.k, a));
    st.uv.push_back(mul(w.v, a));
    const size_t t = st.uq.size() - 1;
    auto conv = [&](const std::vector<Vec> & u, const Vec & kern) {
        Vec c(d_in);
        for (size_t ch = 0; ch < d_in; ++ch) {
            double s = 0;
            for (size_t k = 0; k < K; ++k) {
                const int64_t tau = int64_t(t) - int64_t(K - 1) + int64_t(k);
                if (tau >= 0) s += double(kern[k + K * ch]) * u[tau][ch];
            }
            c[ch] = silu_(float(s));
        }
        return c;
    };
    Vec q = conv(st.uq, w.conv_q), k = conv(st.uk, w.conv_k), v = conv(st.uv, w.conv_v);
    Vec g1 = mul(w.f_b, mul(w.f_a, a));
    const Vec beta = mul(w.beta, a), g2 = mul(w.g_b, mul(w.g_a, a));
    if (st.S.empty()) st.S.assign(H, std::vector<double>(hd * hd, 0.0));
    Vec out(d_in);
    for (size_t h = 0; h < H; ++h) {
        auto l2 = [&](Vec & x) {
            const double n = std::sqrt(dot(&x[h * hd], &x[h * hd], hd) + 1e-6);
            for (size_t i = 0; i < hd; ++i) x[h * hd + i] = float(x[h * hd + i] / n);
        };
        l2(q);
        l2(k);
        std::vector<double> g(hd);
        for (size_t i = 0; i < hd; ++i) {
            const double x = double(g1[h * hd + i]) + w.dt_bias[h * hd + i];
            const double A = w.a[h];
            g[i] = std::isinf(hp.gate_lower_bound) ? std::log1p(std::exp(x)) * A
                                                   : hp.gate_lower_bound / (1.0 + std::exp(x * A));  // lb sigmoid(-xA)
        }
        const double bt = sigm(beta[h]);
        std::vector<double> & S = st.S[h];
        Vec o(hd);
        for (size_t j = 0; j < hd; ++j) {
            double u = 0;
            for (size_t i = 0; i < hd; ++i) {
                S[i + hd * j] *= std::exp(g[i]);
                u += S[i + hd * j] * k[h * hd + i];
            }
            const double delta = (v[h * hd + j] - u) * bt;
            double acc = 0;
            for (size_t i = 0; i < hd; ++i) {
                S[i + hd * j] += k[h * hd + i] * delta;
                acc += S[i + hd * j] * q[h * hd + i];
            }
            o[j] = float(acc / std::sqrt(double(hd)));
        }
        const Vec on = rms(o, hp.rms_eps, &w.norm);
        for (size_t j = 0; j < hd; ++j) out[h * hd + j] = on[j] * sigm(g2[h * hd + j]);
    }
    return mul(w.o, out);
}

Vec layer_norm(const Vec & x, float eps, const Vec & gamma, const Vec & beta) {
    double mean = 0;
    for (float v : x) mean += v;
    mean /= double(x.size());
    double var = 0;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= double(x.size());
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = float((x[i] - mean) / std::sqrt(var + eps) * gamma[i] + beta[i]);
    return y;
}

// One DSA token at position t (= the number of earlier tokens). `sel` is in/out: computed on full-indexer layers,
// reused on shared ones.
Vec dsa(const Hparams & hp, const model::glm5next::DsaWeights & w, bool full, const Vec & a, DsaState & st,
        std::vector<uint32_t> & sel, bool dense) {
    const size_t H = hp.n_head, R = hp.kv_lora_rank, Dn = hp.key_mla, Dv = hp.value_mla;
    const size_t Di = hp.idx_dim, Hi = hp.idx_heads, kp = hp.kpool;
    const Vec qr = rms(mul(w.q_a, a), hp.rms_eps, &w.q_a_norm);
    const Vec q = mul(w.q_b, qr);
    st.latent.push_back(rms(mul(w.kv_a, a), hp.rms_eps, &w.kv_a_norm));
    const size_t t = st.latent.size() - 1;
    if (full) {
        const auto & x = w.idx;
        st.key.push_back(layer_norm(mul(x.k, a), hp.ln_eps, x.k_norm, x.k_bias));
        st.gate.push_back(mul(x.gate, a));
        if ((t + 1) % kp == 0) {  // this token completes pool t / kp: pool it from its members
            const size_t first = t + 1 - kp;
            Vec P(Di);
            for (size_t d = 0; d < Di; ++d) {
                std::vector<double> l(kp);
                for (size_t m = 0; m < kp; ++m) l[m] = double(st.gate[first + m][d]) + x.ape[m * Di + d];
                softmax_inplace(l);
                double s = 0;
                for (size_t m = 0; m < kp; ++m) s += l[m] * st.key[first + m][d];
                P[d] = float(s);
            }
            st.pooled.push_back(P);
        }
        const Vec iq = mul(x.q_b, qr);
        const Vec hw = mul(x.proj, a);
        const size_t n_pools = (t + 1) / kp, budget = hp.idx_top_k / kp;
        std::vector<uint32_t> pools(n_pools);
        std::iota(pools.begin(), pools.end(), 0u);
        if (!dense && n_pools > budget) {
            std::vector<double> score(n_pools);
            for (size_t p = 0; p < n_pools; ++p) {
                double s = 0;
                for (size_t h = 0; h < Hi; ++h) {
                    s += std::max(0.0, dot(&iq[h * Di], st.pooled[p].data(), Di)) * (hw[h] / std::sqrt(double(Di * Hi)));
                }
                score[p] = s;
            }
            std::stable_sort(pools.begin(), pools.end(), [&](uint32_t x1, uint32_t x2) { return score[x1] > score[x2]; });
            pools.resize(budget);
            std::sort(pools.begin(), pools.end());
        }
        sel.clear();
        for (uint32_t p : pools) {
            for (size_t m = 0; m < kp; ++m) sel.push_back(uint32_t(p * kp + m));
        }
        for (size_t j = n_pools * kp; j <= t; ++j) sel.push_back(uint32_t(j));  // the tail, oldest first
    }
    Vec attn(H * Dv);
    for (size_t h = 0; h < H; ++h) {
        // absorbed query q~ = Wkb_h q_h
        Vec qh(q.begin() + h * Dn, q.begin() + (h + 1) * Dn);
        const Vec qa = mul(w.k_b, qh, int64_t(h * R), int64_t(R));
        std::vector<double> s(sel.size());
        for (size_t j = 0; j < sel.size(); ++j) s[j] = dot(qa.data(), st.latent[sel[j]].data(), R) / std::sqrt(double(Dn));
        Vec o(R, 0.0f);
        if (!sel.empty()) {
            softmax_inplace(s);
            for (size_t r = 0; r < R; ++r) {
                double v = 0;
                for (size_t j = 0; j < sel.size(); ++j) v += s[j] * st.latent[sel[j]][r];
                o[r] = float(v);
            }
        }
        const Vec vh = mul(w.v_b, o, int64_t(h * Dv), int64_t(Dv));
        std::copy(vh.begin(), vh.end(), attn.begin() + h * Dv);
    }
    return mul(w.o, attn);
}

Vec ffn(const Hparams & hp, const model::glm5next::FfnWeights & w, uint32_t il, const Vec & f) {
    auto swiglu_ffn = [&] {
        const Vec g = mul(w.gate, f), u = mul(w.up, f);
        Vec h(g.size());
        for (size_t i = 0; i < g.size(); ++i) h[i] = act(g[i], u[i], hp.clamp_shexp[il]);
        return mul(w.down, h);
    };
    if (w.dense) return swiglu_ffn();
    const size_t n_exp = hp.n_expert, k = hp.n_expert_used, E = hp.n_embd, F = hp.n_ff_exp;
    const Vec logit = mul(w.router, f);
    std::vector<double> p(n_exp), biased(n_exp);
    for (size_t e = 0; e < n_exp; ++e) {
        p[e] = sigm(logit[e]);
        biased[e] = p[e] + w.probs_bias[e];
    }
    std::vector<uint32_t> order(n_exp);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a1, uint32_t a2) { return biased[a1] > biased[a2]; });
    double sum = 0;
    for (size_t i = 0; i < k; ++i) sum += p[order[i]];
    sum = std::max(sum, 6.103515625e-5);
    Vec y = swiglu_ffn();  // shared expert, ungated
    for (size_t i = 0; i < k; ++i) {
        const uint32_t e = order[i];
        double wt = p[e];
        if (hp.expert_weights_norm) wt /= sum;
        if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f) wt *= hp.expert_weights_scale;
        const Vec g = mul(w.experts.gate, f, int64_t(e * F), int64_t(F)), u = mul(w.experts.up, f, int64_t(e * F), int64_t(F));
        Vec h(F);
        for (size_t j = 0; j < F; ++j) h[j] = act(g[j], u[j], hp.clamp_exp[il]);
        const Vec d = mul(w.experts.down, h, int64_t(e * E), int64_t(E));
        for (size_t j = 0; j < E; ++j) y[j] += float(wt * d[j]);
    }
    return y;
}

}  // namespace

const std::vector<std::vector<uint32_t>> & glm_reference_selections() { return g_selections; }

std::vector<std::vector<float>> glm_reference(const model::glm5next::Model & m, const std::vector<int32_t> & tokens,
                                              const GlmReferenceOptions & opt, std::vector<std::vector<float>> * hidden) {
    const Hparams & hp = m.hparams();
    const auto & W = m.weights();
    const size_t E = hp.n_embd, hc = hp.hc;
    std::vector<KdaState> kst(hp.n_layer);
    std::vector<DsaState> dst(hp.n_layer);
    std::vector<std::vector<float>> logits;
    g_selections.clear();
    if (hidden) hidden->clear();
    int first_full = -1;
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent[il] && first_full < 0) first_full = int(il);
    }
    for (const int32_t tok : tokens) {
        Vec e(E);
        ops::dequantize_matrix_row(W.token_embd, tok, e.data());
        std::vector<Vec> X(hc, e);
        std::vector<uint32_t> sel;
        for (uint32_t il = 0; il < hp.n_layer; ++il) {
            const LayerWeights & lw = W.layers[il];
            Mhc r = mhc_pre(hp, lw.hc_attn, X);
            const Vec a = rms(r.a, hp.rms_eps, &lw.attn_norm);
            const Vec y = hp.is_recurrent[il] ? kda(hp, lw.kda, a, kst[il])
                                              : dsa(hp, lw.dsa, hp.idx_full[il], a, dst[il], sel, opt.dense);
            if (int(il) == first_full) g_selections.push_back(sel);
            mhc_post(r, y, X);
            r = mhc_pre(hp, lw.hc_ffn, X);
            mhc_post(r, ffn(hp, lw.ffn, il, rms(r.a, hp.rms_eps, &lw.ffn_norm)), X);
        }
        Vec mean(E);
        for (size_t i = 0; i < E; ++i) {
            double s = 0;
            for (size_t h = 0; h < hc; ++h) s += X[h][i];
            mean[i] = float(s / double(hc));
        }
        const Vec out = rms(mean, hp.rms_eps, &W.output_norm);
        if (hidden) hidden->push_back(out);
        logits.push_back(mul(W.output, out));
    }
    return logits;
}

}  // namespace offgrid::test
