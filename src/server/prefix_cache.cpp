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

bool PrefixCache::has(std::span<const int32_t> tokens, bool with_logits) const {
    const Node * n = &root_;
    size_t depth = 0;
    while (depth < tokens.size()) {
        auto it = n->children.find(tokens[depth]);
        if (it == n->children.end()) return false;
        const Node * c = it->second.get();
        const size_t k = common(c->edge, tokens.subspan(depth));
        if (k < c->edge.size()) return false;
        depth += k;
        n = c;
    }
    return n != &root_ && n->snap && (!with_logits || !n->snap->logits.empty());
}

void PrefixCache::insert(std::span<const int32_t> tokens, Snapshot snap) {
    if (tokens.empty() || snap.bytes() > budget_) return;
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
        bytes_ -= n->snap->bytes();
        --entries_;
    }
    bytes_ += snap.bytes();
    ++entries_;
    n->snap = std::make_shared<const Snapshot>(std::move(snap));
    n->last_use = ++clock_;
    evict();
}

bool PrefixCache::erase(std::span<const int32_t> tokens) {
    Node * n = &root_;
    size_t depth = 0;
    while (depth < tokens.size()) {
        auto it = n->children.find(tokens[depth]);
        if (it == n->children.end()) return false;
        Node * c = it->second.get();
        const size_t k = common(c->edge, tokens.subspan(depth));
        if (k < c->edge.size()) return false;
        depth += k;
        n = c;
    }
    if (n == &root_ || !n->snap) return false;
    bytes_ -= n->snap->bytes();
    --entries_;
    n->snap.reset();
    prune(n);
    return true;
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
    for (Node * n : nodes) {
        if (bytes_ <= budget_) break;
        bytes_ -= n->snap->bytes();
        --entries_;
        n->snap.reset();
        prune(n);
    }
}

// Removes nodes that hold nothing and lead nowhere, walking up; a snapshot-less node with one child is merged into
// it, so the tree stays a radix tree.
void PrefixCache::prune(Node * n) {
    while (n != &root_ && !n->snap) {
        Node * p = n->parent;
        if (n->children.empty()) {
            const int32_t key = n->edge[0];
            p->children.erase(key);
        } else if (n->children.size() == 1) {
            std::unique_ptr<Node> child = std::move(n->children.begin()->second);
            child->edge.insert(child->edge.begin(), n->edge.begin(), n->edge.end());
            child->parent = p;
            const int32_t key = child->edge[0];
            p->children[key] = std::move(child);  // replaces (and frees) n
        } else {
            return;
        }
        n = p;
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
    root_.children.clear();
    bytes_ = 0;
    entries_ = 0;
}

}  // namespace offgrid::server
