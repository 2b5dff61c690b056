// How a model's trunk layers are cut into contiguous ranges, one per pipeline rank (docs/distributed.md).
// MPI-free: parsing, balancing and the per-rank byte accounting are plain functions of the file's tensor table.
//
// Invariants of a Split returned here:
//  1. ranges.size() is the number of ranks, every range is non-empty, range r ends where range r + 1 begins,
//     the first begins at 0 and the last ends at n_layers.
//  2. The rank that holds a layer holds all of that layer's tensors (blk.<il>.*) and caches; the first rank also
//     holds the tensors outside any layer read before the trunk (token embeddings, PLE tables), the last rank
//     the ones read after it (output norm, head, MTP blocks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/reader.h"

namespace offgrid::distributed {

struct LayerRange {
    uint32_t first = 0;  // first layer
    uint32_t end = 0;    // one past the last layer
    bool operator==(const LayerRange &) const = default;
};

struct Split {
    std::vector<LayerRange> ranges;  // one per rank
    std::string describe() const;    // "0-11,12-23" (inclusive, the --split syntax)
};

// The trunk layers a split shares: ARCH.block_count less ARCH.nextn_predict_layers (the MTP blocks, which stay
// with the head). Throws offgrid::Error naming the key when it is missing or inconsistent.
uint32_t trunk_layers(const gguf::Reader & reader);

// "0-11,12-23": inclusive ranges, one per rank, in rank order. Throws offgrid::Error naming what is wrong (syntax,
// a gap or overlap, a range past the last layer, a count that is not n_ranks).
Split parse_split(const std::string & text, uint32_t n_layers, int n_ranks);

// Bytes each rank's share of the weights takes: per layer, the sum of its blk.<il>.* tensors; the token embedding
// tables (token_embd*) count with the first rank, every other tensor outside the trunk (head, norms, PLE tables,
// MTP / NextN blocks, blk.<il> with il >= n_layers) with the last. A balance, not an exact account of who reads
// what: the PLE tables are read by the rank of the PLE layer.
struct WeightBytes {
    std::vector<uint64_t> layer;   // n_layers entries
    uint64_t before = 0;           // the first rank's extra: the embedding tables
    uint64_t after = 0;            // the last rank's extra: everything else outside the trunk
};
WeightBytes weight_bytes(const gguf::Reader & reader, uint32_t n_layers);
// Bytes of rank r's share under `split`.
uint64_t rank_bytes(const WeightBytes & w, const Split & split, size_t rank);

// Balances n_ranks contiguous ranges so that each rank's share of the weight bytes is proportional to its
// capacity (bytes of memory it has; all equal: equal shares). Minimises the largest share / capacity ratio.
// Throws offgrid::Error when there are fewer layers than ranks or a capacity is 0.
Split auto_split(const WeightBytes & w, const std::vector<uint64_t> & capacity);

// Empty when every rank's share fits its capacity, else one line naming the first rank that cannot hold its share
// (its bytes and its capacity). A capacity of 0 means unknown and always fits.
std::string check_fits(const WeightBytes & w, const Split & split, const std::vector<uint64_t> & capacity);
// The line check_fits gives for rank `rank` holding `range`, whose share takes `need` bytes of its `capacity`.
std::string share_refusal(size_t rank, const LayerRange & range, uint64_t need, uint64_t capacity);

}  // namespace offgrid::distributed
