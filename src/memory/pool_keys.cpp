// Pooled keys in pool order (Storage::pool_keys): a per-sequence copy of the pooled parts of the rep rows, so the
// QSA scan streams n_pools keys instead of reading one row part in every kpool rows, in element-major blocks of 16
// pools (PoolKeyTable) so that it reads element e of 16 pools as one vector. Kept in step lazily: every
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

namespace {

// Key k's dim elements from src into lane k % kPoolKeyBlock of its block (PoolKeyTable's layout).
template <class T>
void scatter_key(const uint8_t * src, size_t dim, size_t k, uint8_t * keys) {
    T * dst = reinterpret_cast<T *>(keys) + (k / kPoolKeyBlock) * dim * kPoolKeyBlock + k % kPoolKeyBlock;
    const T * from = reinterpret_cast<const T *>(src);
    for (size_t e = 0; e < dim; ++e) dst[e * kPoolKeyBlock] = from[e];
}

}  // namespace

PoolKeyTable HybridMemory::pool_keys(uint32_t attn_layer, SeqId seq) {
    if (pool_keys_.empty() || attn_layer >= pool_keys_.size() || seq < 0 || (uint32_t)seq >= params_.n_seq_max)
        return {};
    PoolKeys & pk = pool_keys_[attn_layer][seq];
    const std::vector<uint32_t> & reps = layout_.seq(seq).reps;
    const size_t part = kv_.idx_row_bytes() / params_.shape.idx_parts, at = kv_.idx_row_bytes() - part;
    const size_t elem = params_.shape.type_idx == tensor::ElemType::F32 ? 4 : 2, dim = part / elem;
    const size_t need = (reps.size() + kPoolKeyBlock - 1) / kPoolKeyBlock * kPoolKeyBlock * part;
    if (pk.keys.capacity() < need) pk.keys.reserve(std::max(need, 2 * pk.keys.capacity()));  // amortised growth
    pk.keys.resize(need);
    pk.valid = std::min(pk.valid, reps.size());
    for (size_t k = pk.valid; k < reps.size(); ++k) {
        const uint8_t * src = static_cast<const uint8_t *>(kv_.idx_row(attn_layer, reps[k])) + at;
        if (elem == 4) {
            scatter_key<uint32_t>(src, dim, k, pk.keys.data());
        } else {
            scatter_key<uint16_t>(src, dim, k, pk.keys.data());
        }
    }
    pk.valid = reps.size();
    return {pk.keys.data(), dim, elem};
}

}  // namespace offgrid::memory
