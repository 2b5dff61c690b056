#include "model/architecture.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "ops/matmul.h"

namespace offgrid::model {

uint32_t checked_layer_end(const ForwardContext & fc, uint32_t n_layers, size_t carry_width) {
    const uint32_t first = fc.first_layer, end = fc.end_layer == 0 ? n_layers : fc.end_layer;
    if (first >= end || end > n_layers) {
        throw Error("forward: layer range [" + std::to_string(first) + ", " + std::to_string(end) +
                    ") is not inside the model's " + std::to_string(n_layers) + " layers");
    }
    const size_t T = fc.plan.tokens.size();
    if (first > 0 && (fc.carry_in == nullptr || fc.carry_in->streams.size() != T * carry_width)) {
        throw Error("forward: a range from layer " + std::to_string(first) + " needs the streams of " +
                    std::to_string(T) + " tokens");
    }
    if (end < n_layers && fc.out.carry == nullptr) {
        throw Error("forward: a range ending at layer " + std::to_string(end) + " needs somewhere to put its streams");
    }
    return end;
}

ops::WorkspaceSize forward_workspace_size(const Architecture & model, const WorkspaceLimits & limits) {
    const gguf::Reader & r = model.reader();
    std::vector<ops::WeightShape> weights;
    for (const gguf::TensorInfo & t : r.tensors()) {
        if (t.ne.size() >= 2) weights.push_back({t.type, t.ne[0]});
    }
    const uint32_t n_used = r.get_u32_opt(model.name() + ".expert_used_count").value_or(0);
    const int64_t tokens = std::max<int64_t>(1, limits.n_ubatch);
    return ops::nested(model.workspace_size(limits),
                       ops::matmul_workspace(weights, tokens, tokens * (static_cast<int64_t>(n_used) + 2)));
}

void check_in_span(const ForwardContext & fc, const LayerSpan & span, uint32_t n_layers) {
    if (span.whole()) return;
    const uint32_t end = fc.end_layer == 0 ? n_layers : fc.end_layer;
    if (fc.first_layer < span.first || end > span.end_of(n_layers)) {
        throw Error("forward: layer range [" + std::to_string(fc.first_layer) + ", " + std::to_string(end) +
                    ") is not inside the layers this process loaded, [" + std::to_string(span.first) + ", " +
                    std::to_string(span.end_of(n_layers)) + ")");
    }
}

uint64_t Architecture::weight_bytes_per_token() const {
    const gguf::Reader & r = reader();
    const std::string arch = name() + ".";
    const uint32_t n_expert = r.get_u32_opt(arch + "expert_count").value_or(0);
    const uint32_t n_used = r.get_u32_opt(arch + "expert_used_count").value_or(n_expert);
    uint64_t bytes = 0;
    for (const gguf::TensorInfo & t : r.tensors()) {
        const std::string_view name = t.name;
        if (name.ends_with("token_embd.weight")) continue;
        if (name.find("_exps.") != std::string_view::npos && n_expert > 0 && n_used <= n_expert) {
            bytes += t.n_bytes / n_expert * n_used;
        } else {
            bytes += t.n_bytes;
        }
    }
    return bytes;
}

}  // namespace offgrid::model
