// The batch one decode call takes, its validation (memory.md section 8) and its split into ubatches.
//
// Validation either returns a normalised batch (every field filled in) or throws offgrid::Error naming the token
// index and the broken rule; it never touches the memory. The memory splits with the equal split per sequence set
// of the reference (8.5), with its quirk Q5 fixed: a ubatch never holds more than n_ubatch tokens. The simple and
// sequence splits (8.4, 8.6) are here too.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "memory/plan.h"
#include "memory/seq_set.h"

namespace offgrid::memory {

// What a caller hands to decode. Only `tokens` is required.
struct Batch {
    std::vector<Token> tokens;
    std::vector<Pos> pos;                  // empty: each sequence continues at its pos_max + 1
    std::vector<std::vector<SeqId>> seqs;  // empty: every token belongs to sequence 0; else one list per token
    std::vector<uint8_t> output;           // empty: only the last token is output
    std::vector<Pos> pos_x, pos_y;         // optional 2-D (M-RoPE) positions; empty: the position (text)
};

// A batch after validation: every field present, one entry per token.
struct ValidBatch {
    std::vector<Token> tokens;
    std::vector<Pos> pos;
    std::vector<SeqSet> seqs;
    std::vector<SeqId> first;      // the first listed sequence id of each token
    std::vector<uint8_t> output;
    std::vector<Pos> pos_x, pos_y;
    size_t size() const { return tokens.size(); }
};

struct BatchLimits {
    uint32_t n_vocab = 0;    // 0: token ids are not range-checked
    uint32_t n_seq_max = 1;  // valid sequence ids are [0, n_seq_max)
    bool multi_pos = false;  // M-RoPE style positions: rule V4 instead of V5/V6
};

// The memory's view of a sequence before the batch: first and last position, -1 when empty.
struct SeqRange {
    Pos min = -1;
    Pos max = -1;
};
using SeqRangeFn = std::function<SeqRange(SeqId)>;

// Throws offgrid::Error ("batch: token I: rule: ...") on the first violated rule.
ValidBatch validate_batch(const Batch & batch, const BatchLimits & limits, const SeqRangeFn & memory_range);
// The same into `out`, whose buffers keep their capacity (the memory validates every call into one ValidBatch,
// so a steady decode step allocates nothing here). On an error `out` holds a partial batch.
void validate_batch(const Batch & batch, const BatchLimits & limits, const SeqRangeFn & memory_range,
                    ValidBatch & out);

// One ubatch, a view into its Split: token indices of the batch grouped by sequence set. Set k's tokens are
// idx[k * n_seq_tokens .. (k + 1) * n_seq_tokens), in batch order. `first` is the position of idx[0] in the
// split's tokens() (every ubatch's tokens back to back), which indexes per-token arrays of the whole split.
struct Ubatch {
    std::span<const uint32_t> idx;
    std::span<const SeqSet> sets;
    uint32_t n_seq_tokens = 0;
    size_t first = 0;
    size_t size() const { return idx.size(); }
};

// The ubatches of one batch, in flat buffers that keep their capacity from split to split (clear() keeps it).
// Ubatch views are valid until the next change of the Split.
class Split {
public:
    size_t size() const { return ranges_.size(); }
    bool empty() const { return ranges_.empty(); }
    Ubatch operator[](size_t k) const {
        const Range & r = ranges_[k];
        return Ubatch{std::span<const uint32_t>(idx_.data() + r.idx_begin, r.idx_end - r.idx_begin),
                      std::span<const SeqSet>(sets_.data() + r.sets_begin, r.sets_end - r.sets_begin), r.n_seq_tokens,
                      r.idx_begin};
    }
    std::span<const uint32_t> tokens() const { return idx_; }
    void clear() {
        idx_.clear();
        sets_.clear();
        ranges_.clear();
    }
    void reserve(size_t n_tokens) {
        idx_.reserve(n_tokens);
        sets_.reserve(n_tokens);
        ranges_.reserve(n_tokens);
    }
    // Building: start a ubatch, then add its sets and tokens.
    void start(uint32_t n_seq_tokens) {
        ranges_.push_back(Range{idx_.size(), idx_.size(), sets_.size(), sets_.size(), n_seq_tokens});
    }
    void add_set(const SeqSet & set) {
        sets_.push_back(set);
        ranges_.back().sets_end = sets_.size();
    }
    void add_token(uint32_t i) {
        idx_.push_back(i);
        ranges_.back().idx_end = idx_.size();
    }
    void set_n_seq_tokens(uint32_t n) { ranges_.back().n_seq_tokens = n; }

private:
    struct Range {
        size_t idx_begin, idx_end, sets_begin, sets_end;
        uint32_t n_seq_tokens;
    };
    std::vector<uint32_t> idx_;
    std::vector<SeqSet> sets_;
    std::vector<Range> ranges_;
};

// Working buffers of split_equal, kept by a caller that splits often (their capacity is reused).
struct SplitScratch {
    std::vector<SeqSet> sets;       // distinct sequence sets in order of first appearance
    std::vector<uint32_t> queue;    // the batch's tokens grouped by set, set after set
    std::vector<size_t> queue_at;   // where each set's tokens start in `queue` (one more entry: the end)
    std::vector<uint32_t> set_of;   // each token's set
    std::vector<size_t> used;       // tokens of each set already split
    std::vector<size_t> order, pick;
};

// Equal split. `separate_streams` refuses tokens shared by several sequences (each sequence lives in its own
// stream). keep_tail > 0 keeps the last keep_tail tokens of every sequence set in one ubatch. Returns false (and
// no ubatches) when the batch cannot be split; `why` then says why.
bool split_equal(const ValidBatch & batch, uint32_t n_ubatch, bool separate_streams, uint32_t keep_tail,
                 Split & out, std::string & why, SplitScratch & scratch);
bool split_equal(const ValidBatch & batch, uint32_t n_ubatch, bool separate_streams, uint32_t keep_tail,
                 Split & out, std::string & why);

// The reference's other two splits (memory.md 8.4 and 8.6). HybridMemory itself always uses split_equal (its
// recurrent groups need one set per group); these serve callers that place tokens without recurrent state.
//
// Simple split: the next up-to-n_ubatch tokens in batch order; every token is its own set (sets[k] is token k's
// sequence set, n_seq_tokens = 1), so a set may repeat within a ubatch.
bool split_simple(const ValidBatch & batch, uint32_t n_ubatch, Split & out, std::string & why);
// Sequence split (embeddings mode): a ubatch starts at the first unused token, whose set S becomes the current
// set, and takes each later unused token whose set is a subset of the current set, which then narrows to that
// token's set; at most n_ubatch tokens. One set per ubatch: sets = {S}, n_seq_tokens = the ubatch's size (the
// tokens' own, possibly narrower, sets are in the batch).
bool split_seq(const ValidBatch & batch, uint32_t n_ubatch, Split & out, std::string & why);

}  // namespace offgrid::memory
