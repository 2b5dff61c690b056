#include "ops/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

#include "common/error.h"

namespace offgrid::ops {

namespace {

// An idle worker polls for the next job this long before it sleeps: the jobs of a decode step come a few
// microseconds apart, and the gap between two steps (sampling, bookkeeping) is usually below this, so a
// worker sleeps only when the engine is idle. A wake-up from sleep costs tens of microseconds.
constexpr auto kWorkerSpin = std::chrono::microseconds(200);
// The caller waiting for the last part spins this long, then yields its core on every poll (on a busy
// machine the worker it waits for may need that core).
constexpr auto kCallerSpin = std::chrono::microseconds(50);
constexpr int kPollsPerClockRead = 64;
constexpr uint32_t kMaxParts = 0xffff;
// parallel_for cuts a job into up to this many ranges per thread, claimed in order: a thread that is slowed down
// (another process on its core, a busier memory channel) leaves the later ranges to the others, so the caller
// waits for one range at most instead of half the job.
constexpr size_t kPartsPerThread = 4;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

inline uint32_t generation_of(uint64_t t) { return static_cast<uint32_t>(t >> 32); }
inline uint32_t parts_of(uint64_t t) { return static_cast<uint32_t>(t >> 16) & 0xffff; }
inline uint32_t next_of(uint64_t t) { return static_cast<uint32_t>(t) & 0xffff; }

// Part p of n_parts over [0, n): contiguous, sizes differ by at most one.
void part_range(size_t n, size_t n_parts, size_t p, size_t & begin, size_t & end) {
    const size_t base = n / n_parts;
    const size_t extra = n % n_parts;
    begin = p * base + std::min(p, extra);
    end = begin + base + (p < extra ? 1 : 0);
}

thread_local int t_thread_index = 0;
thread_local Workspace * t_workspace = nullptr;

}  // namespace

int ThreadPool::thread_index() { return t_thread_index; }
Workspace * ThreadPool::bound_workspace() { return t_workspace; }
void ThreadPool::set_bound_workspace(Workspace * ws) { t_workspace = ws; }

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    if (n_threads_ > kMaxThreads) {
        throw Error("thread pool: " + std::to_string(n_threads_) + " threads requested, at most " +
                    std::to_string(kMaxThreads));
    }
    try {
        workers_.reserve(static_cast<size_t>(n_threads_ - 1));
        for (int i = 1; i < n_threads_; ++i) {
            workers_.emplace_back([this, i] {
                t_thread_index = i;
                worker_loop();
            });
        }
    } catch (const std::exception & e) {
        // The destructor does not run for a constructor that throws: stop and join the workers that started,
        // or their std::thread objects would end the process (and the condition variable dies under them).
        const size_t started = workers_.size();
        stop_workers();
        throw Error("thread pool: could not start thread " + std::to_string(started + 1) + " of " +
                    std::to_string(n_threads_) + " (" + e.what() + "); try fewer threads with -t");
    }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    stop_.store(true);
    {
        std::lock_guard<std::mutex> lock(sleep_mutex_);
    }
    wake_.notify_all();
    for (auto & w : workers_) w.join();
    workers_.clear();
}

uint32_t ThreadPool::wait_for_job(uint32_t seen) {
    using clock = std::chrono::steady_clock;
    const auto give_up = clock::now() + kWorkerSpin;
    for (int polls = 1;; ++polls) {
        const uint32_t gen = generation_of(ticket_.load(std::memory_order_acquire));
        if (gen != seen || stop_.load(std::memory_order_relaxed)) return gen;
        cpu_relax();
        if (polls % kPollsPerClockRead == 0 && clock::now() > give_up) break;
    }
    // Sleep. The sleeper count and the ticket are both sequentially consistent: either the caller sees this
    // worker counted (and notifies under the mutex), or this worker sees the new ticket before it waits.
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    sleepers_.fetch_add(1);
    uint32_t gen = generation_of(ticket_.load());
    while (gen == seen && !stop_.load()) {
        wake_.wait(lock);
        gen = generation_of(ticket_.load());
    }
    sleepers_.fetch_sub(1);
    return gen;
}

void ThreadPool::claim_parts(uint32_t gen) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
        if (generation_of(t) != gen || next_of(t) >= parts_of(t)) return;
        if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
        // The claim succeeded, so job_ is generation gen's and stays so until this part is counted done.
        try {
            t_workspace = job_workspace_;  // the caller's own binding when the caller runs the part
            (*job_)(static_cast<int>(next_of(t)));
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
        }
        parts_done_.fetch_add(1, std::memory_order_release);
        t = ticket_.load(std::memory_order_acquire);
    }
}

void ThreadPool::worker_loop() {
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_job(seen);
        if (stop_.load()) return;
        claim_parts(seen);
    }
}

void ThreadPool::run_parts(int n_parts, FunctionRef<void(int)> fn) {
    if (n_parts <= 0) return;
    if (n_parts == 1 || n_threads_ == 1) {
        for (int p = 0; p < n_parts; ++p) fn(p);
        return;
    }
    if (static_cast<uint32_t>(n_parts) > kMaxParts) {
        throw Error("thread pool: " + std::to_string(n_parts) + " parts in one job, at most " + std::to_string(kMaxParts));
    }
    std::lock_guard<std::mutex> serial(call_mutex_);
    job_ = &fn;
    job_workspace_ = t_workspace;
    error_ = nullptr;
    parts_done_.store(0, std::memory_order_relaxed);
    ++generation_;
    ticket_.store(ticket(generation_, static_cast<uint32_t>(n_parts), 0));  // publishes job_ (seq_cst)
    if (sleepers_.load() > 0) {
        { std::lock_guard<std::mutex> lock(sleep_mutex_); }
        wake_.notify_all();
    }
    claim_parts(generation_);
    // Every part is claimed now; wait for the ones still running elsewhere.
    using clock = std::chrono::steady_clock;
    clock::time_point spin_end{};
    for (int polls = 1; parts_done_.load(std::memory_order_acquire) < n_parts; ++polls) {
        cpu_relax();
        if (polls % kPollsPerClockRead != 0) continue;
        const auto now = clock::now();
        if (spin_end == clock::time_point{}) {
            spin_end = now + kCallerSpin;
        } else if (now > spin_end) {
            std::this_thread::yield();
        }
    }
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(size_t n, FunctionRef<void(size_t, size_t)> fn, size_t min_chunk) {
    if (n == 0) return;
    const size_t chunk = std::max<size_t>(1, min_chunk);
    const size_t parts = std::min<size_t>(static_cast<size_t>(n_threads_) * kPartsPerThread, (n + chunk - 1) / chunk);
    if (parts <= 1) {
        fn(0, n);
        return;
    }
    run_parts(static_cast<int>(parts), [&](int p) {
        size_t begin, end;
        part_range(n, parts, static_cast<size_t>(p), begin, end);
        if (begin < end) fn(begin, end);
    });
}

void ThreadPool::parallel_claims(size_t n, FunctionRef<void(size_t, size_t)> fn, size_t min_chunk) {
    if (n == 0) return;
    const size_t chunk = std::max<size_t>(1, min_chunk);
    if (n_threads_ == 1 || n <= chunk) {
        fn(0, n);
        return;
    }
    const size_t divisor = 2 * static_cast<size_t>(n_threads_);
    alignas(64) std::atomic<size_t> next{0};  // the first index nobody has claimed
    run_parts(n_threads_, [&](int) {
        size_t begin = next.load(std::memory_order_relaxed);
        while (begin < n) {
            const size_t left = n - begin;
            const size_t take = std::min(left, std::max(chunk, left / divisor));
            if (next.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed)) {
                fn(begin, begin + take);
                begin = next.load(std::memory_order_relaxed);
            }
        }
    });
}

void parallel_for(ThreadPool * pool, size_t n, FunctionRef<void(size_t, size_t)> fn, size_t min_chunk) {
    if (pool) {
        pool->parallel_for(n, fn, min_chunk);
    } else if (n > 0) {
        fn(0, n);
    }
}

void parallel_claims(ThreadPool * pool, size_t n, FunctionRef<void(size_t, size_t)> fn, size_t min_chunk) {
    if (pool) {
        pool->parallel_claims(n, fn, min_chunk);
    } else if (n > 0) {
        fn(0, n);
    }
}

}  // namespace offgrid::ops
