// A small fixed pool of worker threads for the heavy kernels. Work is split into contiguous index ranges that
// depend only on n and the thread count, and each range is computed by exactly one thread with the same
// arithmetic as the scalar path, so results never depend on the number of threads. Ranges are claimed, not
// assigned: on a busy machine a worker that is not scheduled in time leaves its range to whoever is free, so
// the caller never waits for a thread that has not started.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <exception>
#include <vector>

namespace offgrid::ops {

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

    // Calls fn(begin, end) on disjoint ranges covering [0, n); blocks until all are done. Ranges smaller than
    // min_chunk are not split further. An exception thrown by fn is rethrown here (the first one).
    // Callers are serialised; fn must not call parallel_for on the same pool (it would wait for itself).
    void parallel_for(size_t n, const std::function<void(size_t, size_t)> & fn, size_t min_chunk = 1);

private:
    void worker_loop(int index);
    void stop_workers();  // wakes every worker with stop_ set and joins it

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex call_mutex_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable done_;
    // Runs the job's ranges until none is left to claim; returns the first exception thrown.
    std::exception_ptr claim_parts();

    // The current job (null between jobs), guarded by mutex_ except next_part_, which hands out ranges.
    const std::function<void(size_t, size_t)> * job_ = nullptr;
    size_t job_n_ = 0;
    int job_parts_ = 0;
    std::atomic<int> next_part_{0};
    std::atomic<unsigned long> generation_{0};  // written under mutex_; idle workers poll it before sleeping
    int active_ = 0;    // workers inside the current job
    int sleepers_ = 0;  // workers blocked on wake_ (the caller skips the notify when there are none)
    bool stop_ = false;
    std::exception_ptr error_;
};

// Runs fn over [0, n) on the pool, or inline when pool is null.
void parallel_for(ThreadPool * pool, size_t n, const std::function<void(size_t, size_t)> & fn,
                  size_t min_chunk = 1);

}  // namespace offgrid::ops
