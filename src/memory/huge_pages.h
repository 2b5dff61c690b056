// Allocator of the large cache arrays (K, V and indexer rows): a block of 2 MiB or more is aligned to 2 MiB and
// advised as transparent huge pages (madvise MADV_HUGEPAGE) before anything touches it. A sparse step reads rows
// scattered over the whole context (pooled keys every kpool cells, the selected pools' K and V rows); with 4 KiB
// pages nearly every row is a TLB miss and a page walk. Where the kernel has no THP, or refuses the advice, the
// block is an ordinary one: only speed depends on it, never a result.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

namespace offgrid::memory {

template <class T>
struct HugePageAllocator {
    using value_type = T;
    static constexpr size_t kHuge = size_t{2} << 20;

    HugePageAllocator() = default;
    template <class U>
    HugePageAllocator(const HugePageAllocator<U> &) {}

    T * allocate(size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes < kHuge) {
            if (void * p = std::malloc(bytes ? bytes : 1)) return static_cast<T *>(p);
            throw std::bad_alloc();
        }
        const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
        void * p = std::aligned_alloc(kHuge, rounded);
        if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
        ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
#endif
        return static_cast<T *>(p);
    }
    void deallocate(T * p, size_t) { std::free(p); }

    template <class U>
    bool operator==(const HugePageAllocator<U> &) const { return true; }
};

}  // namespace offgrid::memory
