// Pooled keys in pool order (Storage::pool_keys): a per-sequence copy of the pooled parts of the rep rows, so the
// QSA scan streams n_pools keys instead of reading one row part in every kpool rows. Kept in step lazily: every
// event that can change a sequence's pools or a pooled key lowers the valid prefix (relayout, clear, a pool handed
// to the model to (re)pool), and pool_keys copies what is past it. The rows stay the keys' one true home (states
// save the rows; the copy is rebuilt from them).
#include <algorithm>
#include <cstring>

#include "memory/hybrid_memory.h"

namespace offgrid::memory {

void HybridMemory::forget_pool_keys(SeqId s, size_t from) {
    if (s < 0 || (uint32_t)s >= params_.n_seq_max) return;
    for (auto & layer : pool_keys_) layer[s].valid = std::min(layer[s].valid, from);
}

void HybridMemory::forget_repooled_keys(uint32_t rep) {
    if (pool_keys_.empty()) return;
    const uint32_t st = rep / kv_.kv_size(), local = rep % kv_.kv_size();
    const CellStream & cs = kv_.stream(st);
    const SeqSet & set = cs.seqs(local);
    for (size_t q = set._Find_first(); q < set.size(); q = set._Find_next(q)) {
        const int64_t k = layout_.pool_of((SeqId)q, layout_.rank((SeqId)q, cs.pos(local), rep));
        forget_pool_keys((SeqId)q, k < 0 ? 0 : (size_t)k);
    }
}

RowTable HybridMemory::pool_keys(uint32_t attn_layer, SeqId seq) {
    if (pool_keys_.empty() || attn_layer >= pool_keys_.size() || seq < 0 || (uint32_t)seq >= params_.n_seq_max)
        return {};
    PoolKeys & pk = pool_keys_[attn_layer][seq];
    const std::vector<uint32_t> & reps = layout_.seq(seq).reps;
    const size_t part = kv_.idx_row_bytes() / params_.shape.idx_parts, at = kv_.idx_row_bytes() - part;
    const size_t need = reps.size() * part;
    if (pk.keys.capacity() < need) pk.keys.reserve(std::max(need, 2 * pk.keys.capacity()));  // amortised growth
    pk.keys.resize(need);
    pk.valid = std::min(pk.valid, reps.size());
    for (size_t k = pk.valid; k < reps.size(); ++k)
        std::memcpy(pk.keys.data() + k * part, kv_.idx_row(attn_layer, reps[k]) + at, part);
    pk.valid = reps.size();
    return {pk.keys.data(), part};
}

}  // namespace offgrid::memory
