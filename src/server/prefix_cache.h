// The prefix cache: a radix tree over token sequences whose nodes may hold a snapshot of one sequence's memory
// state (Context::state_get of a sequence that held exactly the node's tokens at positions 0..depth-1), taken
// where prompts end and at prefill chunk boundaries. A new prompt takes the deepest snapshot on its path, at any
// position; the rest is prefilled. Snapshots live in RAM under a byte budget, evicted least recently used first.
//
// Invariants: a node's depth is the length of the token path from the root; a snapshot restores a sequence to
// exactly that path; a snapshot taken at a prompt's end also keeps the logits of its last token, so an identical
// prompt needs no decode at all. Not thread-safe: the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace offgrid::server {

struct Snapshot {
    std::vector<uint8_t> state;  // one sequence's state (Context::state_get(seq))
    std::vector<float> logits;   // the last position's logits, or empty
    size_t bytes() const { return state.size() + logits.size() * sizeof(float); }
};

class PrefixCache {
public:
    explicit PrefixCache(size_t budget_bytes) : budget_(budget_bytes) {}
    ~PrefixCache();

    struct Hit {
        size_t length = 0;                     // tokens the snapshot covers (0: none)
        std::shared_ptr<const Snapshot> snap;  // null when length is 0
    };
    // The deepest snapshot whose path is a prefix of tokens and covers at most max_len tokens; one that covers
    // exactly max_len tokens counts only if it has logits (a decode needs at least one new token otherwise).
    Hit lookup(std::span<const int32_t> tokens, size_t max_len);
    // The length lookup would give, without counting as a use.
    size_t peek(std::span<const int32_t> tokens, size_t max_len) const;
    // How many leading tokens of `tokens` the tree knows (snapshot or not): where a new prompt leaves the paths
    // of earlier ones, the natural place for a snapshot that later prompts will share.
    size_t match_length(std::span<const int32_t> tokens) const;
    // Whether a snapshot at exactly this path exists (with logits, if asked).
    bool has(std::span<const int32_t> tokens, bool with_logits = false) const;
    // Stores a snapshot at the path `tokens` (replacing one there), then evicts down to the budget. A snapshot
    // larger than the whole budget is not kept.
    void insert(std::span<const int32_t> tokens, Snapshot snap);
    // Drops the snapshot at exactly this path (one that failed to restore); false when there is none.
    bool erase(std::span<const int32_t> tokens);
    void clear();
    // Every snapshot with its token path, least recently used first (for saving the cache to files).
    void for_each(const std::function<void(const std::vector<int32_t> &, const Snapshot &)> & fn) const;

    size_t bytes() const { return bytes_; }
    size_t entries() const { return entries_; }
    size_t budget() const { return budget_; }
    bool enabled() const { return budget_ > 0; }

private:
    struct Node {
        std::vector<int32_t> edge;  // tokens from the parent to this node
        std::map<int32_t, std::unique_ptr<Node>> children;  // by first token of their edge
        Node * parent = nullptr;
        std::shared_ptr<const Snapshot> snap;
        uint64_t last_use = 0;
    };
    const Node * deepest(std::span<const int32_t> tokens, size_t max_len, size_t & length) const;
    void evict();
    void prune(Node * n);
    void collect(Node * n, std::vector<Node *> & out);

    size_t budget_;
    size_t bytes_ = 0;
    size_t entries_ = 0;
    uint64_t clock_ = 0;
    Node root_;
};

}  // namespace offgrid::server
