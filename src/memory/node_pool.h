// A free list of equal-sized nodes for node-based containers (the per-sequence cell index of a stream,
// cells.h), so that placing and freeing cells takes nothing from the heap once the pool holds enough nodes.
//
// The pool learns the node size from the first request (a std::set asks only for its node type). Nodes come in
// chunks of `chunk_nodes`; a freed node goes back to the free list and is handed out again, so the pool's memory
// only grows, by one chunk at a time, when more nodes are alive at once than ever before. A request of another
// size (or for several objects) goes to the heap as usual.
//
// Ownership: the pool owns every chunk until it is destroyed. Containers using a PoolAllocator must be destroyed
// (or cleared) before their pool; the pool is not thread-safe (one owner, one thread at a time).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

namespace offgrid::memory {

class NodePool {
public:
    explicit NodePool(size_t chunk_nodes) : chunk_nodes_(chunk_nodes > 0 ? chunk_nodes : 1) {}
    NodePool(const NodePool &) = delete;
    NodePool & operator=(const NodePool &) = delete;

    void * take(size_t bytes) {
        if (node_bytes_ == 0) node_bytes_ = round_up(bytes);
        if (round_up(bytes) != node_bytes_) return ::operator new(bytes);
        if (free_ == nullptr) grow();
        FreeNode * n = free_;
        free_ = n->next;
        return n;
    }
    void give(void * p, size_t bytes) noexcept {
        if (round_up(bytes) != node_bytes_) {
            ::operator delete(p);
            return;
        }
        free_ = ::new (p) FreeNode{free_};
    }
    size_t chunk_bytes() const { return chunk_nodes_ * node_bytes_; }
    size_t n_chunks() const { return chunks_.size(); }

private:
    struct FreeNode {
        FreeNode * next;
    };
    struct ChunkDelete {
        void operator()(std::byte * p) const noexcept { ::operator delete(p); }
    };
    static constexpr size_t kAlign = alignof(std::max_align_t);
    static size_t round_up(size_t bytes) {
        const size_t b = bytes < sizeof(FreeNode) ? sizeof(FreeNode) : bytes;
        return (b + kAlign - 1) / kAlign * kAlign;
    }
    void grow() {
        chunks_.emplace_back(static_cast<std::byte *>(::operator new(chunk_bytes())));
        std::byte * base = chunks_.back().get();
        for (size_t k = chunk_nodes_; k-- > 0;) free_ = ::new (base + k * node_bytes_) FreeNode{free_};
    }

    size_t chunk_nodes_;
    size_t node_bytes_ = 0;
    FreeNode * free_ = nullptr;
    std::vector<std::unique_ptr<std::byte, ChunkDelete>> chunks_;
};

// Allocator over a NodePool (null pool: the heap). Containers that share a pool compare equal.
template <class T>
struct PoolAllocator {
    using value_type = T;
    using propagate_on_container_copy_assignment = std::true_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    static_assert(alignof(T) <= alignof(std::max_align_t), "nodes are aligned to max_align_t");

    NodePool * pool = nullptr;

    PoolAllocator() = default;
    explicit PoolAllocator(NodePool * p) : pool(p) {}
    template <class U>
    PoolAllocator(const PoolAllocator<U> & o) : pool(o.pool) {}

    T * allocate(size_t n) {
        if (pool != nullptr && n == 1) return static_cast<T *>(pool->take(sizeof(T)));
        return static_cast<T *>(::operator new(n * sizeof(T)));
    }
    void deallocate(T * p, size_t n) noexcept {
        if (pool != nullptr && n == 1) {
            pool->give(p, sizeof(T));
            return;
        }
        ::operator delete(p);
    }
    template <class U>
    bool operator==(const PoolAllocator<U> & o) const { return pool == o.pool; }
};

}  // namespace offgrid::memory
