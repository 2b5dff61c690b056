// K-pool selection shared by the sparse-attention models (the seed's design): a token scores the pooled keys of
// the pools visible to it, keeps the best `budget` whole pools and adds its incomplete tail. The memory's plan
// says which pools a token may select (TokenPlan::n_pools) and which cells are its tail; the model says how a
// pool is scored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "memory/plan.h"
#include "tensor/types.h"

namespace offgrid::model::common {

// Pointers to the pooled keys of the token's selectable pools: the rep row (last member) of each pool p <
// tp.n_pools, offset by `pooled_offset` bytes, in sequence order. Throws offgrid::Error for a pool beyond the
// sequence's cells.
void pooled_keys(const memory::SeqView & view, const memory::TokenPlan & tp,
                 uint32_t kpool, memory::Storage & storage, uint32_t layer, size_t pooled_offset,
                 std::vector<const void *> & keys);
// The same into keys[0 .. tp.n_pools).
void pooled_keys(const memory::SeqView & view, const memory::TokenPlan & tp,
                 uint32_t kpool, memory::Storage & storage, uint32_t layer, size_t pooled_offset,
                 const void ** keys);

// The best `budget` pools by score (ops::top_k: descending, ties to the lower index), returned in sequence order.
std::vector<uint32_t> best_pools(const float * scores, size_t n_pools, size_t budget);
// The same set, in O(n_pools) (the threshold by a radix selection, then one pass in sequence order; with many
// pools per budget the radix reads only the pools at or above a floor taken from a sample): `picked` is
// overwritten, `scratch` is working space the caller may reuse across calls.
void best_pools(const float * scores, size_t n_pools, size_t budget, std::vector<uint32_t> & scratch,
                std::vector<uint32_t> & picked);
// The same in the caller's memory: scratch holds 6 * n_pools entries, picked min(budget, n_pools); returns how
// many pools were picked.
size_t best_pools(const float * scores, size_t n_pools, size_t budget, uint32_t * scratch, uint32_t * picked);

// Appends the member cells of the given pools (sequence order within a pool), then the tail oldest first.
void pool_cells(const memory::SeqView & view, const memory::TokenPlan & tp, uint32_t kpool,
                const std::vector<uint32_t> & pools, bool with_tail, std::vector<uint32_t> & cells);
// The same written at cells (room for pools.size() * kpool cells and the tail); returns the count.
size_t pool_cells(const memory::SeqView & view, const memory::TokenPlan & tp, uint32_t kpool,
                  std::span<const uint32_t> pools, bool with_tail, uint32_t * cells);

// Weighted indexer scores (glm5-next): out[p] = sum_h relu(q_h . key_p) * w_h, heads in order, each dot product
// summed in index order in float. keys[p] points at dim elements of `type`.
void score_pools_weighted(const float * q, const float * w, size_t n_heads, size_t dim,
                          const std::vector<const void *> & keys, tensor::ElemType type, float * out);
// The same with `key` (dim floats) as working space.
void score_pools_weighted(const float * q, const float * w, size_t n_heads, size_t dim,
                          std::span<const void * const> keys, tensor::ElemType type, float * out, float * key);

}  // namespace offgrid::model::common
