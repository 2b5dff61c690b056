#include "model/common/kpool_select.h"

#include <algorithm>

#include "common/error.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

namespace offgrid::model::common {

void pooled_keys(const memory::SeqView & view, const memory::TokenPlan & tp,
                 uint32_t kpool, memory::Storage & storage, uint32_t layer, size_t pooled_offset,
                 std::vector<const void *> & keys) {
    keys.resize(tp.n_pools);
    for (size_t p = 0; p < tp.n_pools; ++p) {
        const size_t first = view.pools[p];
        if (first + kpool > view.cells.size()) throw Error("forward: pool beyond its sequence's cells");
        const uint32_t rep = view.cells[first + kpool - 1].cell;
        keys[p] = static_cast<const uint8_t *>(storage.idx_row(layer, rep)) + pooled_offset;
    }
}

std::vector<uint32_t> best_pools(const float * scores, size_t n_pools, size_t budget) {
    std::vector<uint32_t> picked = ops::top_k(scores, n_pools, budget);
    std::sort(picked.begin(), picked.end());  // attend in sequence order
    return picked;
}

void pool_cells(const memory::SeqView & view, const memory::TokenPlan & tp, uint32_t kpool,
                const std::vector<uint32_t> & pools, bool with_tail, std::vector<uint32_t> & cells) {
    for (uint32_t p : pools) {
        for (size_t m = 0; m < kpool; ++m) cells.push_back(view.cells[view.pools[p] + m].cell);
    }
    if (with_tail) {
        for (size_t j = tp.tail.size(); j-- > 0;) cells.push_back(tp.tail[j]);  // oldest first
    }
}

void score_pools_weighted(const float * q, const float * w, size_t n_heads, size_t dim,
                          const std::vector<const void *> & keys, tensor::ElemType type, float * out) {
    std::vector<float> key(dim);
    for (size_t p = 0; p < keys.size(); ++p) {
        ops::load_cache_row(keys[p], type, key.data(), dim);
        float s = 0.0f;
        for (size_t h = 0; h < n_heads; ++h) {
            const float * qh = q + h * dim;
            float dot = 0.0f;
            for (size_t i = 0; i < dim; ++i) dot += qh[i] * key[i];
            s += ops::relu(dot) * w[h];
        }
        out[p] = s;
    }
}

}  // namespace offgrid::model::common
