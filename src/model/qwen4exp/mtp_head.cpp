#include "model/qwen4exp/mtp_head.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "model/common/hyper_connections.h"
#include "model/qwen4exp/forward_internal.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/rope.h"

namespace offgrid::model::qwen4exp {

namespace {

ops::RopeParams rope_of(const Hparams & hp) {
    ops::RopeParams p;
    p.n_rot = static_cast<int>(hp.n_rot);
    p.sections = hp.rope_sections;
    p.freq_base = hp.rope_freq_base;
    p.freq_scale = hp.rope_freq_scale;
    p.attn_factor = hp.rope_attn_factor;
    return p;
}

// The caller's workspace, reset for this call, or `own` with one arena per pool thread.
ops::Workspace & workspace_for(ops::Workspace * ws, ops::Workspace & own, ops::ThreadPool * pool) {
    const int threads = pool ? pool->n_threads() : 1;
    if (!ws || ws->n_threads() < threads) {
        if (ws) {
            ws->reserve(threads, {});
            return *ws;
        }
        own.reserve(threads, {});
        return own;
    }
    ws->reset();
    return *ws;
}

}  // namespace

void MtpCache::truncate(int32_t pos) {
    if (pos <= first) {
        n = 0;
    } else if (pos < end()) {
        n = static_cast<size_t>(pos - first);
    }
}

MtpHead::MtpHead(const Hparams & hp, const MtpWeights & mtp, const ops::Matrix & embed, const ops::Matrix & head,
                 HnormMode mode)
    : hp_(hp), w_(mtp), embed_(mtp.embed.data ? mtp.embed : embed), head_(mtp.head.data ? mtp.head : head), mode_(mode) {
    if (!mtp.present) throw Error("the model has no MTP (NextN) block");
    for (const ops::Matrix * m : {&embed_, &head_}) {
        if (!m->data || m->cols != hp.n_embd || m->rows != hp.n_vocab) {
            throw Error("MTP head: the " + std::string(m == &embed_ ? "embedding" : "output") + " table is " +
                        std::to_string(m->cols) + " x " + std::to_string(m->rows) + ", the head needs " +
                        std::to_string(hp.n_embd) + " x " + std::to_string(hp.n_vocab));
        }
    }
}

void MtpHead::project(const int32_t * tokens, const float * h, size_t n, float * R0, ops::ThreadPool * pool,
                      ops::Arena & scratch) const {
    const size_t E = hp_.n_embd, hc = hp_.hc;
    ops::Scope scope(scratch);
    const std::span<float> e = scope.take<float>(E), x = scope.take<float>(n * hc * 2 * E);
    for (size_t t = 0; t < n; ++t) {
        if (tokens[t] < 0 || static_cast<uint32_t>(tokens[t]) >= hp_.n_vocab) {
            throw Error("MTP head: token id " + std::to_string(tokens[t]) + " out of range");
        }
        ops::dequantize_matrix_row(embed_, tokens[t], e.data());
        float * xt = &x[t * hc * 2 * E];
        ops::rms_norm(e.data(), E, hp_.rms_eps, w_.enorm.data(), xt);
        const float * ht = h + t * hc * E;
        if (mode_ == HnormMode::Global) {
            const std::span<float> hn = scope.take<float>(hc * E);
            ops::rms_norm(ht, hc * E, hp_.rms_eps, w_.hnorm.data(), hn.data());
            for (size_t s = 0; s < hc; ++s) std::copy(&hn[s * E], &hn[(s + 1) * E], xt + s * 2 * E + E);
        } else {
            for (size_t s = 0; s < hc; ++s) ops::rms_norm(ht + s * E, E, hp_.rms_eps, &w_.hnorm[s * E], xt + s * 2 * E + E);
        }
        // Every stream's input starts with the same normalised embedding.
        for (size_t s = 1; s < hc; ++s) std::copy(xt, xt + E, xt + s * 2 * E);
    }
    ops::matmul(w_.eh_proj, x.data(), static_cast<int64_t>(n * hc), R0, pool);
    if (w_.eh_scale != 1.0f)
        for (size_t i = 0; i < n * hc * E; ++i) R0[i] *= w_.eh_scale;
}

void MtpHead::attention_inputs(MtpCache & cache, const int32_t * pos, const float * R0, size_t n, float * a,
                               float * inject, float * q, ops::ThreadPool * pool, ops::Arena & scratch) const {
    const size_t D = hp_.head_dim, H = hp_.n_head, Hkv = hp_.n_head_kv, kvdim = D * Hkv, qdim = 2 * D * H;
    const AttentionWeights & aw = w_.block.attn;
    const common::GatedHcShape hcs{hp_.n_embd, hp_.hc, hp_.hc_lr, hp_.rms_eps};
    common::gated_hc_mix(hcs, w_.block.hc_attn, R0, n, a, inject, pool, &scratch);
    ops::Scope scope(scratch);
    const std::span<float> k = scope.take<float>(n * kvdim), v = scope.take<float>(n * kvdim);
    ops::matmul(aw.k, a, static_cast<int64_t>(n), k.data(), pool);
    ops::matmul(aw.v, a, static_cast<int64_t>(n), v.data(), pool);
    if (q) ops::matmul(aw.q, a, static_cast<int64_t>(n), q, pool);
    const ops::RopeParams rp = rope_of(hp_);
    for (size_t t = 0; t < n; ++t) {
        const ops::RopeAngles ang = ops::rope_angles(rp, {pos[t], pos[t], pos[t], 0});
        for (size_t j = 0; j < Hkv; ++j) {
            float * kj = &k[t * kvdim + D * j];
            for (size_t i = 0; i < D; ++i) kj[i] *= aw.k_scale;
            ops::rms_norm(kj, D, hp_.rms_eps, aw.k_norm.data(), kj);
            ops::rope_apply(kj, rp.n_rot, ang);
        }
        for (size_t i = 0; i < kvdim; ++i) v[t * kvdim + i] *= aw.v_scale;
        if (q) {
            for (size_t hh = 0; hh < H; ++hh) {
                float * qh = q + t * qdim + 2 * D * hh;
                for (size_t i = 0; i < 2 * D; ++i) qh[i] *= aw.q_scale;
                ops::rms_norm(qh, D, hp_.rms_eps, aw.q_norm.data(), qh);
                ops::rope_apply(qh, rp.n_rot, ang);
            }
        }
        // Place the row at its position (invariant 1), then append.
        if (cache.n == 0 || pos[t] > cache.end()) {
            cache.n = 0;
            cache.first = pos[t];
        } else if (pos[t] < cache.end()) {
            cache.truncate(pos[t]);
            if (cache.n == 0) cache.first = pos[t];
        }
        if (cache.k.size() < (cache.n + 1) * kvdim) {
            cache.k.resize(std::max((cache.n + 1) * kvdim, cache.k.size() * 2));
            cache.v.resize(cache.k.size());
        }
        std::copy(&k[t * kvdim], &k[(t + 1) * kvdim], &cache.k[cache.n * kvdim]);
        std::copy(&v[t * kvdim], &v[(t + 1) * kvdim], &cache.v[cache.n * kvdim]);
        ++cache.n;
    }
}

void MtpHead::catch_up(MtpCache & cache, const int32_t * tokens, const int32_t * pos, const float * h, size_t n,
                       ops::ThreadPool * pool, ops::Workspace * ws) const {
    if (n == 0) return;
    const size_t E = hp_.n_embd, hc = hp_.hc;
    ops::Workspace own;
    ops::Workspace & w = workspace_for(ws, own, pool);
    const ops::Workspace::Bind bind(w);  // the head's products take their scratch there
    ops::Scope scope(w.local());
    float * const R0 = scope.take<float>(n * hc * E).data();
    float * const a = scope.take<float>(n * E).data();
    float * const inject = scope.take<float>(n * hc).data();
    project(tokens, h, n, R0, pool, scope.arena());
    attention_inputs(cache, pos, R0, n, a, inject, nullptr, pool, scope.arena());
}

void MtpHead::step(MtpCache & cache, int32_t token, int32_t pos, const float * h, float * logits, float * h_out,
                   ops::ThreadPool * pool, ops::Workspace * ws) const {
    const size_t E = hp_.n_embd, hc = hp_.hc, D = hp_.head_dim, H = hp_.n_head, Hkv = hp_.n_head_kv;
    const size_t kvdim = D * Hkv, qdim = 2 * D * H, group = H / Hkv;
    const common::GatedHcShape hcs{E, hc, hp_.hc_lr, hp_.rms_eps};
    ops::Workspace own;
    ops::Workspace & w = workspace_for(ws, own, pool);
    const ops::Workspace::Bind bind(w);  // the head's products take their scratch there
    ops::Arena & arena = w.local();
    ops::Scope scope(arena);
    const std::span<float> a = scope.take<float>(E), inject = scope.take<float>(hc), q = scope.take<float>(qdim);
    const std::span<float> attn = scope.take<float>(D * H), y = scope.take<float>(E), z = scope.take<float>(E);
    float * R = h_out;  // the row's residual, built in place
    project(&token, h, 1, R, pool, arena);
    attention_inputs(cache, &pos, R, 1, a.data(), inject.data(), q.data(), pool, arena);

    // Dense causal attention over every cached row (the row itself is the last), the heads of a KV group in one
    // call of the engine's attention kernel, gated per head.
    const size_t n_kv = cache.n;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const std::span<const void *> krows = scope.take<const void *>(n_kv), vrows = scope.take<const void *>(n_kv);
    for (size_t c = 0; c < n_kv; ++c) {
        krows[c] = &cache.k[c * kvdim];
        vrows[c] = &cache.v[c * kvdim];
    }
    const ops::CacheRows K{krows, tensor::ElemType::F32}, V{vrows, tensor::ElemType::F32};
    for (size_t j = 0; j < Hkv; ++j) {
        ops::attend_heads(&q[2 * D * j * group], group, 2 * D, D, K, V, j * D, scale, &attn[j * group * D], D);
    }
    for (size_t hh = 0; hh < H; ++hh) {
        float * gate = &q[2 * D * hh] + D;
        ops::sigmoid_n(gate, gate, D);  // in place: the gate is read only here
        float * out = &attn[hh * D];
        for (size_t i = 0; i < D; ++i) out[i] *= gate[i];
    }
    ops::matmul(w_.block.attn.o, attn.data(), 1, y.data(), pool);
    for (float & x : y) x *= w_.block.attn.o_scale;
    common::gated_hc_combine(hcs, R, y.data(), inject.data(), 1);

    common::gated_hc_mix(hcs, w_.block.hc_ffn, R, 1, a.data(), inject.data(), pool, &arena);
    detail::moe_ffn(hp_, w_.block.moe, pool, w, 1, a.data(), y.data());
    common::gated_hc_combine(hcs, R, y.data(), inject.data(), 1);

    common::gated_hc_mix(hcs, w_.hc_head, R, 1, z.data(), nullptr, pool, &arena);
    ops::matmul(head_, z.data(), 1, logits, pool);
}

}  // namespace offgrid::model::qwen4exp
