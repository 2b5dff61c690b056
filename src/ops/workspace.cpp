#include "ops/workspace.h"

#include <algorithm>
#include <atomic>
#include <string>

#include "common/error.h"
#include "ops/thread_pool.h"

namespace offgrid::ops {

namespace {

constexpr size_t kAlign = 64;
std::atomic<uint64_t> g_growths{0};

size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

std::byte * aligned(std::byte * p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return p + (round_up(a) - a);
}

}  // namespace

void Arena::reserve(size_t bytes) {
    if (top_ != 0) throw Error("workspace: reserve while buffers are taken");
    bytes = round_up(bytes);
    overflows_.clear();
    block_.reset();
    base_ = nullptr;
    capacity_ = 0;
    if (bytes > 0) {
        block_ = std::make_unique_for_overwrite<std::byte[]>(bytes + kAlign);
        base_ = aligned(block_.get());
        capacity_ = bytes;
    }
    // Room for the overflow list, so an overflowing pass does not also allocate to record its blocks.
    overflows_.reserve(16);
}

void * Arena::take_bytes(size_t bytes) {
    bytes = round_up(std::max<size_t>(bytes, 1));
    const size_t at = top_;
    top_ += bytes;
    high_water_ = std::max(high_water_, top_);
    if (top_ <= capacity_) return base_ + at;
    // Past the reserved block: a heap block of its own (invariant 3).
    ++growths_;
    if (counted_) g_growths.fetch_add(1, std::memory_order_relaxed);
    overflows_.push_back({at, std::make_unique_for_overwrite<std::byte[]>(bytes + kAlign)});
    return aligned(overflows_.back().block.get());
}

void Arena::reserve_kernel_blocks(const KernelBlockBytes & bytes) {
    for (size_t i = 0; i < kernel_blocks_.size(); ++i) {
        kernel_blocks_[i].reset();
        kernel_sizes_[i] = round_up(bytes[i]);
        kernel_tags_[i] = 0;
        if (kernel_sizes_[i] > 0) kernel_blocks_[i] = std::make_unique_for_overwrite<std::byte[]>(kernel_sizes_[i] + kAlign);
    }
}

std::byte * Arena::kernel_block(KernelBlock b, size_t bytes) {
    const auto i = static_cast<size_t>(b);
    if (bytes > kernel_sizes_[i]) {
        // Larger than declared (invariant 4): a new block, which also forgets what the old one held.
        ++growths_;
        if (counted_) g_growths.fetch_add(1, std::memory_order_relaxed);
        kernel_sizes_[i] = round_up(std::max(bytes, kernel_sizes_[i] + kernel_sizes_[i] / 2));
        kernel_blocks_[i] = std::make_unique_for_overwrite<std::byte[]>(kernel_sizes_[i] + kAlign);
        kernel_tags_[i] = 0;
    }
    return aligned(kernel_blocks_[i].get());
}

std::byte * Arena::kernel_block_for(KernelBlock b, size_t bytes, uint64_t tag, bool & fill) {
    std::byte * p = kernel_block(b, bytes);
    uint64_t & held = kernel_tags_[static_cast<size_t>(b)];
    fill = tag == 0 || held != tag;
    held = tag;
    return p;
}

void Arena::release_to(size_t mark) {
    while (!overflows_.empty() && overflows_.back().mark >= mark) overflows_.pop_back();
    top_ = std::min(top_, mark);
}

void Arena::reset() {
    release_to(0);
    // At least half again: a workspace whose need creeps up (a cache that grows by a row a step) grows rarely.
    if (high_water_ > capacity_) reserve(std::max(high_water_, capacity_ + capacity_ / 2));
}

void Workspace::reserve(int n_threads, const WorkspaceSize & size) {
    arenas_.clear();
    arenas_.resize(static_cast<size_t>(std::max(1, n_threads)));
    arenas_[0].reserve(size.main_bytes);
    for (size_t i = 1; i < arenas_.size(); ++i) arenas_[i].reserve(size.per_thread_bytes);
    for (Arena & a : arenas_) a.reserve_kernel_blocks(size.kernel_bytes);
}

int Workspace::thread_index() { return ThreadPool::thread_index(); }

Arena & Workspace::local() {
    const size_t i = static_cast<size_t>(thread_index());
    if (i >= arenas_.size()) {
        throw Error("workspace: thread " + std::to_string(i) + " of a pool larger than the workspace (" +
                    std::to_string(arenas_.size()) + " arenas)");
    }
    return arenas_[i];
}

void Workspace::reset() {
    for (Arena & a : arenas_) a.reset();
}

uint64_t Workspace::growths() const {
    uint64_t n = 0;
    for (const Arena & a : arenas_) n += a.growths();
    return n;
}

size_t Workspace::reserved_bytes() const {
    size_t n = 0;
    for (const Arena & a : arenas_) n += a.capacity();
    return n;
}

uint64_t Workspace::total_growths() { return g_growths.load(std::memory_order_relaxed); }

Workspace::Bind::Bind(Workspace & ws) : previous_(ThreadPool::bound_workspace()) { ThreadPool::set_bound_workspace(&ws); }
Workspace::Bind::~Bind() { ThreadPool::set_bound_workspace(previous_); }

Workspace * Workspace::bound() { return ThreadPool::bound_workspace(); }

Arena & Workspace::scratch() {
    if (Workspace * ws = ThreadPool::bound_workspace()) return ws->local();
    // No context on this thread (a test or a benchmark calling the kernels): blocks of its own, grown on demand.
    thread_local Arena own(false);
    if (own.top() == 0) own.reset();  // enlarged to what the last calls took, so repeated calls stop allocating
    return own;
}

}  // namespace offgrid::ops
