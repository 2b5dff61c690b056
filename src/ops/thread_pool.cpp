#include "ops/thread_pool.h"

#include <algorithm>
#include <exception>
#include <string>

#include "common/error.h"

namespace offgrid::ops {

namespace {

constexpr int kSpinPolls = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Part p of n_parts over [0, n): contiguous, sizes differ by at most one.
void part_range(size_t n, int n_parts, int p, size_t & begin, size_t & end) {
    const size_t base = n / n_parts;
    const size_t extra = n % n_parts;
    begin = p * base + std::min<size_t>(p, extra);
    end = begin + base + (static_cast<size_t>(p) < extra ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    if (n_threads_ > kMaxThreads) {
        throw Error("thread pool: " + std::to_string(n_threads_) + " threads requested, at most " +
                    std::to_string(kMaxThreads));
    }
    try {
        workers_.reserve(static_cast<size_t>(n_threads_ - 1));
        for (int i = 1; i < n_threads_; ++i) {
            workers_.emplace_back([this, i] { worker_loop(i); });
        }
    } catch (const std::exception & e) {
        // The destructor does not run for a constructor that throws: stop and join the workers that started,
        // or their std::thread objects would end the process (and the condition variables die under them).
        const size_t started = workers_.size();
        stop_workers();
        throw Error("thread pool: could not start thread " + std::to_string(started + 1) + " of " +
                    std::to_string(n_threads_) + " (" + e.what() + "); try fewer threads with -t");
    }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto & w : workers_) w.join();
    workers_.clear();
}

std::exception_ptr ThreadPool::claim_parts() {
    std::exception_ptr err;
    for (int p = next_part_.fetch_add(1); p < job_parts_; p = next_part_.fetch_add(1)) {
        size_t begin, end;
        part_range(job_n_, job_parts_, p, begin, end);
        try {
            if (begin < end) (*job_)(begin, end);
        } catch (...) {
            if (!err) err = std::current_exception();
        }
    }
    return err;
}

void ThreadPool::worker_loop(int /*index*/) {
    unsigned long seen = 0;
    for (;;) {
        // A forward pass issues many short jobs back to back: poll for the next one for a few microseconds
        // before paying for a sleep and a wake-up.
        for (int i = 0; i < kSpinPolls && generation_.load(std::memory_order_acquire) == seen; ++i) cpu_relax();
        {
            std::unique_lock<std::mutex> lock(mutex_);
            ++sleepers_;
            wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
            --sleepers_;
            if (stop_) return;
            seen = generation_;
            if (job_ == nullptr) continue;  // woke after the caller finished the job alone
            ++active_;
        }
        const std::exception_ptr err = claim_parts();
        std::lock_guard<std::mutex> lock(mutex_);
        if (err && !error_) error_ = err;
        if (--active_ == 0) done_.notify_one();
    }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)> & fn, size_t min_chunk) {
    if (n == 0) return;
    const size_t chunk = std::max<size_t>(1, min_chunk);
    const int parts = static_cast<int>(std::min<size_t>(n_threads_, (n + chunk - 1) / chunk));
    if (parts <= 1) {
        fn(0, n);
        return;
    }
    std::lock_guard<std::mutex> serial(call_mutex_);
    bool wake = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &fn;
        job_n_ = n;
        job_parts_ = parts;
        next_part_.store(0);
        active_ = 0;
        error_ = nullptr;
        generation_.fetch_add(1);
        wake = sleepers_ > 0;
    }
    if (wake) wake_.notify_all();
    const std::exception_ptr own = claim_parts();
    // Every range is claimed now; wait for the workers still running theirs, then close the job in the same
    // critical section, so a worker that wakes later finds no job.
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return active_ == 0; });
    job_ = nullptr;
    if (own) std::rethrow_exception(own);
    if (error_) std::rethrow_exception(error_);
}

void parallel_for(ThreadPool * pool, size_t n, const std::function<void(size_t, size_t)> & fn, size_t min_chunk) {
    if (pool) {
        pool->parallel_for(n, fn, min_chunk);
    } else if (n > 0) {
        fn(0, n);
    }
}

}  // namespace offgrid::ops
