#include "ops/thread_pool.h"

#include <algorithm>
#include <exception>

namespace offgrid::ops {

namespace {

// Part p of n_parts over [0, n): contiguous, sizes differ by at most one.
void part_range(size_t n, int n_parts, int p, size_t & begin, size_t & end) {
    const size_t base = n / n_parts;
    const size_t extra = n % n_parts;
    begin = p * base + std::min<size_t>(p, extra);
    end = begin + base + (static_cast<size_t>(p) < extra ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    for (int i = 1; i < n_threads_; ++i) {
        workers_.emplace_back([this, i] { worker_loop(i); });
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto & w : workers_) w.join();
}

void ThreadPool::worker_loop(int index) {
    unsigned long seen = 0;
    for (;;) {
        const std::function<void(size_t, size_t)> * job;
        size_t n;
        int parts;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            n = job_n_;
            parts = job_parts_;
        }
        if (index < parts) {
            size_t begin, end;
            part_range(n, parts, index, begin, end);
            try {
                if (begin < end) (*job)(begin, end);
            } catch (...) {
                std::lock_guard<std::mutex> lock(mutex_);
                if (!error_) error_ = std::current_exception();
            }
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (--pending_ == 0) done_.notify_one();
        }
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
    {
        std::lock_guard<std::mutex> lock(mutex_);
        job_ = &fn;
        job_n_ = n;
        job_parts_ = parts;
        pending_ = static_cast<int>(workers_.size());
        error_ = nullptr;
        ++generation_;
    }
    wake_.notify_all();
    size_t begin, end;
    part_range(n, parts, 0, begin, end);
    std::exception_ptr own;
    try {
        fn(begin, end);
    } catch (...) {
        own = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
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
