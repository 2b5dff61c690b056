#include "model/common/kpool_select.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "common/error.h"
#include "common/prefetch.h"
#include "ops/attention.h"
#include "ops/elementwise.h"

namespace offgrid::model::common {

void pooled_keys(const memory::SeqView & view, const memory::TokenPlan & tp,
                 uint32_t kpool, memory::Storage & storage, uint32_t layer, size_t pooled_offset,
                 std::vector<const void *> & keys) {
    keys.resize(tp.n_pools);
    pooled_keys(view, tp, kpool, storage, layer, pooled_offset, keys.data());
}

void pooled_keys(const memory::SeqView & view, const memory::TokenPlan & tp,
                 uint32_t kpool, memory::Storage & storage, uint32_t layer, size_t pooled_offset,
                 const void ** keys) {
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

namespace {

// The radix selection over order keys (best_pools' contract, positions in [0, n) for scores): `keys` holds the n
// keys, `scratch` at least 3 * n entries of working space.
size_t select_keys(const uint32_t * keys, size_t n, size_t budget, uint32_t * scratch, uint32_t * picked) {
    // The budget-th largest key is the threshold: every pool above it is taken, and of the pools equal to it
    // the lowest indices, until the budget is full. That is the set of the order (score descending, index
    // ascending), in sequence order. The threshold is found digit by digit from the top (11, 11, 10 bits) with a
    // histogram of the keys that still match the digits chosen so far. The one pass over all pools after the
    // first digit splits them into those above it (taken whatever the later digits) and those equal to it (the
    // candidates); the later digits and the final choice read only the candidates, and the two lists (both in
    // sequence order) are merged. The first histogram is kept four times over (pool p in copy p % 4): the top
    // digit of similar scores is mostly the same, and one copy would make every increment wait for the last.
    uint32_t * sure = scratch, * cand = scratch + n, * work = scratch + 2 * n;
    uint32_t hist4[4][1u << 11] = {};
    size_t p = 0;
    for (; p + 4 <= n; p += 4) {
        ++hist4[0][keys[p] >> 21];
        ++hist4[1][keys[p + 1] >> 21];
        ++hist4[2][keys[p + 2] >> 21];
        ++hist4[3][keys[p + 3] >> 21];
    }
    for (; p < n; ++p) ++hist4[0][keys[p] >> 21];
    uint32_t * hist = hist4[0];
    for (size_t b = 0; b < (1u << 11); ++b) hist[b] += hist4[1][b] + hist4[2][b] + hist4[3][b];
    size_t need = budget;  // the threshold is the need-th largest candidate
    auto choose = [&](uint32_t bins) {
        uint32_t d = bins - 1;
        for (;; --d) {
            if (need <= hist[d]) break;
            need -= hist[d];
        }
        return d;
    };
    const uint32_t top = choose(1u << 11);
    // Each index is written at the next place of both lists and kept in the one it belongs to (no branch).
    size_t n_sure = 0, n_cand = 0;
    for (size_t q = 0; q < n; ++q) {
        const uint32_t d = keys[q] >> 21;
        sure[n_sure] = cand[n_cand] = static_cast<uint32_t>(q);
        n_sure += d > top;
        n_cand += d == top;
    }
    // The lower digits over the candidates' keys (work: those matching the digits so far).
    for (size_t c = 0; c < n_cand; ++c) work[c] = keys[cand[c]];
    uint32_t prefix = top << 21;
    size_t n_work = n_cand;
    static constexpr int kShift[2] = {10, 0}, kBits[2] = {11, 10};
    for (int pass = 0; pass < 2; ++pass) {
        const int shift = kShift[pass];
        const uint32_t bins = 1u << kBits[pass], mask = bins - 1;
        std::fill(hist, hist + bins, 0u);
        for (size_t c = 0; c < n_work; ++c) ++hist[(work[c] >> shift) & mask];
        const uint32_t d = choose(bins);
        prefix |= d << shift;
        size_t kept = 0;
        for (size_t c = 0; c < n_work; ++c) {
            work[kept] = work[c];
            kept += ((work[c] >> shift) & mask) == d;
        }
        n_work = kept;
    }
    // prefix is the threshold key; `need` of the pools equal to it are taken. Of the candidates: those above it,
    // and the first `need` equal to it, in sequence order, merged with the sure ones.
    const uint32_t threshold = prefix;
    size_t ties = need, n_taken = 0;
    for (size_t c = 0; c < n_cand; ++c) {
        const uint32_t k = keys[cand[c]];
        work[n_taken] = cand[c];
        n_taken += k > threshold;
        if (k == threshold && ties > 0) [[unlikely]] {
            --ties;
            ++n_taken;
        }
    }
    std::merge(sure, sure + n_sure, work, work + n_taken, picked);
    return n_sure + n_taken;
}

// Sampling pays once the pools are many times the budget (a decode at depth: 16384 pools, budget 512).
constexpr size_t kSampleStride = 16, kSampleMinPools = 2048, kSampleMinRatio = 8;

}  // namespace

void best_pools(const float * scores, size_t n_pools, size_t budget, std::vector<uint32_t> & scratch,
                std::vector<uint32_t> & picked) {
    scratch.resize(6 * n_pools);
    picked.resize(std::min(budget, n_pools));
    picked.resize(best_pools(scores, n_pools, budget, scratch.data(), picked.data()));
}

size_t best_pools(const float * scores, size_t n_pools, size_t budget, uint32_t * scratch, uint32_t * picked) {
    if (budget >= n_pools) {
        for (size_t p = 0; p < n_pools; ++p) picked[p] = static_cast<uint32_t>(p);
        return n_pools;
    }
    if (budget == 0) return 0;
    // keys, then three lists for select_keys over all pools, or (sampled) the candidates' indices and keys and
    // select_keys' three lists over those.
    uint32_t * keys = scratch;
    for (size_t p = 0; p < n_pools; ++p) keys[p] = order_key(scores[p]);
    if (n_pools >= kSampleMinPools && n_pools >= kSampleMinRatio * budget) {
        // A floor from a sample: the j-th largest of every kSampleStride-th key, with j chosen so that about
        // 1.25 budgets plus a margin of keys lie at or above it. Every pool of the selection has a key at least
        // the budget-th largest, so when at least `budget` keys are >= the floor the selection is among them (in
        // sequence order, so ties still go to the lower index) and the radix reads those few. A short sample
        // (about 1 time in 1000 at the bench shape) falls through to the full selection: same set either way.
        uint32_t * sample = scratch + n_pools;
        const size_t n_sample = n_pools / kSampleStride;
        for (size_t i = 0; i < n_sample; ++i) sample[i] = keys[i * kSampleStride + kSampleStride / 2];
        const size_t j = std::min(n_sample, budget / kSampleStride + budget / (4 * kSampleStride) + 16);
        std::nth_element(sample, sample + (j - 1), sample + n_sample, std::greater<uint32_t>());
        const uint32_t floor_key = sample[j - 1];
        uint32_t * idx = scratch + n_pools, * ckeys = idx + n_pools;
        size_t n_cand = 0;
        for (size_t p = 0; p < n_pools; ++p) {  // no branch: each index written, kept when at or above the floor
            idx[n_cand] = static_cast<uint32_t>(p);
            ckeys[n_cand] = keys[p];
            n_cand += keys[p] >= floor_key;
        }
        if (n_cand >= budget) {
            const size_t n_picked = select_keys(ckeys, n_cand, budget, ckeys + n_cand, picked);
            for (size_t k = 0; k < n_picked; ++k) picked[k] = idx[picked[k]];
            return n_picked;
        }
    }
    return select_keys(keys, n_pools, budget, scratch + n_pools, picked);
}

void pool_cells(const memory::SeqView & view, const memory::TokenPlan & tp, uint32_t kpool,
                const std::vector<uint32_t> & pools, bool with_tail, std::vector<uint32_t> & cells) {
    const size_t base = cells.size();
    cells.resize(base + pools.size() * kpool + (with_tail ? tp.tail.size() : 0));
    pool_cells(view, tp, kpool, pools, with_tail, cells.data() + base);
}

size_t pool_cells(const memory::SeqView & view, const memory::TokenPlan & tp, uint32_t kpool,
                  std::span<const uint32_t> pools, bool with_tail, uint32_t * cells) {
    // The view's arrays are read at scattered places and a decode step's weights have pushed them out of the
    // caches since the last layer: each pool's entries are requested a few pools ahead (its first-cell index
    // further ahead, since the cells' address depends on it).
    constexpr size_t kAheadIndex = 16, kAheadCells = 8;
    const size_t n = pools.size(), base = 0;
    for (size_t i = 0; i < n; ++i) {
        if (i + kAheadIndex < n) prefetch_read(&view.pools[pools[i + kAheadIndex]]);
        if (i + kAheadCells < n) prefetch_read(&view.cells[view.pools[pools[i + kAheadCells]]]);
        const memory::PosCell * pc = &view.cells[view.pools[pools[i]]];
        for (size_t m = 0; m < kpool; ++m) cells[base + i * kpool + m] = pc[m].cell;
    }
    size_t at = n * kpool;
    if (with_tail) {
        for (size_t j = tp.tail.size(); j-- > 0;) cells[at++] = tp.tail[j];  // oldest first
    }
    return at;
}

void score_pools_weighted(const float * q, const float * w, size_t n_heads, size_t dim,
                          const std::vector<const void *> & keys, tensor::ElemType type, float * out) {
    std::vector<float> key(dim);
    score_pools_weighted(q, w, n_heads, dim, keys, type, out, key.data());
}

void score_pools_weighted(const float * q, const float * w, size_t n_heads, size_t dim,
                          std::span<const void * const> keys, tensor::ElemType type, float * out, float * key) {
    for (size_t p = 0; p < keys.size(); ++p) {
        ops::load_cache_row(keys[p], type, key, dim);
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
