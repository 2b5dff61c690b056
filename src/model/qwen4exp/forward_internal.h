// Shared pieces of the forward pass (one file per block kind). Not part of the public interface.
#pragma once

#include <cstddef>
#include <vector>

#include "memory/plan.h"
#include "model/common/hyper_connections.h"
#include "model/qwen4exp/model.h"
#include "ops/thread_pool.h"
#include "ops/workspace.h"

namespace offgrid::model::qwen4exp::detail {

struct Batch {
    const Model & model;
    const Hparams & hp;
    const memory::CacheShape & shape;
    const memory::Plan & plan;
    memory::Storage & storage;
    ops::ThreadPool * pool;
    ops::Workspace & ws;     // every buffer of the pass comes from here (ws.local() on each thread)
    size_t n_tokens;
    bool qsa_dense = false;  // ForwardOptions::dense

    common::GatedHcShape hc_shape() const { return {hp.n_embd, hp.hc, hp.hc_lr, hp.rms_eps}; }
};

// Workspace bytes of each block for n tokens seeing at most n_cells cells: on the calling thread (main) and on
// every other pool thread (per_thread). The pass's total is the sum of its own buffers and the largest block.
ops::WorkspaceSize ple_bytes(const Model & m, size_t n);
ops::WorkspaceSize recurrent_bytes(const Model & m, size_t n);
ops::WorkspaceSize attention_bytes(const Model & m, size_t n, size_t n_cells);
ops::WorkspaceSize moe_bytes(const Hparams & hp, const MoeWeights & w, size_t n);

// PLE: each token's n-gram rows (n_tokens x Hp, head h's row within its head: hash mod V[h]), then the PLE
// block updating R in place.
void ple_rows(const Batch & b, uint32_t * rows);
void ple_block(const Batch & b, uint32_t il, const uint32_t * rows, float * R);

// Token mixers and the FFN: input a (n_tokens x E), output y (n_tokens x E).
void recurrent_layer(const Batch & b, uint32_t il, const float * a, float * y);
void attention_layer(const Batch & b, uint32_t il, const float * a, float * y);
void moe_layer(const Batch & b, uint32_t il, const float * f, float * y);
// The MoE FFN of any block (trunk layers, the MTP block) over T rows.
void moe_ffn(const Hparams & hp, const MoeWeights & m, ops::ThreadPool * pool, ops::Workspace & ws, size_t T,
             const float * f, float * y);

// Writes the state of the group's live row into the snapshot rows whose moment has come: snapshot k-1 holds
// the state before the last k tokens of the group, i.e. after `done` = n - k tokens. `copy(from, to)`
// copies one row's state.
template <typename Copy>
void snapshot_if_due(const memory::SeqGroup & g, size_t done, Copy copy) {
    const size_t n = g.tokens.size();
    for (size_t k = 1; k <= g.snapshots.size(); ++k) {
        if (k <= n && n - k == done) copy(g.row, g.snapshots[k - 1]);
    }
}

}  // namespace offgrid::model::qwen4exp::detail
