// DSA layer (spec 3.5-3.6): nope MLA with the absorbed query over a latent-only cache (V is the same latent,
// W_vb after attention), and the k-pool lightning indexer: per-token rows [LayerNorm key | gate | pooled],
// pools pooled by a per-channel softmax of gate + APE over their members, relu-weighted scores, the best
// top_k / kpool whole pools plus the tail. Shared-indexer layers reuse the previous full layer's selection.
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "model/common/kpool_select.h"
#include "model/glm5next/forward_internal.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace offgrid::model::glm5next::detail {

namespace {

size_t elem_size(tensor::ElemType t) { return t == tensor::ElemType::F32 ? 4 : 2; }

// out = (x - mean) / sqrt(var + eps) * gamma + beta; mean and variance in double.
void layer_norm(const float * x, size_t n, float eps, const float * gamma, const float * beta, float * out) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += x[i];
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    double var = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(x[i] - mean);
        var += d * d;
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(var / static_cast<double>(n)) + eps);
    for (size_t i = 0; i < n; ++i) out[i] = (x[i] - mean) * scale * gamma[i] + beta[i];
}

// Writes the tokens' indexer rows [key | gate | 0], then pools plan.new_pools into their rep rows.
void store_and_pool(const Batch & b, uint32_t li, const IndexerWeights & w, const float * a) {
    const Hparams & hp = b.hp;
    const size_t T = b.n_tokens, Di = hp.idx_dim, kp = hp.kpool;
    const tensor::ElemType type = b.shape.type_k;
    const size_t part = Di * elem_size(type);
    std::vector<float> key(T * Di), gate(T * Di), zeros(Di, 0.0f);
    ops::matmul(w.k, a, T, key.data(), b.pool);
    ops::matmul(w.gate, a, T, gate.data(), b.pool);
    for (size_t t = 0; t < T; ++t) {
        float * kt = &key[t * Di];
        layer_norm(kt, Di, hp.ln_eps, w.k_norm.data(), w.k_bias.data(), kt);
        auto * row = static_cast<uint8_t *>(b.storage.idx_row(li, b.plan.tokens[t].cell));
        ops::store_cache_row(row, type, kt, Di);
        ops::store_cache_row(row + part, type, &gate[t * Di], Di);
        ops::store_cache_row(row + 2 * part, type, zeros.data(), Di);
    }
    std::vector<float> mk(kp * Di), logit(kp * Di), col(kp), pooled(Di);
    for (const memory::NewPool & np : b.plan.new_pools) {
        if (np.members.size() != kp) {
            throw Error("forward: a new pool has " + std::to_string(np.members.size()) + " members, expected " +
                        std::to_string(kp));
        }
        for (size_t m = 0; m < kp; ++m) {  // read back as cached (F16-rounded by default)
            const auto * row = static_cast<const uint8_t *>(b.storage.idx_row(li, np.members[m]));
            ops::load_cache_row(row, type, &mk[m * Di], Di);
            ops::load_cache_row(row + part, type, &logit[m * Di], Di);
            for (size_t d = 0; d < Di; ++d) logit[m * Di + d] += w.ape[m * Di + d];
        }
        for (size_t d = 0; d < Di; ++d) {
            for (size_t m = 0; m < kp; ++m) col[m] = logit[m * Di + d];
            ops::softmax(col.data(), kp);
            float p = 0.0f;
            for (size_t m = 0; m < kp; ++m) p += col[m] * mk[m * Di + d];
            pooled[d] = p;
        }
        auto * rep = static_cast<uint8_t *>(b.storage.idx_row(li, np.rep));
        ops::store_cache_row(rep + 2 * part, type, pooled.data(), Di);
    }
}

}  // namespace

void dsa_layer(const Batch & b, uint32_t il, const float * a, float * y, Selection & selection) {
    const Hparams & hp = b.hp;
    const DsaWeights & w = b.model.weights().layers[il].dsa;
    const uint32_t li = static_cast<uint32_t>(b.model.attn_index(il));
    const size_t T = b.n_tokens, H = hp.n_head, Rq = hp.q_lora_rank, R = hp.kv_lora_rank;
    const size_t Dn = hp.key_mla, Dv = hp.value_mla;
    const tensor::ElemType type_k = b.shape.type_k;

    std::vector<float> qr(T * Rq), q(T * H * Dn), c(T * R);
    ops::matmul(w.q_a, a, T, qr.data(), b.pool);
    for (size_t t = 0; t < T; ++t) ops::rms_norm(&qr[t * Rq], Rq, hp.rms_eps, w.q_a_norm.data(), &qr[t * Rq]);
    ops::matmul(w.q_b, qr.data(), T, q.data(), b.pool);
    ops::matmul(w.kv_a, a, T, c.data(), b.pool);
    for (size_t t = 0; t < T; ++t) {
        ops::rms_norm(&c[t * R], R, hp.rms_eps, w.kv_a_norm.data(), &c[t * R]);
        ops::store_cache_row(b.storage.k_row(li, b.plan.tokens[t].cell), type_k, &c[t * R], R);
    }
    // Absorbed queries: q~_h = Wkb_h q_h, R wide, per head over all tokens.
    std::vector<float> qa(T * H * R), qh(T * Dn), qt(T * R);
    for (size_t h = 0; h < H; ++h) {
        for (size_t t = 0; t < T; ++t) std::memcpy(&qh[t * Dn], &q[(t * H + h) * Dn], Dn * sizeof(float));
        ops::matmul(w.k_b.row_slice(static_cast<int64_t>(h * R), static_cast<int64_t>(R)), qh.data(), T, qt.data(), b.pool);
        for (size_t t = 0; t < T; ++t) std::memcpy(&qa[(t * H + h) * R], &qt[t * R], R * sizeof(float));
    }

    if (hp.idx_full[il]) {
        const IndexerWeights & x = w.idx;
        const size_t Di = hp.idx_dim, Hi = hp.idx_heads, kp = hp.kpool, budget = hp.idx_top_k / hp.kpool;
        store_and_pool(b, li, x, a);
        std::vector<float> iq(T * Hi * Di), hw(T * Hi);
        ops::matmul(x.q_b, qr.data(), T, iq.data(), b.pool);
        ops::matmul(x.proj, a, T, hw.data(), b.pool);
        const float wscale = 1.0f / std::sqrt(static_cast<float>(Di * Hi));
        for (float & v : hw) v *= wscale;
        selection.assign(T, {});
        ops::parallel_for(b.pool, T, [&](size_t t0, size_t t1) {
            std::vector<const void *> keys;
            std::vector<float> scores;
            for (size_t t = t0; t < t1; ++t) {
                const memory::TokenPlan & tp = b.plan.tokens[t];
                const memory::SeqView view = b.plan.seq_view(tp.seq);
                if (tp.n_pools > view.pools.size()) throw Error("forward: plan sees more pools than its sequence has");
                std::vector<uint32_t> pools;
                if (b.dense || tp.n_pools <= budget) {
                    for (uint32_t p = 0; p < tp.n_pools; ++p) pools.push_back(p);
                } else {
                    common::pooled_keys(view, tp, static_cast<uint32_t>(kp), b.storage, li, 2 * Di * elem_size(type_k), keys);
                    scores.resize(tp.n_pools);
                    common::score_pools_weighted(&iq[t * Hi * Di], &hw[t * Hi], Hi, Di, keys, type_k, scores.data());
                    pools = common::best_pools(scores.data(), scores.size(), budget);
                }
                common::pool_cells(view, tp, static_cast<uint32_t>(kp), pools, hp.select_tail, selection[t]);
            }
        });
    } else if (selection.size() != T) {
        throw Error("forward: a shared-indexer layer before any full one");
    }

    // Attention over the selected latents: scores q~_h . c_j / sqrt(Dn), values the same latents.
    std::vector<float> o(T * H * R);
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(Dn));
    ops::parallel_for(b.pool, T, [&](size_t t0, size_t t1) {
        std::vector<const void *> rows;
        std::vector<float> scratch;
        for (size_t t = t0; t < t1; ++t) {
            const std::vector<uint32_t> & cells = selection[t];
            rows.resize(cells.size());
            for (size_t j = 0; j < cells.size(); ++j) rows[j] = b.storage.k_row(li, cells[j]);
            scratch.resize(cells.size());
            const ops::CacheRows K{rows, type_k};
            for (size_t h = 0; h < H; ++h) {
                ops::attend_head(&qa[(t * H + h) * R], R, K, K, 0, kq_scale, scratch.data(), &o[(t * H + h) * R]);
            }
        }
    });
    // Per head v_h = Wvb_h o_h, then the output projection.
    std::vector<float> oh(T * R), vh(T * Dv), attn(T * H * Dv);
    for (size_t h = 0; h < H; ++h) {
        for (size_t t = 0; t < T; ++t) std::memcpy(&oh[t * R], &o[(t * H + h) * R], R * sizeof(float));
        ops::matmul(w.v_b.row_slice(static_cast<int64_t>(h * Dv), static_cast<int64_t>(Dv)), oh.data(), T, vh.data(), b.pool);
        for (size_t t = 0; t < T; ++t) std::memcpy(&attn[(t * H + h) * Dv], &vh[t * Dv], Dv * sizeof(float));
    }
    ops::matmul(w.o, attn.data(), T, y, b.pool);
}

}  // namespace offgrid::model::glm5next::detail
