// ops::Workspace: aligned slices in stack order, scopes that give them back, a take past the reserve that still
// succeeds and enlarges the arena at the next reset, and one arena per pool thread.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>

#include "ops/rope.h"
#include "ops/thread_pool.h"
#include "ops/workspace.h"

namespace offgrid::ops {
namespace {

bool aligned64(const void * p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(Workspace, SlicesAreAlignedDisjointAndGivenBackByTheirScope) {
    Arena a;
    a.reserve(4096);
    float * first = nullptr;
    {
        Scope s(a);
        const auto x = s.take<float>(3), y = s.take<float>(10);
        first = x.data();
        EXPECT_TRUE(aligned64(x.data()));
        EXPECT_TRUE(aligned64(y.data()));
        EXPECT_GE(reinterpret_cast<const char *>(y.data()), reinterpret_cast<const char *>(x.data() + 3));
        EXPECT_EQ(a.top(), 64u + 64u);
    }
    EXPECT_EQ(a.top(), 0u);
    Scope again(a);
    EXPECT_EQ(again.take<float>(1).data(), first);  // the same memory, taken again
    EXPECT_EQ(a.growths(), 0u);
}

TEST(Workspace, ATakePastTheReserveSucceedsAndTheArenaGrowsAtReset) {
    Arena a;
    a.reserve(128);
    {
        Scope s(a);
        const auto small = s.take<uint8_t>(100);
        const auto big = s.take<float>(1000);  // past the 128 bytes
        for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i);
        EXPECT_TRUE(aligned64(big.data()));
        EXPECT_EQ(big[999], 999.0f);
        small[0] = 1;
    }
    EXPECT_EQ(a.growths(), 1u);
    a.reset();
    EXPECT_GE(a.capacity(), 128u + 4000u);
    Scope s(a);
    s.take<float>(1000);
    EXPECT_EQ(a.growths(), 1u);  // fits now
}

TEST(Workspace, EveryPoolThreadHasItsOwnArena) {
    ThreadPool pool(3);
    Workspace ws(pool.n_threads(), {1024, 256});
    EXPECT_EQ(ws.n_threads(), 3);
    EXPECT_EQ(ws.reserved_bytes(), 1024u + 2 * 256u);
    std::atomic<int> bad{0};
    std::mutex m;
    std::set<const Arena *> seen;
    pool.parallel_for(64, [&](size_t, size_t) {
        const int i = ThreadPool::thread_index();
        if (i < 0 || i >= 3) ++bad;
        Arena & a = ws.local();
        if (&a != &ws.arena(i)) ++bad;
        std::lock_guard<std::mutex> lock(m);
        seen.insert(&a);
    });
    EXPECT_EQ(bad.load(), 0);
    EXPECT_GE(seen.size(), 1u);
    EXPECT_EQ(ThreadPool::thread_index(), 0);  // the caller
}

TEST(Workspace, KernelBlocksAreSizedOnceKeepTheirContentsAndGrowWhenAskedForMore) {
    Arena a;
    a.reserve_kernel_blocks({256, 0, 1024});
    std::byte * p = a.kernel_block(KernelBlock::packed_tokens, 200);
    EXPECT_TRUE(aligned64(p));
    p[199] = std::byte{7};
    bool fill = true;
    a.kernel_block_for(KernelBlock::packed_tokens, 200, 42, fill);
    EXPECT_EQ(a.kernel_block(KernelBlock::packed_tokens, 256), p);  // the same block, contents and tag kept
    EXPECT_EQ(p[199], std::byte{7});
    EXPECT_EQ(a.kernel_block_for(KernelBlock::packed_tokens, 256, 42, fill), p);
    EXPECT_FALSE(fill);
    EXPECT_NE(a.kernel_block(KernelBlock::dequantised_rows, 1024), p);  // blocks are separate
    EXPECT_EQ(a.growths(), 0u);
    const uint64_t before = Workspace::total_growths();
    std::byte * q = a.kernel_block(KernelBlock::packed_tokens, 4096);  // past the declared size
    EXPECT_TRUE(aligned64(q));
    EXPECT_GE(a.kernel_block_capacity(KernelBlock::packed_tokens), 4096u);
    a.kernel_block_for(KernelBlock::packed_tokens, 4096, 42, fill);
    EXPECT_TRUE(fill);  // what it held is gone
    EXPECT_EQ(a.growths(), 1u);
    EXPECT_EQ(Workspace::total_growths(), before + 1);
}

TEST(Workspace, AKernelBlockForNamedContentsIsFilledOnlyWhenItHoldsOthers) {
    Arena a;
    a.reserve_kernel_blocks({256, 0, 1024});
    bool fill = false;
    std::byte * p = a.kernel_block_for(KernelBlock::packed_tokens, 128, packed_tokens_tag(7, 5), fill);
    EXPECT_TRUE(fill);
    EXPECT_EQ(a.kernel_block_for(KernelBlock::packed_tokens, 128, packed_tokens_tag(7, 5), fill), p);
    EXPECT_FALSE(fill);  // what the previous call left
    a.kernel_block_for(KernelBlock::packed_tokens, 128, packed_tokens_tag(7, 6), fill);
    EXPECT_TRUE(fill);  // the same key in another layout
    a.kernel_block_for(KernelBlock::packed_tokens, 128, packed_tokens_tag(0, 6), fill);
    EXPECT_TRUE(fill);
    a.kernel_block_for(KernelBlock::packed_tokens, 128, packed_tokens_tag(0, 6), fill);
    EXPECT_TRUE(fill);  // unnamed contents are never found again
    a.kernel_block_for(KernelBlock::packed_tokens, 128, 9, fill);
    a.kernel_block(KernelBlock::packed_tokens, 4096);  // a new block forgets its name
    a.kernel_block_for(KernelBlock::packed_tokens, 128, 9, fill);
    EXPECT_TRUE(fill);
    EXPECT_EQ(packed_tokens_tag(3, 5), 3u | uint64_t{5} << 60);
}

TEST(Workspace, AJobsPartsRunWithTheCallersBindingOnEveryThread) {
    ThreadPool pool(3);
    Workspace ws(pool.n_threads(), {1024, 256, {64, 64, 64}});
    EXPECT_EQ(Workspace::bound(), nullptr);
    std::atomic<int> bad{0};
    {
        const Workspace::Bind bind(ws);
        EXPECT_EQ(Workspace::bound(), &ws);
        EXPECT_EQ(&Workspace::scratch(), &ws.arena(0));
        pool.parallel_for(64, [&](size_t, size_t) {
            const int i = ThreadPool::thread_index();
            if (Workspace::bound() != &ws || &Workspace::scratch() != &ws.arena(i)) ++bad;
        });
    }
    EXPECT_EQ(bad.load(), 0);
    EXPECT_EQ(Workspace::bound(), nullptr);  // the guard gave the binding back
    // A job from an unbound caller runs unbound everywhere: a worker does not keep the last job's binding.
    pool.parallel_for(64, [&](size_t, size_t) {
        if (Workspace::bound() != nullptr) ++bad;
    });
    EXPECT_EQ(bad.load(), 0);
    // Unbound, a thread's scratch is its own arena, outside any workspace, and its growths are not counted.
    const uint64_t before = Workspace::total_growths();
    Arena & own = Workspace::scratch();
    EXPECT_NE(&own, &ws.arena(0));
    own.kernel_block(KernelBlock::dequantised_rows, 1 << 20);
    EXPECT_EQ(Workspace::total_growths(), before);
}

TEST(Rope, AnglesBeyondTheStackLimitAreRefused) {
    RopeParams p;
    p.n_rot = 2 * kMaxRopePairs + 2;
    p.sections = {1, 1, 1, 1};
    EXPECT_THROW(rope_angles(p, {0, 0, 0, 0}), std::exception);
    p.n_rot = 2 * kMaxRopePairs;
    EXPECT_NO_THROW(rope_angles(p, {1, 1, 1, 0}));
}

}  // namespace
}  // namespace offgrid::ops
