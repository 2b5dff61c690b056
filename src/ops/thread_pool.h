// A small fixed pool of worker threads for the heavy kernels. Work is split into contiguous index ranges, and
// each index is computed by exactly one thread with the same arithmetic as the scalar path, so results never
// depend on the number of threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace offgrid::ops {

class ThreadPool {
public:
    // n_threads counts the calling thread: 1 means no workers (everything runs inline).
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

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex call_mutex_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable done_;
    const std::function<void(size_t, size_t)> * job_ = nullptr;
    size_t job_n_ = 0;
    int job_parts_ = 0;
    unsigned long generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

// Runs fn over [0, n) on the pool, or inline when pool is null.
void parallel_for(ThreadPool * pool, size_t n, const std::function<void(size_t, size_t)> & fn,
                  size_t min_chunk = 1);

}  // namespace offgrid::ops
