#include "model/architecture.h"

#include <string>

#include "common/error.h"

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
