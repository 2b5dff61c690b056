#include "server/prefix_cache.h"

#include <algorithm>

namespace offgrid::server {

PrefixCache::~PrefixCache() = default;

namespace {

// Tokens shared by an edge and the rest of a path, from the edge's start.
size_t common(const std::vector<int32_t> & edge, std::span<const int32_t> rest) {
    const size_t n = std::min(edge.size(), rest.size());
    size_t i = 0;
    while (i < n && edge[i] == rest[i]) ++i;
    return i;
}

}  // namespace

const PrefixCache::Node * PrefixCache::deepest(std::span<const int32_t> tokens, size_t max_len, size_t & length) const {
    const Node * best = nullptr;
    const Node * n = &root_;
    size_t depth = 0;
    length = 0;
    while (depth < tokens.size()) {
        auto it = n->children.find(tokens[depth]);
        if (it == n->children.end()) break;
        const Node * c = it->second.get();
        const size_t k = common(c->edge, tokens.subspan(depth));
        if (k < c->edge.size()) break;  // the path leaves this edge: the child's snapshot is of other tokens
        depth += k;
        n = c;
        if (depth > max_len) break;
        if (n->snap && (depth < max_len || !n->snap->logits.empty())) {
            best = n;
            length = depth;
        }
    }
    return best;
}

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> tokens, size_t max_len) {
    size_t length = 0;
    Node * n = const_cast<Node *>(deepest(tokens, max_len, length));
    if (!n) return {};
    n->last_use = ++clock_;
    return {length, n->snap};
}

size_t PrefixCache::peek(std::span<const int32_t> tokens, size_t max_len) const {
    size_t length = 0;
    deepest(tokens, max_len, length);
    return length;
}

size_t PrefixCache::match_length(std::span<const int32_t> tokens) const {
    const Node * n = &root_;
    size_t depth = 0;
    while (depth < tokens.size()) {
        auto it = n->children.find(tokens[depth]);
        if (it == n->children.end()) break;
        const Node * c = it->second.get();
        const size_t k = common(c->edge, tokens.subspan(depth));
        depth += k;
        if (k < c->edge.size()) break;
        n = c;
    }
    return depth;
}

PrefixCache::Node * PrefixCache::exact(std::span<const int32_t> tokens) const {
    const Node * n = &root_;
    size_t depth = 0;
    while (depth < tokens.size()) {
        auto it = n->children.find(tokens[depth]);
        if (it == n->children.end()) return nullptr;
        const Node * c = it->second.get();
        const size_t k = common(c->edge, tokens.subspan(depth));
        if (k < c->edge.size()) return nullptr;
        depth += k;
        n = c;
    }
    return n == &root_ ? nullptr : const_cast<Node *>(n);
}

bool PrefixCache::lone_path(std::span<const int32_t> at, std::span<const int32_t> toward) const {
    const Node * n = exact(at);
    if (!n) return false;
    size_t depth = at.size();
    while (!n->children.empty()) {
        if (n->children.size() > 1) return false;
        const Node * c = n->children.begin()->second.get();
        // The path below must be `toward` as far as both go.
        const size_t k = depth < toward.size() ? common(c->edge, toward.subspan(depth)) : 0;
        if (depth + k < std::min(depth + c->edge.size(), toward.size())) return false;
        depth += c->edge.size();
        n = c;
    }
    return true;
}

bool PrefixCache::has(std::span<const int32_t> tokens, bool with_logits) const {
    const Node * n = exact(tokens);
    return n && n->snap && (!with_logits || !n->snap->logits.empty());
}

std::shared_ptr<const Snapshot> PrefixCache::find(std::span<const int32_t> tokens) const {
    const Node * n = exact(tokens);
    return n ? n->snap : nullptr;
}

std::shared_ptr<const Snapshot> PrefixCache::insert(std::span<const int32_t> tokens, Snapshot snap) {
    if (tokens.empty() || snap.bytes() > budget_) return nullptr;
    if (snap.parent && (!snap.parent->cached || snap.from == 0 || snap.from >= tokens.size())) return nullptr;
    if (!snap.parent && snap.from != 0) return nullptr;
    Node * n = &root_;
    size_t depth = 0;
    while (depth < tokens.size()) {
        const auto rest = tokens.subspan(depth);
        auto it = n->children.find(rest[0]);
        if (it == n->children.end()) {
            auto leaf = std::make_unique<Node>();
            leaf->edge.assign(rest.begin(), rest.end());
            leaf->parent = n;
            Node * raw = leaf.get();
            n->children.emplace(rest[0], std::move(leaf));
            n = raw;
            depth = tokens.size();
            break;
        }
        Node * c = it->second.get();
        const size_t k = common(c->edge, rest);
        if (k < c->edge.size()) {
            // Split the edge at k: a middle node takes the shared part, the old child keeps the rest.
            auto mid = std::make_unique<Node>();
            mid->edge.assign(c->edge.begin(), c->edge.begin() + static_cast<std::ptrdiff_t>(k));
            mid->parent = n;
            std::unique_ptr<Node> old = std::move(it->second);
            old->edge.erase(old->edge.begin(), old->edge.begin() + static_cast<std::ptrdiff_t>(k));
            old->parent = mid.get();
            mid->children.emplace(old->edge[0], std::move(old));
            Node * raw = mid.get();
            it->second = std::move(mid);
            c = raw;
        }
        depth += k;
        n = c;
    }
    if (n->snap) {
        if (n->snap->dependents > 0) {  // tails restore through it: it stays (the new one is the same state)
            n->last_use = ++clock_;
            return n->snap;
        }
        drop(n);
    }
    auto kept = std::make_shared<const Snapshot>(std::move(snap));
    kept->cached = true;
    if (kept->parent) ++kept->parent->dependents;
    bytes_ += kept->bytes();
    row_bytes_ += kept->row_bytes;
    logits_bytes_ += kept->logits.size() * sizeof(float);
    ++entries_;
    n->snap = kept;
    n->last_use = ++clock_;
    evict();
    return kept->cached ? kept : nullptr;
}

void PrefixCache::drop(Node * n) {
    const Snapshot & s = *n->snap;
    bytes_ -= s.bytes();
    row_bytes_ -= s.row_bytes;
    logits_bytes_ -= s.logits.size() * sizeof(float);
    --entries_;
    s.cached = false;
    if (s.parent) --s.parent->dependents;
    n->snap.reset();
}

bool PrefixCache::erase(std::span<const int32_t> tokens) {
    Node * n = exact(tokens);
    if (!n || !n->snap) return false;
    const Snapshot * target = n->snap.get();
    // Its tails lie below it in the tree (a tail's parent is at a prefix of its path); deepest first, so every
    // tail goes before the snapshot it depends on.
    std::vector<Node *> below;
    collect(n, below);
    std::sort(below.begin(), below.end(), [](const Node * a, const Node * b) { return a->snap->from > b->snap->from; });
    for (Node * b : below) {
        bool depends = false;
        for (const Snapshot * p = b->snap.get(); p; p = p->parent.get()) depends = depends || p == target;
        if (depends) drop(b);
    }
    compact(&root_);
    return true;
}

size_t PrefixCache::drop_passed_turn_ends(std::span<const int32_t> tokens) {
    // The node where `tokens` parts from the tree, and the branches it does not follow there.
    Node * n = &root_;
    size_t pos = 0;
    std::vector<Node *> passed;
    while (true) {
        if (pos == tokens.size()) return 0;  // the tokens end inside the tree: nothing is passed by
        auto it = n->children.find(tokens[pos]);
        if (it == n->children.end()) {
            for (auto & [t, c] : n->children) passed.push_back(c.get());
            break;
        }
        Node * c = it->second.get();
        const size_t k = common(c->edge, tokens.subspan(pos));
        if (k < c->edge.size()) {
            if (pos + k < tokens.size()) passed.push_back(c);  // parts inside the edge: c's subtree is passed by
            break;
        }
        pos += k;
        n = c;
    }
    size_t dropped = 0;
    for (Node * b : passed) {
        std::vector<Node *> snaps;
        collect(b, snaps);
        if (snaps.size() != 1) continue;
        const Snapshot & s = *snaps[0]->snap;
        if (!s.turn_end || s.pinned || s.dependents > 0) continue;
        drop(snaps[0]);
        ++dropped;
    }
    if (dropped > 0) compact(&root_);
    return dropped;
}

void PrefixCache::collect(Node * n, std::vector<Node *> & out) {
    if (n->snap) out.push_back(n);
    for (auto & [t, c] : n->children) collect(c.get(), out);
}

void PrefixCache::evict() {
    if (bytes_ <= budget_) return;
    std::vector<Node *> nodes;
    collect(&root_, nodes);
    std::sort(nodes.begin(), nodes.end(), [](const Node * a, const Node * b) { return a->last_use < b->last_use; });
    // Least recently used first among the snapshots nothing depends on; dropping a tail may free its parent, so
    // the scan starts again after each drop that freed one.
    bool dropped = true;
    while (bytes_ > budget_ && dropped) {
        dropped = false;
        for (Node * n : nodes) {
            if (!n->snap || n->snap->dependents > 0) continue;
            const bool frees_parent = n->snap->parent && n->snap->parent->dependents == 1;
            drop(n);
            dropped = true;
            if (bytes_ <= budget_ || frees_parent) break;
        }
    }
    compact(&root_);
}

// Removes nodes that hold nothing and lead nowhere; a snapshot-less node with one child is merged into it, so the
// tree stays a radix tree.
void PrefixCache::compact(Node * n) {
    for (auto it = n->children.begin(); it != n->children.end();) {
        Node * c = it->second.get();
        compact(c);
        if (!c->snap && c->children.empty()) {
            it = n->children.erase(it);
            continue;
        }
        if (!c->snap && c->children.size() == 1) {
            std::unique_ptr<Node> grand = std::move(c->children.begin()->second);
            grand->edge.insert(grand->edge.begin(), c->edge.begin(), c->edge.end());
            grand->parent = n;
            it->second = std::move(grand);  // same first token: replaces (and frees) c
        }
        ++it;
    }
}

void PrefixCache::for_each(const std::function<void(const std::vector<int32_t> &, const Snapshot &)> & fn) const {
    std::vector<std::pair<uint64_t, std::pair<std::vector<int32_t>, const Snapshot *>>> all;
    std::vector<int32_t> path;
    std::function<void(const Node *)> walk = [&](const Node * n) {
        const size_t before = path.size();
        path.insert(path.end(), n->edge.begin(), n->edge.end());
        if (n->snap) all.push_back({n->last_use, {path, n->snap.get()}});
        for (const auto & [t, c] : n->children) walk(c.get());
        path.resize(before);
    };
    walk(&root_);
    std::sort(all.begin(), all.end(), [](const auto & a, const auto & b) { return a.first < b.first; });
    for (const auto & [use, entry] : all) fn(entry.first, *entry.second);
}

void PrefixCache::clear() {
    std::vector<Node *> nodes;
    collect(&root_, nodes);
    for (Node * n : nodes) n->snap->cached = false;  // tails still held by running slots are no parents any more
    root_.children.clear();
    bytes_ = row_bytes_ = logits_bytes_ = 0;
    entries_ = 0;
}

}  // namespace offgrid::server
