// Pieces of the glm5-next forward (one file per block kind). Not part of the public interface.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "memory/plan.h"
#include "model/glm5next/model.h"
#include "ops/thread_pool.h"
#include "ops/workspace.h"

namespace offgrid::model::glm5next::detail {

struct Batch {
    const Model & model;
    const Hparams & hp;
    const memory::CacheShape & shape;
    const memory::Plan & plan;
    memory::Storage & storage;
    ops::ThreadPool * pool;
    ops::Workspace & ws;  // every buffer of the pass comes from here (ws.local() on each thread)
    size_t n_tokens;
    bool dense = false;   // ForwardOptions::dense
};

// Per ubatch token, the cells its DSA layers attend to (set by a full-indexer layer, reused by shared ones):
// token t's cells are cells[t * stride .. t * stride + count[t]). Taken from the workspace for the whole pass.
struct Selection {
    std::span<uint32_t> cells;
    std::span<uint32_t> count;
    size_t stride = 0;
    bool set = false;  // a full-indexer layer has filled it
    std::span<const uint32_t> of(size_t t) const { return cells.subspan(t * stride, count[t]); }
};
// Cells one token selects at most (the stride of a Selection) when it sees at most n_cells cells.
size_t selection_stride(const Hparams & hp, size_t n_cells, bool dense);
// The selection as a LayerCarry's side data and back (a pipeline stage hands it to the next, whose shared-indexer
// layers reuse it): empty when not set, else every token's count, then every token's cells. The reader's
// selection has the writer's stride (both derive it from the same plan); a side that does not fit it throws
// offgrid::Error.
void selection_to_side(const Selection & selection, size_t n_tokens, std::vector<uint32_t> & side);
void selection_from_side(const std::vector<uint32_t> & side, size_t n_tokens, Selection & selection);

// Workspace bytes of each block for n tokens seeing at most n_cells cells (calling thread, other threads).
ops::WorkspaceSize kda_bytes(const Hparams & hp, size_t n);
ops::WorkspaceSize dsa_bytes(const Hparams & hp, size_t n, size_t n_cells);
ops::WorkspaceSize ffn_bytes(const Model & m, size_t n);

// Token mixers and the FFN: input a (n_tokens x E), output y (n_tokens x E).
void kda_layer(const Batch & b, uint32_t il, const float * a, float * y);
void dsa_layer(const Batch & b, uint32_t il, const float * a, float * y, Selection & selection);
void ffn_layer(const Batch & b, uint32_t il, const float * f, float * y);

}  // namespace offgrid::model::glm5next::detail
