// The glm5-next forward pass over one ubatch, on the memory's plan and storage (src/memory/plan.h).
#pragma once

#include <vector>

#include "memory/plan.h"
#include "model/architecture.h"
#include "model/glm5next/model.h"
#include "ops/thread_pool.h"

namespace offgrid::model::glm5next {

// Writes each token's latent (K row) and, on full-indexer layers, its indexer row [key | gate | 0], pools
// plan.new_pools into their rep rows, runs the KDA layers along the sequence groups (recurrent rows and their
// rollback snapshots), and returns the logits of the output tokens in ubatch order; with options.hidden also
// every token's hidden state: RMSNorm(mean of the hc streams) * output_norm, the vector the head multiplies (E
// floats, ubatch order). Attention reads only the selected cells: the top top_k/kpool visible pools by indexer score (all of
// them when options.dense or when there are no more) and the token's tail. Throws offgrid::Error for a plan
// the model cannot run.
ForwardResult forward_full(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool = nullptr,
                           const ForwardOptions & options = {});

// The pass of a context (Architecture::forward): fc.plan checked, fc.workspace sized by workspace_size().
void forward(const Model & model, const ForwardContext & fc);
ops::WorkspaceSize workspace_size(const Model & model, const WorkspaceLimits & limits);

std::vector<float> forward(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool = nullptr,
                           const ForwardOptions & options = {});

}  // namespace offgrid::model::glm5next
