// Re-rotation of cached keys after a position shift (the memory's seq_add / seq_div): K rows were stored roped
// at the old position; they are turned to the new one in place. Raw indexer keys are never roped, and pooled
// keys of shifted pools are re-pooled by the memory's plan, so only K rows change.
#pragma once

#include "memory/plan.h"
#include "model/qwen4exp/model.h"

namespace offgrid::model::qwen4exp {

// Rotates the K rows of `cell` in every full-attention layer from text position old_pos to new_pos (for the
// memory's HybridMemory::apply_pending_shifts callback). F16 rows are rounded again after the rotation.
void rerotate_keys(const Model & model, const memory::CacheShape & shape, memory::Storage & storage, uint32_t cell,
                   memory::Pos old_pos, memory::Pos new_pos);

}  // namespace offgrid::model::qwen4exp
