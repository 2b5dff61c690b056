#include "model/common/kpool_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

namespace {

// A key whose unsigned order is the order of the scores: NaN as -inf, -0 as +0 (equal floats, equal keys).
inline uint32_t order_key(float v) {
    if (std::isnan(v)) v = -INFINITY;
    if (v == 0.0f) v = 0.0f;
    uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

}  // namespace

std::vector<uint32_t> best_pools(const float * scores, size_t n_pools, size_t budget) {
    std::vector<uint32_t> picked, scratch;
    best_pools(scores, n_pools, budget, scratch, picked);
    return picked;
}

void best_pools(const float * scores, size_t n_pools, size_t budget, std::vector<uint32_t> & scratch,
                std::vector<uint32_t> & picked) {
    picked.clear();
    if (budget >= n_pools) {
        for (size_t p = 0; p < n_pools; ++p) picked.push_back(static_cast<uint32_t>(p));
        return;
    }
    if (budget == 0) return;
    // The budget-th largest key is the threshold: every pool above it is taken, and of the pools equal to it
    // the lowest indices, until the budget is full. That is the set of the order (score descending, index
    // ascending), in sequence order. The threshold is found digit by digit from the top (11, 11, 10 bits) with
    // a histogram of the keys that still match the digits chosen so far (they are moved to the front of
    // `scratch`, so each pass reads only the candidates of the last).
    scratch.resize(n_pools);
    for (size_t p = 0; p < n_pools; ++p) scratch[p] = order_key(scores[p]);
    size_t n_cand = n_pools, need = budget;  // the threshold is the need-th largest candidate
    uint32_t prefix = 0;
    static constexpr int kShift[3] = {21, 10, 0}, kBits[3] = {11, 11, 10};
    uint32_t hist[1u << 11];
    for (int pass = 0; pass < 3; ++pass) {
        const int shift = kShift[pass];
        const uint32_t bins = 1u << kBits[pass], mask = bins - 1;
        std::fill(hist, hist + bins, 0u);
        for (size_t c = 0; c < n_cand; ++c) ++hist[(scratch[c] >> shift) & mask];
        uint32_t digit = bins - 1;
        for (;; --digit) {
            if (need <= hist[digit]) break;
            need -= hist[digit];
        }
        prefix |= digit << shift;
        size_t kept = 0;
        for (size_t c = 0; c < n_cand; ++c) {
            if (((scratch[c] >> shift) & mask) == digit) scratch[kept++] = scratch[c];
        }
        n_cand = kept;
    }
    // prefix is the threshold key; `need` of the pools equal to it are taken (the others are above it).
    const uint32_t threshold = prefix;
    size_t ties = need;
    picked.reserve(budget);
    for (size_t p = 0; p < n_pools; ++p) {
        const uint32_t k = order_key(scores[p]);
        if (k > threshold || (k == threshold && ties > 0 && ties--)) picked.push_back(static_cast<uint32_t>(p));
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
