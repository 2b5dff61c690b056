// Scratch memory of one context's forward passes, sized once when the context is created: one arena per pool
// thread. A forward takes its buffers from the arenas in stack order (a Scope gives back everything taken inside
// it), so a decode step allocates nothing.
//
// Invariants:
//  1. take() returns 64-byte aligned, uninitialised storage for trivially copyable elements; it stays valid until
//     the Scope (or release_to mark) that was open when it was taken ends.
//  2. Arena i is used only by thread i of the pool (ThreadPool::thread_index()); arena 0 also holds the buffers of
//     the whole pass, taken on the calling thread outside parallel regions.
//  3. A take beyond the reserved bytes still succeeds: it is served by a heap block of its own, freed with its
//     scope, and the arena is enlarged to at least its high-water mark at the next reset() (growths() counts the
//     overflowing takes). A model whose declared sizes are right never grows its workspace; one used without
//     a declared size (the MTP head) grows to its high-water mark and then allocates nothing.
//  4. Besides its stack, each arena holds the kernels' blocks (KernelBlock): one buffer per kind that a kernel
//     takes for the length of one call on its thread (kernels do not nest), sized once like the stack; a larger
//     request enlarges the block and counts as a growth.
//  5. The kernels find their arena through the workspace bound to their thread: a forward binds its workspace on
//     the calling thread (Workspace::Bind), and the thread pool hands the binding to the workers for the parts of
//     each job they run. A thread with no binding (a test or benchmark calling a kernel directly) uses a block
//     of its own that only grows.
#pragma once

#include <array>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace offgrid::ops {

// The kernels' per-call buffers (invariant 4).
enum class KernelBlock : int {
    packed_tokens,     // a product's token rows in its kernel's tile layout (and what names them: key)
    parked_weights,    // partial sums of a float product cut into column chunks
    dequantised_rows,  // weight rows dequantised for the exact path's f32 dot (a tile's rows, or one row)
    tile_weights,      // weight rows decoded for an 8-bit prompt product: 16 into the tile unit's byte images
                       // (kernels_quant_int8_amx.cpp), 2 into bytes at AVX2 (kernels_quant_int8_gemm_avx2.cpp),
                       // 16 at AVX-512 (kernels_quant_int8_gemm_avx512.cpp), or 8 with their words interleaved in
                       // pairs (kernels_quant_int8_lanes_avx512.cpp)
};
constexpr int kKernelBlocks = 4;
using KernelBlockBytes = std::array<size_t, kKernelBlocks>;

class Arena {
public:
    Arena() = default;
    // counted = false: growths are not added to Workspace::total_growths() (a thread's fallback blocks).
    explicit Arena(bool counted) : counted_(counted) {}
    Arena(const Arena &) = delete;
    Arena & operator=(const Arena &) = delete;
    Arena(Arena &&) = default;
    Arena & operator=(Arena &&) = default;

    // Sets the reserved size (one allocation). Only while nothing is taken.
    void reserve(size_t bytes);

    template <typename T>
    std::span<T> take(size_t n) {
        static_assert(std::is_trivially_copyable_v<T>, "workspace elements are plain data");
        return {static_cast<T *>(take_bytes(n * sizeof(T))), n};
    }

    size_t top() const { return top_; }
    void release_to(size_t mark);
    // Nothing taken: enlarges the reserved block to the high-water mark when a take overflowed it.
    void reset();

    size_t capacity() const { return capacity_; }
    size_t high_water() const { return high_water_; }
    uint64_t growths() const { return growths_; }

    // Sizes the kernels' blocks (one allocation each).
    void reserve_kernel_blocks(const KernelBlockBytes & bytes);
    // Block `b`, at least `bytes` long, 64-byte aligned; its contents stay until the next call for the same block
    // (a kernel may find there what it left on its previous call: kernel_block_for names it).
    std::byte * kernel_block(KernelBlock b, size_t bytes);
    // kernel_block for contents named `tag` (0: unnamed, never found again): `fill` is false when the block holds
    // them already (this thread's previous call for `b` left them), true when the caller must write them; either
    // way the block is named `tag` from then on. Packed tokens are named by packed_tokens_tag.
    std::byte * kernel_block_for(KernelBlock b, size_t bytes, uint64_t tag, bool & fill);
    size_t kernel_block_capacity(KernelBlock b) const { return kernel_sizes_[static_cast<size_t>(b)]; }

private:
    struct Overflow {
        size_t mark;  // top() before the take
        std::unique_ptr<std::byte[]> block;
    };
    void * take_bytes(size_t bytes);

    std::unique_ptr<std::byte[]> block_;  // capacity_ bytes plus alignment slack
    std::byte * base_ = nullptr;          // block_ rounded up to 64 bytes
    size_t capacity_ = 0;
    size_t top_ = 0;                      // bytes taken, counting those served by overflow blocks
    size_t high_water_ = 0;
    uint64_t growths_ = 0;
    std::vector<Overflow> overflows_;
    std::array<std::unique_ptr<std::byte[]>, kKernelBlocks> kernel_blocks_;
    std::array<size_t, kKernelBlocks> kernel_sizes_{};
    std::array<uint64_t, kKernelBlocks> kernel_tags_{};
    bool counted_ = true;
};

// The name of a product's packed tokens: its activation key (PreparedActivations::key, a count far below 2^60; 0
// for none) with the packing's layout (0-15, one per kernel family and token grouping) in the top 4 bits, so that
// products of other types that share the key's rows never take each other's packing.
constexpr uint64_t packed_tokens_tag(uint64_t key, uint64_t layout) { return key != 0 ? key | layout << 60 : 0; }

// Gives back what was taken from an arena inside it.
class Scope {
public:
    explicit Scope(Arena & arena) : arena_(arena), mark_(arena.top()) {}
    ~Scope() { arena_.release_to(mark_); }
    Scope(const Scope &) = delete;
    Scope & operator=(const Scope &) = delete;
    Arena & arena() const { return arena_; }
    template <typename T>
    std::span<T> take(size_t n) { return arena_.template take<T>(n); }

private:
    Arena & arena_;
    size_t mark_;
};

// What a forward needs: bytes on the calling thread (the pass's buffers plus its own per-thread part), bytes
// on every other pool thread, and the kernels' blocks of every thread.
struct WorkspaceSize {
    size_t main_bytes = 0;
    size_t per_thread_bytes = 0;
    KernelBlockBytes kernel_bytes{};
};

// The size that holds either: passes that run one after the other share their arenas.
inline WorkspaceSize max_of(WorkspaceSize a, const WorkspaceSize & b) {
    a.main_bytes = a.main_bytes > b.main_bytes ? a.main_bytes : b.main_bytes;
    a.per_thread_bytes = a.per_thread_bytes > b.per_thread_bytes ? a.per_thread_bytes : b.per_thread_bytes;
    for (size_t i = 0; i < a.kernel_bytes.size(); ++i) {
        a.kernel_bytes[i] = a.kernel_bytes[i] > b.kernel_bytes[i] ? a.kernel_bytes[i] : b.kernel_bytes[i];
    }
    return a;
}

// The size that holds both at once: buffers of `b` taken while those of `a` are held (the products' scratch
// inside a model's pass). The kernels' blocks are per call, so they take the larger of the two.
inline WorkspaceSize nested(WorkspaceSize a, const WorkspaceSize & b) {
    a.main_bytes += b.main_bytes;
    a.per_thread_bytes += b.per_thread_bytes;
    for (size_t i = 0; i < a.kernel_bytes.size(); ++i) {
        a.kernel_bytes[i] = a.kernel_bytes[i] > b.kernel_bytes[i] ? a.kernel_bytes[i] : b.kernel_bytes[i];
    }
    return a;
}

// Bytes an arena needs for buffers of n elements of T (with the alignment each take may add).
template <typename T>
constexpr size_t arena_bytes(size_t n) {
    return (n * sizeof(T) + 63) / 64 * 64;
}

class Workspace {
public:
    Workspace() = default;
    Workspace(int n_threads, const WorkspaceSize & size) { reserve(n_threads, size); }

    void reserve(int n_threads, const WorkspaceSize & size);
    // The calling thread's arena (see invariant 2).
    Arena & local();
    Arena & arena(int i) { return arenas_[static_cast<size_t>(i)]; }
    int n_threads() const { return static_cast<int>(arenas_.size()); }
    // Before a pass, nothing taken: enlarges any arena that overflowed during the last one.
    void reset();
    uint64_t growths() const;
    size_t reserved_bytes() const;

    // Total growths of every workspace in the process (tests check a correctly sized model has none).
    static uint64_t total_growths();

    // Binds a workspace to the calling thread for the guard's life (invariant 5); restores the previous binding.
    class Bind {
    public:
        explicit Bind(Workspace & ws);
        ~Bind();
        Bind(const Bind &) = delete;
        Bind & operator=(const Bind &) = delete;

    private:
        Workspace * previous_;
    };
    // The workspace bound to this thread, or null.
    static Workspace * bound();
    // This thread's arena in the bound workspace, or the thread's own fallback arena when none is bound. Kernels
    // take their blocks here; the product drivers their activation rows.
    static Arena & scratch();

private:
    static int thread_index();
    std::vector<Arena> arenas_;
};

}  // namespace offgrid::ops
