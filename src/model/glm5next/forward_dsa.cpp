// DSA layer (spec 3.5-3.6): nope MLA with the absorbed query over a latent-only cache (V is the same latent,
// W_vb after attention), and the k-pool lightning indexer: per-token rows [LayerNorm key | gate | pooled],
// pools pooled by a per-channel softmax of gate + APE over their members, relu-weighted scores, the best
// top_k / kpool whole pools plus the tail. Shared-indexer layers reuse the previous full layer's selection.
#include <algorithm>
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
    ops::Scope scope(b.ws.local());
    const std::span<float> key = scope.take<float>(T * Di), gate = scope.take<float>(T * Di), zeros = scope.take<float>(Di);
    std::fill(zeros.begin(), zeros.end(), 0.0f);
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
    const std::span<float> mk = scope.take<float>(kp * Di), logit = scope.take<float>(kp * Di);
    const std::span<float> col = scope.take<float>(kp), pooled = scope.take<float>(Di);
    for (const memory::NewPool & np : b.plan.new_pools) {
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

    ops::Scope scope(b.ws.local());
    const std::span<float> qr = scope.take<float>(T * Rq), q = scope.take<float>(T * H * Dn), c = scope.take<float>(T * R);
    ops::matmul(w.q_a, a, T, qr.data(), b.pool);
    for (size_t t = 0; t < T; ++t) ops::rms_norm(&qr[t * Rq], Rq, hp.rms_eps, w.q_a_norm.data(), &qr[t * Rq]);
    ops::matmul(w.q_b, qr.data(), T, q.data(), b.pool);
    ops::matmul(w.kv_a, a, T, c.data(), b.pool);
    for (size_t t = 0; t < T; ++t) {
        ops::rms_norm(&c[t * R], R, hp.rms_eps, w.kv_a_norm.data(), &c[t * R]);
        ops::store_cache_row(b.storage.k_row(li, b.plan.tokens[t].cell), type_k, &c[t * R], R);
    }
    // Absorbed queries: q~_h = Wkb_h q_h, R wide, per head over all tokens.
    const std::span<float> qa = scope.take<float>(T * H * R), qh = scope.take<float>(T * Dn), qt = scope.take<float>(T * R);
    for (size_t h = 0; h < H; ++h) {
        for (size_t t = 0; t < T; ++t) std::memcpy(&qh[t * Dn], &q[(t * H + h) * Dn], Dn * sizeof(float));
        ops::matmul(w.k_b.row_slice(static_cast<int64_t>(h * R), static_cast<int64_t>(R)), qh.data(), T, qt.data(), b.pool);
        for (size_t t = 0; t < T; ++t) std::memcpy(&qa[(t * H + h) * R], &qt[t * R], R * sizeof(float));
    }

    if (hp.idx_full[il]) {
        const IndexerWeights & x = w.idx;
        const size_t Di = hp.idx_dim, Hi = hp.idx_heads, kp = hp.kpool, budget = hp.idx_top_k / hp.kpool;
        store_and_pool(b, li, x, a);
        const std::span<float> iq = scope.take<float>(T * Hi * Di), hw = scope.take<float>(T * Hi);
        ops::matmul(x.q_b, qr.data(), T, iq.data(), b.pool);
        ops::matmul(x.proj, a, T, hw.data(), b.pool);
        const float wscale = 1.0f / std::sqrt(static_cast<float>(Di * Hi));
        for (float & v : hw) v *= wscale;
        ops::parallel_for(b.pool, T, [&](size_t t0, size_t t1) {
            size_t most_pools = 0;  // working space for the range's tokens
            for (size_t t = t0; t < t1; ++t) most_pools = std::max<size_t>(most_pools, b.plan.tokens[t].n_pools);
            ops::Scope local(b.ws.local());
            const void ** const keys = local.take<const void *>(most_pools).data();
            float * const scores = local.take<float>(most_pools).data();
            float * const key = local.take<float>(Di).data();
            uint32_t * const pools = local.take<uint32_t>(most_pools).data();
            uint32_t * const scratch = local.take<uint32_t>(6 * most_pools).data();
            for (size_t t = t0; t < t1; ++t) {
                const memory::TokenPlan & tp = b.plan.tokens[t];
                const memory::SeqView view = b.plan.seq_view(tp.seq);
                size_t n_pools = 0;
                if (b.dense || tp.n_pools <= budget) {
                    for (uint32_t p = 0; p < tp.n_pools; ++p) pools[n_pools++] = p;
                } else {
                    common::pooled_keys(view, tp, static_cast<uint32_t>(kp), b.storage, li, 2 * Di * elem_size(type_k), keys);
                    common::score_pools_weighted(&iq[t * Hi * Di], &hw[t * Hi], Hi, Di,
                                                 std::span<const void * const>(keys, tp.n_pools), type_k, scores, key);
                    n_pools = common::best_pools(scores, tp.n_pools, budget, scratch, pools);
                }
                const size_t n = n_pools * kp + (hp.select_tail ? tp.tail.size() : 0);
                if (n > selection.stride) {
                    throw Error("forward: ubatch token " + std::to_string(t) + " selects " + std::to_string(n) +
                                " cells, more than the " + std::to_string(selection.stride) + " it may see");
                }
                selection.count[t] = static_cast<uint32_t>(common::pool_cells(
                    view, tp, static_cast<uint32_t>(kp), std::span<const uint32_t>(pools, n_pools), hp.select_tail,
                    selection.cells.data() + t * selection.stride));
            }
        });
        selection.set = true;
    } else if (!selection.set) {
        throw Error("forward: a shared-indexer layer before any full one");
    }

    // Attention over the selected latents: scores q~_h . c_j / sqrt(Dn), values the same latents.
    const std::span<float> o = scope.take<float>(T * H * R);
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(Dn));
    ops::parallel_for(b.pool, T, [&](size_t t0, size_t t1) {
        ops::Scope local(b.ws.local());
        const void ** const rows = local.take<const void *>(selection.stride).data();
        float * const scratch = local.take<float>(selection.stride).data();
        for (size_t t = t0; t < t1; ++t) {
            const std::span<const uint32_t> cells = selection.of(t);
            for (size_t j = 0; j < cells.size(); ++j) rows[j] = b.storage.k_row(li, cells[j]);
            const ops::CacheRows K{std::span<const void * const>(rows, cells.size()), type_k};
            for (size_t h = 0; h < H; ++h) {
                ops::attend_head(&qa[(t * H + h) * R], R, K, K, 0, kq_scale, scratch, &o[(t * H + h) * R]);
            }
        }
    });
    // Per head v_h = Wvb_h o_h, then the output projection.
    const std::span<float> oh = scope.take<float>(T * R), vh = scope.take<float>(T * Dv), attn = scope.take<float>(T * H * Dv);
    for (size_t h = 0; h < H; ++h) {
        for (size_t t = 0; t < T; ++t) std::memcpy(&oh[t * R], &o[(t * H + h) * R], R * sizeof(float));
        ops::matmul(w.v_b.row_slice(static_cast<int64_t>(h * Dv), static_cast<int64_t>(Dv)), oh.data(), T, vh.data(), b.pool);
        for (size_t t = 0; t < T; ++t) std::memcpy(&attn[(t * H + h) * Dv], &vh[t * Dv], Dv * sizeof(float));
    }
    ops::matmul(w.o, attn.data(), T, y, b.pool);
}

size_t selection_stride(const Hparams & hp, size_t n_cells, bool dense) {
    if (dense || hp.kpool == 0) return n_cells;
    // A sparse token selects at most budget whole pools and its tail (under kpool cells); never more than it sees.
    return std::min<size_t>(n_cells, (hp.idx_top_k / hp.kpool) * hp.kpool + hp.kpool - 1);
}

ops::WorkspaceSize dsa_bytes(const Hparams & hp, size_t T, size_t n_cells) {
    const size_t H = hp.n_head, Rq = hp.q_lora_rank, R = hp.kv_lora_rank, Dn = hp.key_mla, Dv = hp.value_mla;
    const size_t Di = hp.idx_dim, Hi = hp.idx_heads, kp = hp.kpool;
    // Per range of tokens, on whichever thread runs it: the selection's keys, scores and pools, then the
    // attended rows (a dense run's selection stride is every cell).
    const size_t n_pools = kp > 0 ? n_cells / kp : 0;
    const size_t select = ops::arena_bytes<const void *>(n_pools) + ops::arena_bytes<float>(n_pools) +
                          ops::arena_bytes<float>(Di) + ops::arena_bytes<uint32_t>(n_pools) +
                          ops::arena_bytes<uint32_t>(6 * n_pools);
    const size_t stride = selection_stride(hp, n_cells, true);
    const size_t attend = ops::arena_bytes<const void *>(stride) + ops::arena_bytes<float>(stride);
    const size_t per_thread = std::max(select, attend);
    const size_t store = 3 * ops::arena_bytes<float>(T * Di) + 2 * ops::arena_bytes<float>(kp * Di) +
                         ops::arena_bytes<float>(kp) + ops::arena_bytes<float>(Di);
    const size_t main = ops::arena_bytes<float>(T * Rq) + ops::arena_bytes<float>(T * H * Dn) +
                        ops::arena_bytes<float>(T * R) + ops::arena_bytes<float>(T * H * R) +
                        ops::arena_bytes<float>(T * Dn) + ops::arena_bytes<float>(T * R) +
                        ops::arena_bytes<float>(T * Hi * Di) + ops::arena_bytes<float>(T * Hi) +
                        ops::arena_bytes<float>(T * H * R) + ops::arena_bytes<float>(T * R) +
                        ops::arena_bytes<float>(T * Dv) + ops::arena_bytes<float>(T * H * Dv) + store;
    return {main + per_thread, per_thread};
}

}  // namespace offgrid::model::glm5next::detail
