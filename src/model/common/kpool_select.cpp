#include "model/common/kpool_select.h"

#include <algorithm>
#include <cmath>
#include <functional>

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
    std::vector<uint32_t> picked;
    std::vector<float> scratch;
    best_pools(scores, n_pools, budget, scratch, picked);
    return picked;
}

void best_pools(const float * scores, size_t n_pools, size_t budget, std::vector<float> & scratch,
                std::vector<uint32_t> & picked) {
    picked.clear();
    if (budget >= n_pools) {
        for (size_t p = 0; p < n_pools; ++p) picked.push_back(static_cast<uint32_t>(p));
        return;
    }
    if (budget == 0) return;
    // NaN ranks as -inf (as ops::top_k). The budget-th largest key is the threshold: every pool above it is
    // taken, and of the pools equal to it the lowest indices, until the budget is full. That is the set of the
    // order (score descending, index ascending), found in O(n) and already in sequence order.
    auto key = [](float v) { return std::isnan(v) ? -INFINITY : v; };
    scratch.resize(n_pools);
    for (size_t p = 0; p < n_pools; ++p) scratch[p] = key(scores[p]);
    std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(budget - 1), scratch.end(),
                     std::greater<float>());
    const float threshold = scratch[budget - 1];
    size_t above = 0;
    for (size_t p = 0; p < n_pools; ++p) above += key(scores[p]) > threshold;
    size_t ties = budget - above;
    picked.reserve(budget);
    for (size_t p = 0; p < n_pools; ++p) {
        const float v = key(scores[p]);
        if (v > threshold || (v == threshold && ties > 0 && ties--)) picked.push_back(static_cast<uint32_t>(p));
    }
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
