// Full attention (spec 3.5) with QSA k-pool selection (spec 5.5): gated queries, q/k norms, IMRoPE, grouped
// KV heads, K/V written to each token's cell; on QSA layers raw indexer keys are stored, the plan's new pools
// are pooled, and each token attends to its top top_k/r pools plus its incomplete tail.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>

#include "common/error.h"
#include "model/common/kpool_select.h"
#include "model/qwen4exp/forward_internal.h"
#include "ops/attention.h"
#include "ops/cache_rows.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/matmul_group.h"
#include "ops/rope.h"

namespace offgrid::model::qwen4exp::detail {

namespace {

size_t elem_size(tensor::ElemType t) { return t == tensor::ElemType::F32 ? 4 : 2; }

ops::RopeParams rope_params(const Hparams & hp) {
    ops::RopeParams p;
    p.n_rot = static_cast<int>(hp.n_rot);
    p.sections = hp.rope_sections;
    p.freq_base = hp.rope_freq_base;
    p.freq_scale = hp.rope_freq_scale;
    p.attn_factor = hp.rope_attn_factor;
    return p;
}

std::array<int32_t, 4> text_pos(memory::Pos p) { return {p, p, p, 0}; }

// Writes the raw indexer keys kr (idx_k a, T x idx_dim), then pools plan.new_pools into their rep rows.
void store_indexer_keys(const Batch & b, uint32_t li, const AttentionWeights & w, const float * kr) {
    const Hparams & hp = b.hp;
    const size_t T = b.n_tokens, Di = hp.idx_dim, r = b.plan.kpool;
    const tensor::ElemType type = b.shape.type_idx;
    const size_t half_bytes = Di * elem_size(type);
    ops::Scope scope(b.ws.local());
    const std::span<float> zeros = scope.take<float>(Di);
    std::fill(zeros.begin(), zeros.end(), 0.0f);
    for (size_t t = 0; t < T; ++t) {
        auto * row = static_cast<uint8_t *>(b.storage.idx_row(li, b.plan.tokens[t].cell));
        ops::store_cache_row(row, type, &kr[t * Di], Di);
        ops::store_cache_row(row + half_bytes, type, zeros.data(), Di);
    }
    const ops::RopeParams rp = rope_params(hp);
    const float inv_r = 1.0f / static_cast<float>(r);
    // Pools are independent (members' raw halves read, the rep's pooled half written), so they spread over the
    // pool: an edit that stales a sequence from 0 (or a partial restore) re-pools its whole context.
    ops::parallel_for(b.pool, b.plan.new_pools.size(), [&](size_t n0, size_t n1) {
        ops::Scope local(b.ws.local());
        const std::span<float> sum = local.take<float>(Di), member = local.take<float>(Di), pooled = local.take<float>(Di);
        for (size_t k = n0; k < n1; ++k) {
            const memory::NewPool & np = b.plan.new_pools[k];
            std::fill(sum.begin(), sum.end(), 0.0f);
            for (uint32_t cell : np.members) {
                ops::load_cache_row(b.storage.idx_row(li, cell), type, member.data(), Di);
                for (size_t i = 0; i < Di; ++i) sum[i] += member[i];
            }
            for (size_t i = 0; i < Di; ++i) sum[i] *= inv_r;
            ops::rms_norm(sum.data(), Di, hp.rms_eps, w.idx_k_norm.data(), pooled.data());
            // Text positions throughout: tokens are roped at (p, p, p, 0) from TokenPlan.pos alone, so a pool is
            // roped at (p0, p0, p0, p0) from its first member's position (NewPool::pos): the reference's text cells
            // carry y = x = p, which this reproduces.
            const memory::Pos p0 = np.pos;
            ops::imrope(pooled.data(), 1, static_cast<int>(Di), rp, {p0, p0, p0, p0});
            auto * rep = static_cast<uint8_t *>(b.storage.idx_row(li, np.rep));
            ops::store_cache_row(rep + half_bytes, type, pooled.data(), Di);
        }
    }, 64);
}

}  // namespace

void attention_layer(const Batch & b, uint32_t il, const float * a, float * y) {
    const Hparams & hp = b.hp;
    const AttentionWeights & w = b.model.weights().layers[il].attn;
    const uint32_t li = static_cast<uint32_t>(b.model.attn_index(il));
    const size_t T = b.n_tokens, D = hp.head_dim, H = hp.n_head, Hkv = hp.n_head_kv;
    const size_t qdim = 2 * D * H, kvdim = D * Hkv, group = H / Hkv;
    const ops::RopeParams rp = rope_params(hp);

    const bool qsa = hp.is_qsa(il);
    const size_t Di = hp.idx_dim, Hi = hp.idx_heads, r = hp.kpool;
    ops::Scope scope(b.ws.local());
    const std::span<float> q = scope.take<float>(T * qdim), k = scope.take<float>(T * kvdim), v = scope.take<float>(T * kvdim);
    const std::span<float> kr = scope.take<float>(qsa ? T * Di : 0), qi = scope.take<float>(qsa ? T * Hi * Di : 0);
    // q, k, v and the indexer's keys and queries (all products of a) in one parallel region (ops/matmul_group.h).
    const auto tokens = static_cast<int64_t>(T);
    const ops::MatmulTask projections[5] = {{w.q, a, tokens, q.data()}, {w.k, a, tokens, k.data()},
                                            {w.v, a, tokens, v.data()}, {w.idx_k, a, tokens, kr.data()},
                                            {w.idx_q, a, tokens, qi.data()}};
    ops::matmul_group(std::span<const ops::MatmulTask>(projections, qsa ? 5 : 3), b.pool);
    for (float & x : q) x *= w.q_scale;
    for (float & x : k) x *= w.k_scale;
    for (float & x : v) x *= w.v_scale;

    // Norm and rotate q (per head, gate halves untouched) and k; store K and V rows.
    for (size_t t = 0; t < T; ++t) {
        const memory::TokenPlan & tp = b.plan.tokens[t];
        const ops::RopeAngles ang = ops::rope_angles(rp, text_pos(tp.pos));
        for (size_t h = 0; h < H; ++h) {
            float * qh = &q[t * qdim + 2 * D * h];
            ops::rms_norm(qh, D, hp.rms_eps, w.q_norm.data(), qh);
            ops::rope_apply(qh, rp.n_rot, ang);
        }
        for (size_t j = 0; j < Hkv; ++j) {
            float * kj = &k[t * kvdim + D * j];
            ops::rms_norm(kj, D, hp.rms_eps, w.k_norm.data(), kj);
            ops::rope_apply(kj, rp.n_rot, ang);
        }
        ops::store_cache_row(b.storage.k_row(li, tp.cell), b.shape.type_k, &k[t * kvdim], kvdim);
        ops::store_cache_row(b.storage.v_row(li, tp.cell), b.shape.type_v, &v[t * kvdim], kvdim);
    }

    if (qsa) {
        store_indexer_keys(b, li, w, kr.data());
        for (size_t t = 0; t < T; ++t) {
            const ops::RopeAngles ang = ops::rope_angles(rp, text_pos(b.plan.tokens[t].pos));
            for (size_t h = 0; h < Hi; ++h) {
                float * qh = &qi[(t * Hi + h) * Di];
                ops::rms_norm(qh, Di, hp.rms_eps, w.idx_q_norm.data(), qh);
                ops::rope_apply(qh, rp.n_rot, ang);
            }
        }
    }

    // Attention per block of tokens. A block is up to kQueryBlock consecutive tokens of one sequence: on a
    // QSA layer they score the pooled keys together (each key read once for the block; a score depends only on
    // its query and key, so a block selects exactly as one token at a time), then each token takes its own
    // best pools plus its tail and attends over them. Blocks are independent: a prompt spreads them over the
    // pool. A decode step has fewer tokens than threads, so its one block spreads its pool scores and its KV
    // groups over the pool instead. Either way every score and every head is computed by one thread with the
    // same arithmetic.
    const std::span<float> attn = scope.take<float>(T * D * H);
    const float kq_scale = 1.0f / std::sqrt(static_cast<float>(D));
    const size_t budget = qsa ? hp.idx_top_k / r : 0;
    const tensor::ElemType type_k = b.shape.type_k, type_v = b.shape.type_v, type_idx = b.shape.type_idx;
    const bool by_table = ops::attend_rows_supported(type_k, type_v, D);
    const memory::RowTable k_table = b.storage.k_rows(li), v_table = b.storage.v_rows(li);
    const memory::RowTable idx_table = b.storage.idx_rows(li);
    const size_t k_elem = elem_size(type_k), v_elem = elem_size(type_v);
    const ops::CacheTable pooled{qsa ? idx_table.base + Di * elem_size(type_idx) : nullptr, idx_table.stride, type_idx};

    // Each sequence's pooled keys in pool order, taken after this layer's new pools are written (the memory copies
    // the keys it has not copied yet); a storage that keeps none leaves base null and scoring reads the rep rows.
    const std::span<common::SeqPoolKeys> pool_keys_all = scope.take<common::SeqPoolKeys>(T);  // one per token at most
    const std::span<const common::SeqPoolKeys> pool_keys = pool_keys_all.first(
        qsa && !b.qsa_dense ? common::take_pool_keys(b.plan, b.storage, li, budget, pool_keys_all) : 0);

    constexpr size_t kQueryBlock = 16;
    struct Block {
        size_t first, second;
    };
    const std::span<Block> blocks_all = scope.take<Block>(T);
    size_t n_blocks = 0;
    for (size_t t = 0; t < T;) {
        size_t e = t + 1;
        while (e < T && e - t < kQueryBlock && b.plan.tokens[e].seq == b.plan.tokens[t].seq) ++e;
        blocks_all[n_blocks++] = {t, e};
        t = e;
    }
    const std::span<const Block> blocks = blocks_all.first(n_blocks);
    const int n_threads = b.pool ? b.pool->n_threads() : 1;
    const bool per_block_parallel = blocks.size() >= static_cast<size_t>(n_threads);
    ops::ThreadPool * inner = per_block_parallel ? nullptr : b.pool;

    // Attends token t over `cells` (sequence order), all heads, gated, into attn.
    auto attend_cells = [&](size_t t, std::span<const uint32_t> cells) {
        ops::CacheRows K, V;
        // Q8_0 or mixed rows: pointers, Q8_0 widened to f32 first (ops/cache_rows.h). Their size follows the
        // attended cells (the whole context on a dense layer), so they are not in the workspace: this path
        // allocates.
        std::vector<const void *> krows, vrows;
        std::vector<float> k_wide, v_wide;
        if (!by_table) {
            krows.resize(cells.size());
            vrows.resize(cells.size());
            for (size_t j = 0; j < cells.size(); ++j) {
                krows[j] = b.storage.k_row(li, cells[j]);
                vrows[j] = b.storage.v_row(li, cells[j]);
            }
            K = ops::widen_cache_rows({krows, type_k}, kvdim, k_wide, krows);
            V = ops::widen_cache_rows({vrows, type_v}, kvdim, v_wide, vrows);
        }
        ops::parallel_for(inner, Hkv, [&](size_t g0, size_t g1) {
            // The heads of one KV group read the same rows: one call per group reads each row once for all.
            ops::Scope local(b.ws.local());
            const std::span<float> heads = local.take<float>(group * D);
            for (size_t g = g0; g < g1; ++g) {
                const float * qg = &q[t * qdim + 2 * D * g * group];
                if (by_table) {
                    const ops::CacheTable kt{k_table.base + g * D * k_elem, k_table.stride, type_k};
                    const ops::CacheTable vt{v_table.base + g * D * v_elem, v_table.stride, type_v};
                    ops::attend_rows(qg, group, 2 * D, D, kt, vt, cells, kq_scale, heads.data(), D);
                } else {
                    ops::attend_heads(qg, group, 2 * D, D, K, V, g * D, kq_scale, heads.data(), D);
                }
                for (size_t hh = g * group; hh < (g + 1) * group; ++hh) {
                    const float * gate = &q[t * qdim + 2 * D * hh] + D;
                    const float * head = &heads[(hh - g * group) * D];
                    float * out = &attn[(t * H + hh) * D];
                    ops::sigmoid_n(gate, out, D);  // vector kernels with the scalar sigmoid's bits
                    for (size_t d = 0; d < D; ++d) out[d] *= head[d];
                }
            }
        });
    };

    auto attend_block = [&](size_t t0, size_t t1) {
        const memory::SeqView view = b.plan.seq_view(b.plan.tokens[t0].seq);
        size_t n_score = 0;  // pools the block scores: the most any of its sparse tokens sees
        size_t n_cells = 0;  // cells the block's tokens attend to at most
        for (size_t t = t0; t < t1; ++t) {
            const memory::TokenPlan & tp = b.plan.tokens[t];
            const bool sparse = qsa && !b.qsa_dense && tp.n_pools > budget;
            if (sparse) n_score = std::max<size_t>(n_score, tp.n_pools);
            n_cells = std::max<size_t>(n_cells, sparse ? budget * r + tp.tail.size() : tp.n_visible - tp.first_visible);
        }
        // The running thread's working space (a prompt's block scores n_pools x 16 floats).
        ops::Scope local(b.ws.local());
        const std::span<float> scores = local.take<float>((t1 - t0) * n_score);
        uint32_t * const scratch = local.take<uint32_t>(6 * n_score).data();
        uint32_t * const picked = local.take<uint32_t>(n_score > 0 ? budget : 0).data();
        uint32_t * const cells = local.take<uint32_t>(n_cells).data();
        if (n_score > 0) {
            const memory::PoolKeyTable in_order = common::pool_keys_of(pool_keys, b.plan.tokens[t0].seq);
            if (in_order.base) {
                // Whole blocks of 16 pools per range (the scan reads element-major blocks in one stream).
                constexpr size_t B = memory::kPoolKeyBlock;
                ops::parallel_for(inner, (n_score + B - 1) / B, [&](size_t b0, size_t b1) {
                    const size_t p0 = b0 * B, p1 = std::min(b1 * B, n_score);
                    ops::score_pool_blocks(&qi[t0 * Hi * Di], t1 - t0, Hi * Di, Hi, Di, in_order.block(b0), type_idx,
                                           p1 - p0, scores.data() + p0, n_score);
                }, 512 / B);
            } else {
                ops::parallel_for(inner, n_score, [&](size_t p0, size_t p1) {
                    ops::score_pool_rows(&qi[t0 * Hi * Di], t1 - t0, Hi * Di, Hi, Di, pooled, view.reps.data() + p0,
                                         p1 - p0, scores.data() + p0, n_score);
                }, 512);
            }
        }
        for (size_t t = t0; t < t1; ++t) {
            const memory::TokenPlan & tp = b.plan.tokens[t];
            size_t n = 0;
            if (!qsa || b.qsa_dense || tp.n_pools <= budget) {
                for (size_t j = tp.first_visible; j < tp.n_visible; ++j) cells[n++] = view.cells[j].cell;
            } else {
                const size_t n_picked = common::best_pools(&scores[(t - t0) * n_score], tp.n_pools, budget, scratch, picked);
                n = common::pool_cells(view, tp, static_cast<uint32_t>(r), std::span<const uint32_t>(picked, n_picked),
                                       true, cells);
            }
            attend_cells(t, std::span<const uint32_t>(cells, n));
        }
    };
    if (per_block_parallel) {
        ops::parallel_for(b.pool, blocks.size(), [&](size_t begin, size_t end) {
            for (size_t i = begin; i < end; ++i) attend_block(blocks[i].first, blocks[i].second);
        });
    } else {
        for (const auto & [t0, t1] : blocks) attend_block(t0, t1);
    }
    ops::matmul(w.o, attn.data(), T, y, b.pool);
    for (size_t i = 0; i < T * hp.n_embd; ++i) y[i] *= w.o_scale;
}

ops::WorkspaceSize attention_bytes(const Model & m, size_t T, size_t n_cells) {
    const Hparams & hp = m.hparams();
    const size_t D = hp.head_dim, H = hp.n_head, Hkv = hp.n_head_kv, qdim = 2 * D * H, kvdim = D * Hkv;
    const size_t Di = hp.idx_dim, Hi = hp.idx_heads, r = std::max<uint32_t>(1, hp.kpool);
    const size_t budget = hp.kpool > 0 ? hp.idx_top_k / r : 0;
    const size_t n_pools = hp.kpool > 0 ? n_cells / r : 0;
    constexpr size_t kQueryBlock = 16;
    // A block's working space (on whichever thread runs it) and the heads of a KV group; the new pools' sums.
    const size_t block = ops::arena_bytes<float>(kQueryBlock * n_pools) + ops::arena_bytes<uint32_t>(6 * n_pools) +
                         ops::arena_bytes<uint32_t>(budget) + ops::arena_bytes<uint32_t>(n_cells) +
                         ops::arena_bytes<float>((H / Hkv) * D);
    const size_t per_thread = std::max(block, 3 * ops::arena_bytes<float>(Di));
    const size_t main = ops::arena_bytes<float>(T * qdim) + 2 * ops::arena_bytes<float>(T * kvdim) +
                        ops::arena_bytes<float>(T * Di) + ops::arena_bytes<float>(T * Hi * Di) +
                        ops::arena_bytes<float>(T * D * H) + ops::arena_bytes<memory::PoolKeyTable>(2 * T) +
                        ops::arena_bytes<size_t>(2 * T) + ops::arena_bytes<float>(Di) + per_thread;
    return {main, per_thread};
}

}  // namespace offgrid::model::qwen4exp::detail
