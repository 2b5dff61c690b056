#include "spec/mtp_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/matmul.h"
#include "ops/rope.h"

namespace offgrid::spec_test {

namespace {

using Vec = std::vector<float>;
namespace q4 = model::qwen4exp;

Vec mul(const ops::Matrix & w, const float * x) {
    Vec y(static_cast<size_t>(w.rows));
    for (int64_t o = 0; o < w.rows; ++o) y[o] = ops::dot_row_ref(w, o, x);
    return y;
}

Vec rms(const float * x, size_t n, float eps, const float * g) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
    const float scale = 1.0f / std::sqrt(float(s / n) + eps);
    Vec y(n);
    for (size_t i = 0; i < n; ++i) y[i] = x[i] * scale * g[i];
    return y;
}

float sig(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x * sig(x); }

Vec hc_mix(const q4::Hparams & hp, const q4::HcWeights & w, const Vec & X, Vec * inject) {
    const size_t E = hp.n_embd, hc = hp.hc;
    Vec xn(hc * E);
    for (size_t s = 0; s < hc; ++s) {
        const Vec r = rms(&X[s * E], E, hp.rms_eps, &w.norm[s * E]);
        std::copy(r.begin(), r.end(), xn.begin() + s * E);
    }
    Vec lo = mul(w.down, xn.data());
    for (float & v : lo) v = silu(v / float(hc));
    const Vec g = mul(w.up, lo.data());
    Vec out(E);
    for (size_t i = 0; i < E; ++i) {
        float s = 0;
        for (size_t st = 0; st < hc; ++st) s += xn[st * E + i] * sig(g[st * E + i]);
        out[i] = s / float(hc);
    }
    if (inject) *inject = mul(w.inject, xn.data());
    return out;
}

void combine(const q4::Hparams & hp, Vec & R, const Vec & y, const Vec & inj) {
    for (size_t s = 0; s < hp.hc; ++s)
        for (size_t i = 0; i < hp.n_embd; ++i) R[s * hp.n_embd + i] += 2.0f * sig(inj[s] / float(hp.hc)) * y[i];
}

Vec moe(const q4::Hparams & hp, const q4::MoeWeights & w, const Vec & f) {
    const size_t E = hp.n_embd, ne = hp.n_expert, nu = hp.n_expert_used, nf = hp.n_ff_exp;
    Vec p = mul(w.router, f.data());
    const float mx = *std::max_element(p.begin(), p.end());
    float z = 0;
    for (float & x : p) z += (x = std::exp(x - mx));
    for (float & x : p) x /= z;
    std::vector<size_t> order(ne);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    float wsum = 0;
    for (size_t k = 0; k < nu; ++k) wsum += p[order[k]];
    wsum = std::max(wsum, 6.103515625e-5f);
    Vec y(E, 0.0f);
    for (size_t k = 0; k < nu; ++k) {
        const size_t e = order[k];
        const Vec g = mul(w.gate.row_slice(int64_t(e * nf), int64_t(nf)), f.data());
        const Vec u = mul(w.up.row_slice(int64_t(e * nf), int64_t(nf)), f.data());
        Vec hid(nf);
        for (size_t i = 0; i < nf; ++i) hid[i] = silu(g[i] * w.gate_scale[e]) * (u[i] * w.up_scale[e]);
        const Vec d = mul(w.down.row_slice(int64_t(e * E), int64_t(E)), hid.data());
        for (size_t i = 0; i < E; ++i) y[i] += d[i] * w.down_scale[e] * (p[e] / wsum);
    }
    const Vec sg = mul(w.shared_gate, f.data()), su = mul(w.shared_up, f.data());
    Vec hid(sg.size());
    for (size_t i = 0; i < hid.size(); ++i) hid[i] = silu(sg[i] * w.shared_gate_scale) * (su[i] * w.shared_up_scale);
    const Vec sd = mul(w.shared_down, hid.data());
    float gl = 0;
    for (size_t i = 0; i < E; ++i) gl += w.shared_gate_inp[i] * f[i];
    for (size_t i = 0; i < E; ++i) y[i] += sd[i] * w.shared_down_scale * sig(gl);
    return y;
}

}  // namespace

std::vector<RefOut> mtp_reference(const q4::Model & m, const std::vector<RefRow> & rows, bool global_hnorm) {
    const q4::Hparams & hp = m.hparams();
    const q4::MtpWeights & w = m.weights().mtp;
    const size_t E = hp.n_embd, hc = hp.hc, D = hp.head_dim, H = hp.n_head, Hkv = hp.n_head_kv;
    const ops::Matrix & embed = w.embed.data ? w.embed : m.weights().token_embd;
    const ops::Matrix & head = w.head.data ? w.head : m.weights().output;
    ops::RopeParams rp;
    rp.n_rot = int(hp.n_rot);
    rp.sections = hp.rope_sections;
    rp.freq_base = hp.rope_freq_base;
    rp.freq_scale = hp.rope_freq_scale;
    rp.attn_factor = hp.rope_attn_factor;

    std::vector<Vec> K, V;  // per row: Hkv x D
    std::vector<RefOut> out;
    for (const RefRow & row : rows) {
        Vec e(E);
        ops::dequantize_matrix_row(embed, row.token, e.data());
        const Vec en = rms(e.data(), E, hp.rms_eps, w.enorm.data());
        Vec hn(hc * E);
        if (global_hnorm) {
            hn = rms(row.h.data(), hc * E, hp.rms_eps, w.hnorm.data());
        } else {
            for (size_t s = 0; s < hc; ++s) {
                const Vec r = rms(&row.h[s * E], E, hp.rms_eps, &w.hnorm[s * E]);
                std::copy(r.begin(), r.end(), hn.begin() + s * E);
            }
        }
        // R0[s] = W_e en + W_h hn[s]: eh_proj's columns [0, E) act on the embedding, [E, 2E) on the hidden.
        Vec R(hc * E, 0.0f);
        Vec wrow(2 * E);
        for (size_t o = 0; o < E; ++o) {
            ops::dequantize_matrix_row(w.eh_proj, int64_t(o), wrow.data());
            for (size_t s = 0; s < hc; ++s) {
                double acc = 0;
                for (size_t i = 0; i < E; ++i) acc += double(wrow[i]) * en[i] + double(wrow[E + i]) * hn[s * E + i];
                R[s * E + o] = float(acc) * w.eh_scale;
            }
        }
        Vec inj;
        const Vec a = hc_mix(hp, w.block.hc_attn, R, &inj);
        const auto & aw = w.block.attn;
        Vec q = mul(aw.q, a.data()), k = mul(aw.k, a.data()), v = mul(aw.v, a.data());
        const std::array<int32_t, 4> p4{row.pos, row.pos, row.pos, 0};
        for (size_t j = 0; j < Hkv; ++j) {
            for (size_t i = 0; i < D; ++i) k[j * D + i] *= aw.k_scale;
            Vec r = rms(&k[j * D], D, hp.rms_eps, aw.k_norm.data());
            ops::imrope(r.data(), 1, int(D), rp, p4);
            std::copy(r.begin(), r.end(), k.begin() + j * D);
        }
        for (float & x : v) x *= aw.v_scale;
        K.push_back(k);
        V.push_back(v);
        Vec attn(H * D);
        for (size_t h = 0; h < H; ++h) {
            for (size_t i = 0; i < 2 * D; ++i) q[h * 2 * D + i] *= aw.q_scale;
            Vec qh = rms(&q[h * 2 * D], D, hp.rms_eps, aw.q_norm.data());
            ops::imrope(qh.data(), 1, int(D), rp, p4);
            const size_t j = h / (H / Hkv);
            std::vector<double> s(K.size());
            double mx = -1e300, z = 0;
            for (size_t c = 0; c < K.size(); ++c) {
                double d = 0;
                for (size_t i = 0; i < D; ++i) d += double(qh[i]) * K[c][j * D + i];
                s[c] = d / std::sqrt(double(D));
                mx = std::max(mx, s[c]);
            }
            for (double & x : s) z += (x = std::exp(x - mx));
            for (size_t i = 0; i < D; ++i) {
                double acc = 0;
                for (size_t c = 0; c < V.size(); ++c) acc += s[c] / z * V[c][j * D + i];
                attn[h * D + i] = float(acc) * sig(q[h * 2 * D + D + i]);
            }
        }
        Vec y = mul(aw.o, attn.data());
        for (float & x : y) x *= aw.o_scale;
        combine(hp, R, y, inj);
        const Vec f = hc_mix(hp, w.block.hc_ffn, R, &inj);
        combine(hp, R, moe(hp, w.block.moe, f), inj);
        const Vec zr = hc_mix(hp, w.hc_head, R, nullptr);
        out.push_back({mul(head, zr.data()), R});
    }
    return out;
}

}  // namespace offgrid::spec_test
