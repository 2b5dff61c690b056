#include "model/architecture.h"

#include <string>

namespace offgrid::model {

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
