// The prefix cache: a radix tree over token sequences whose nodes may hold a snapshot of one sequence's memory
// state, taken where prompts end, where chat messages end, at prefill chunk boundaries and where prompts part. A
// new prompt takes the deepest snapshot on its path, at any position; the rest is prefilled. Snapshots live in
// RAM under a byte budget, evicted least recently used first.
//
// Cells stored once: a snapshot is either a whole sequence state (from == 0) or the tail of one since the snapshot
// below it on the same path (Context::state_get_tail: the cells at positions >= from and the recurrent state),
// restored by restoring its parent chain first. So the K, V and indexer rows of a path are held once, and each
// snapshot adds only its own cells plus what cannot be shared (the recurrent state, conv histories, books).
// The scheduler drops snapshots that a later one on the same lone path supersedes (lone_path), except pinned ones.
//
// Invariants: a node's depth is the length of the token path from the root; a snapshot restores a sequence to
// exactly that path; a tail's parent is cached, at the path of the tail's first `from` tokens, for as long as the
// tail is (a snapshot with dependents is never evicted nor replaced); a snapshot taken at a prompt's end also
// keeps the logits of its last token, so an identical prompt needs no decode at all. Not thread-safe: the
// scheduler thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

namespace offgrid::server {

struct Snapshot {
    std::vector<uint8_t> state;  // whole (Context::state_get) or a tail since `from` (Context::state_get_tail)
    std::vector<float> logits;   // the last position's logits, or empty
    size_t from = 0;             // the first position in `state`; the parent covers [0, from)
    std::shared_ptr<const Snapshot> parent;  // null when from == 0
    size_t row_bytes = 0;        // of `state`: the K, V and indexer rows of its cells (the rest: recurrent state, books)
    mutable uint32_t dependents = 0;  // cached tails whose parent this is (the cache's books)
    mutable bool cached = false;      // held by a PrefixCache
    // Kept when a later snapshot on its path supersedes it: a place where other requests are likely to part (the
    // end of a chat's first message, a place where a waiting request parts from a running prefill).
    mutable bool pinned = false;
    // Taken at a turn's end (prompt and reply): only the same conversation's next turn is likely to restore it, and
    // only when that turn gives the reply back token for token.
    bool turn_end = false;
    size_t bytes() const { return state.size() + logits.size() * sizeof(float); }
    // The chain to restore, whole state first.
    std::vector<const Snapshot *> chain() const {
        std::vector<const Snapshot *> out;
        for (const Snapshot * p = this; p; p = p->parent.get()) out.insert(out.begin(), p);
        return out;
    }
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
    // Whether the tree below the node at exactly `at` is one path that `toward` (a longer or shorter path through
    // `at`) follows: no other prompt parts from it below `at`, so a snapshot at `at` is superseded by one further
    // along `toward`. False when there is no node at `at`.
    bool lone_path(std::span<const int32_t> at, std::span<const int32_t> toward) const;
    // Whether a snapshot at exactly this path exists (with logits, if asked).
    bool has(std::span<const int32_t> tokens, bool with_logits = false) const;
    // Stores a snapshot at the path `tokens`, then evicts down to the budget. Returns the snapshot now at the path:
    // the new one, or the one already there when that one has tails depending on it (the same state: restores are
    // exact); null when the new one is not kept (larger than the budget, its parent no longer cached, or evicted
    // at once).
    std::shared_ptr<const Snapshot> insert(std::span<const int32_t> tokens, Snapshot snap);
    // The snapshot at exactly this path, or null.
    std::shared_ptr<const Snapshot> find(std::span<const int32_t> tokens) const;
    // Drops the snapshot at exactly this path (one that failed to restore) and every tail that depends on it;
    // false when there is none.
    bool erase(std::span<const int32_t> tokens);
    // Where `tokens` leaves the tree, drops the turn ends it passes by: a branch it does not follow whose one
    // snapshot is a turn end with no tails, not pinned (a conversation's next turn that did not give its reply back
    // token for token: the generated path is not followed again, and the place it parts from stays a branch point
    // while it is cached). Returns how many were dropped.
    size_t drop_passed_turn_ends(std::span<const int32_t> tokens);
    void clear();
    // Every snapshot with its token path, least recently used first (for saving the cache to files).
    void for_each(const std::function<void(const std::vector<int32_t> &, const Snapshot &)> & fn) const;

    size_t bytes() const { return bytes_; }
    size_t row_bytes() const { return row_bytes_; }        // K, V and indexer rows
    size_t logits_bytes() const { return logits_bytes_; }
    // The rest of bytes(): recurrent states, conv histories, cell books and state headers.
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
    Node * exact(std::span<const int32_t> tokens) const;
    void evict();
    void drop(Node * n);      // forgets n's snapshot (the books); the node stays until compact()
    void compact(Node * n);   // removes empty leaves and merges snapshot-less single children, below n
    void collect(Node * n, std::vector<Node *> & out);

    size_t budget_;
    size_t bytes_ = 0, row_bytes_ = 0, logits_bytes_ = 0;
    size_t entries_ = 0;
    uint64_t clock_ = 0;
    Node root_;
};

}  // namespace offgrid::server
