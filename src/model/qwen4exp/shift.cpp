#include "model/qwen4exp/shift.h"

#include <vector>

#include "ops/attention.h"
#include "ops/rope.h"

namespace offgrid::model::qwen4exp {

void rerotate_keys(const Model & model, const memory::CacheShape & shape, memory::Storage & storage, uint32_t cell,
                   memory::Pos old_pos, memory::Pos new_pos) {
    const uint32_t n_attn = model.hparams().n_attn_layers();
    if (old_pos == new_pos || n_attn == 0) return;
    const Hparams & hp = model.hparams();
    ops::RopeParams p;
    p.n_rot = static_cast<int>(hp.n_rot);
    p.sections = hp.rope_sections;
    p.freq_base = hp.rope_freq_base;
    p.freq_scale = hp.rope_freq_scale;
    p.attn_factor = 1.0f;  // a pure rotation: the attention factor was applied when the key was stored
    const ops::RopeAngles from = ops::rope_angles(p, {old_pos, old_pos, old_pos, 0});
    const ops::RopeAngles to = ops::rope_angles(p, {new_pos, new_pos, new_pos, 0});
    const size_t D = hp.head_dim, half = hp.n_rot / 2;
    std::vector<float> row(D * hp.n_head_kv);  // a K row: every KV head
    for (uint32_t l = 0; l < n_attn; ++l) {
        if (storage.k_rows(l).stride == 0) continue;  // a layer whose rows this memory does not hold (a pipeline rank)
        void * k = storage.k_row(l, cell);
        ops::load_cache_row(k, shape.type_k, row.data(), row.size());
        for (size_t h = 0; h < hp.n_head_kv; ++h) {
            float * x = row.data() + h * D;
            for (size_t i = 0; i < half; ++i) {
                // Undo the old rotation, then apply the new one.
                const float a = x[i] * from.cos[i] + x[i + half] * from.sin[i];
                const float b = -x[i] * from.sin[i] + x[i + half] * from.cos[i];
                x[i] = a * to.cos[i] - b * to.sin[i];
                x[i + half] = a * to.sin[i] + b * to.cos[i];
            }
        }
        ops::store_cache_row(k, shape.type_k, row.data(), row.size());
    }
}

}  // namespace offgrid::model::qwen4exp
