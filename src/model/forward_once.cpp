#include "model/forward_once.h"

#include <algorithm>
#include <vector>

#include "common/error.h"
#include "memory/plan_check.h"

namespace offgrid::model {

ForwardResult forward_once(const Architecture & model, const memory::CacheShape & shape, const memory::Plan & plan,
                           memory::Storage & storage, ops::ThreadPool * pool, const ForwardOptions & options) {
    if (shape != model.cache_shape(shape.type_k, shape.type_v)) {
        throw Error("forward: the cache shape does not match the model's");
    }
    std::vector<uint8_t> seen;
    memory::check_plan(plan, {model.n_vocab(), model.memory_traits().kpool}, seen);
    ForwardResult result;
    const size_t T = plan.tokens.size();
    if (T == 0) return result;
    WorkspaceLimits limits;
    limits.n_ubatch = static_cast<uint32_t>(T);
    limits.n_threads = pool ? pool->n_threads() : 1;
    for (const memory::TokenPlan & tp : plan.tokens) {
        limits.n_seq_cells = std::max<uint32_t>(limits.n_seq_cells, static_cast<uint32_t>(plan.seq_view(tp.seq).cells.size()));
    }
    ops::Workspace workspace(limits.n_threads, forward_workspace_size(model, limits));
    const ops::Workspace::Bind bind(workspace);
    size_t n_out = 0;
    for (const memory::TokenPlan & tp : plan.tokens) n_out += tp.output ? 1 : 0;
    ForwardContext fc{shape, plan, storage, pool, workspace, options.dense, {}};
    fc.first_layer = options.first_layer;
    fc.end_layer = options.end_layer;
    fc.carry_in = options.carry_in;
    if (options.end_layer != 0 && options.end_layer < model.n_layers()) {
        // A range ending early hands on its streams and computes no head.
        fc.out.carry = &result.carry;
        model.forward(fc);
        return result;
    }
    if (options.logits && n_out > 0) {
        result.logits.resize(n_out * model.n_vocab());
        fc.out.logits = result.logits.data();
    }
    if (options.hidden) {
        result.hidden.resize(T * model.hidden_width());
        fc.out.hidden = result.hidden.data();
    }
    if (options.wide_hidden && model.wide_hidden_width() > 0) {
        result.wide_hidden.resize(T * model.wide_hidden_width());
        fc.out.wide_hidden = result.wide_hidden.data();
    }
    model.forward(fc);
    return result;
}

}  // namespace offgrid::model
