// A small fixed pool of worker threads for the heavy kernels. Work is split into contiguous index ranges, and
// each range is computed by exactly one thread with the same arithmetic as the scalar path, so results never
// depend on the number of threads. parallel_for's ranges depend only on n and the thread count; parallel_claims'
// are claimed as threads come free (for work whose every index is computed on its own). Either way ranges are
// claimed, not assigned: on a busy machine a worker that is not scheduled in time leaves its range to whoever is
// free, so the caller never waits for a thread that has not started.
//
// A decode step issues a few dozen short jobs back to back, so the hot path takes no lock: a job is published
// by one atomic store (generation, part count and claim counter in one word), workers claim parts with a
// compare-and-swap on that word and count finished parts in another; the caller spins on that count. Idle
// workers spin for a short while before they sleep on a condition variable (only then is a mutex involved).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ops/function_ref.h"

namespace offgrid::ops {

class Workspace;

class ThreadPool {
public:
    // The most threads a pool takes (every `-t` and `set threads` is capped here): far above any CPU this runs
    // on, small enough that the stacks fit in ordinary address-space limits.
    static constexpr int kMaxThreads = 256;

    // n_threads counts the calling thread: 1 means no workers (everything runs inline). Throws offgrid::Error
    // for more than kMaxThreads, or when a thread cannot be created (the ones that started are joined first).
    explicit ThreadPool(int n_threads = 1);
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool & operator=(const ThreadPool &) = delete;

    int n_threads() const { return n_threads_; }
    // The calling thread's index in its pool: 1..n_threads-1 on a worker, 0 on any other thread (the caller
    // of a job runs parts of it as thread 0). Per-thread scratch (ops/workspace.h) is chosen by it.
    static int thread_index();
    // The workspace bound to the calling thread (Workspace::Bind). A job carries its caller's binding: a worker
    // runs each part it claims with the caller's workspace bound, so the kernels of a part use the arena of the
    // same workspace whichever thread runs them.
    static Workspace * bound_workspace();
    static void set_bound_workspace(Workspace * ws);

    // Calls fn(begin, end) on disjoint ranges covering [0, n); blocks until all are done. Ranges smaller than
    // min_chunk are not split further. An exception thrown by fn is rethrown here (the first one).
    // Callers are serialised; fn must not call parallel_for on the same pool (it would wait for itself).
    void parallel_for(size_t n, FunctionRef<void(size_t, size_t)> fn, size_t min_chunk = 1);

    // Calls fn(part) once for every part in [0, n_parts), each on one thread; blocks until all are done.
    // Same rules as parallel_for.
    void run_parts(int n_parts, FunctionRef<void(int)> fn);

    // Calls fn(begin, end) on disjoint ranges covering [0, n), claimed by the threads as they come free: each claim
    // takes a quarter of what is left per thread pair (1 / (2 n_threads)), at least min_chunk. The first claims are
    // large (few hand-offs), the last ones min_chunk, so the threads finish within one small range of each other.
    // Where the ranges fall depends on timing: only for work in which every index is computed on its own, with
    // the same arithmetic whoever computes it (the weight products). Same rules as parallel_for otherwise.
    void parallel_claims(size_t n, FunctionRef<void(size_t, size_t)> fn, size_t min_chunk = 1);

private:
    void worker_loop();
    void stop_workers();  // wakes every worker with stop_ set and joins it
    // Claims and runs parts of generation gen until none is left; false when the job is no longer gen's.
    void claim_parts(uint32_t gen);
    // Waits (spin, then sleep) until the published generation differs from seen, or stop; returns it.
    uint32_t wait_for_job(uint32_t seen);

    // The ticket: generation (high 32 bits), part count (bits 16-31), next part to claim (bits 0-15).
    static uint64_t ticket(uint32_t gen, uint32_t parts, uint32_t next) {
        return (static_cast<uint64_t>(gen) << 32) | (static_cast<uint64_t>(parts) << 16) | next;
    }

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex call_mutex_;  // serialises callers (uncontended in the engine: one context, one caller)

    // The current job, written by the caller before the ticket that publishes it and stable until every part
    // is done (a worker reads it only after a successful claim).
    FunctionRef<void(int)> * job_ = nullptr;
    Workspace * job_workspace_ = nullptr;  // the caller's binding, for the job's parts
    std::atomic<uint64_t> ticket_{0};
    std::atomic<int> parts_done_{0};
    uint32_t generation_ = 0;  // the caller's own copy of the current generation

    std::mutex error_mutex_;
    std::exception_ptr error_;

    // The sleeping side (off the hot path).
    std::mutex sleep_mutex_;
    std::condition_variable wake_;
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
};

// Runs fn over [0, n) on the pool, or inline when pool is null.
void parallel_for(ThreadPool * pool, size_t n, FunctionRef<void(size_t, size_t)> fn,
                  size_t min_chunk = 1);
// ThreadPool::parallel_claims on the pool, or fn(0, n) inline when pool is null.
void parallel_claims(ThreadPool * pool, size_t n, FunctionRef<void(size_t, size_t)> fn,
                     size_t min_chunk = 1);

}  // namespace offgrid::ops
