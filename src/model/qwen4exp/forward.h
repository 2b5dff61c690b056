// The qwen4exp forward pass over one ubatch, on the memory's plan and storage (src/memory/plan.h).
#pragma once

#include <vector>

#include "memory/plan.h"
#include "model/architecture.h"
#include "model/qwen4exp/model.h"
#include "ops/thread_pool.h"

namespace offgrid::model::qwen4exp {

// Runs every token of the plan through the model: writes each token's K/V rows, raw indexer keys and the
// pooled keys of plan.new_pools into storage, reads and writes the groups' recurrent rows (and their
// rollback snapshots), and returns the logits of the tokens marked `output`, in ubatch order, n_vocab floats
// per row; with options.hidden also every token's hidden state: the mean of the hyper-connection streams after
// the last layer, before the output mixer (E floats per token, ubatch order). `shape` must be the model's cache_shape() the
// storage was created with. Activations are F32. Throws offgrid::Error for a plan the model cannot run (token
// id out of range, pool size mismatch, ...). Checks the plan and sizes a workspace of its own (forward_once).
ForwardResult forward_full(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool = nullptr,
                           const ForwardOptions & options = {});

// The pass of a context (Architecture::forward): fc.plan checked, fc.workspace sized by workspace_size().
void forward(const Model & model, const ForwardContext & fc);
ops::WorkspaceSize workspace_size(const Model & model, const WorkspaceLimits & limits);

// The logits only.
std::vector<float> forward(const Model & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool = nullptr,
                           const ForwardOptions & options = {});

}  // namespace offgrid::model::qwen4exp
