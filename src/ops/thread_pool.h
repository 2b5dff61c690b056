// A small fixed pool of worker threads for the heavy kernels. Work is split into contiguous index ranges
// (parallel_for: ranges that depend only on n and the thread count; parallel_claims: ranges claimed as threads come
// free, for work whose every index is computed on its own), and each range is computed by exactly one thread
// with the same arithmetic as the scalar path, so results never depend on the number of threads. Ranges are claimed, not
// assigned: on a busy machine a worker that is not scheduled in time leaves its range to whoever is free, so
// the caller never waits for a thread that has not started.
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
#include <unordered_map>
#include <vector>

namespace offgrid::ops {

// The bytes a pool job streams: `key` names the job for the read-ahead (the same key each time the same job
// runs), [first, first + first_bytes) is what it reads first.
struct StreamedBytes {
    const void * key = nullptr;
    const uint8_t * first = nullptr;
    size_t first_bytes = 0;
};

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

    // Calls fn(part) once for every part in [0, n_parts), each on one thread; blocks until all are done.
    // Same rules as parallel_for.
    void run_parts(int n_parts, const std::function<void(int)> & fn);

    // Calls fn(begin, end) on disjoint ranges covering [0, n), claimed by the threads as they come free: each claim
    // takes a quarter of what is left per thread pair (1 / (2 n_threads)), at least min_chunk. The first claims are
    // large (few hand-offs), the last ones min_chunk, so the threads finish within one small range of each other.
    // Where the ranges fall depends on timing: only for work in which every index is computed on its own, with
    // the same arithmetic whoever computes it (the weight products). Same rules as parallel_for otherwise.
    // With streamed, the job reads those bytes (a weight product: see the read-ahead below).
    void parallel_claims(size_t n, const std::function<void(size_t, size_t)> & fn, size_t min_chunk = 1,
                         const StreamedBytes * streamed = nullptr);

    // Read-ahead. A decode step runs the same weight products in the same order token after token, with work on
    // the caller alone in between (norms, gates, routing, selection) while the memory bus idles. Between
    // begin_read_ahead and end_read_ahead the pool learns which product follows which (by StreamedBytes::key).
    // Once the same successor has been seen twice in a row, idle threads (workers waiting for a job, the caller
    // waiting for the last part) read its first bytes into the caches while the caller is still busy, so the
    // product starts on cached rows. Reading ahead changes no result, only where bytes come from. Every
    // StreamedBytes given in that window must stay mapped until end_read_ahead returns (the model's weights:
    // end_read_ahead waits for any read in flight). Called by the pool's one caller, like the jobs.
    void begin_read_ahead();
    void end_read_ahead();
    // Bytes read ahead so far, and whether a range is published to be read (for tests and measurements).
    uint64_t read_ahead_bytes() const { return ahead_chunks_read_.load(std::memory_order_relaxed) * 4096; }
    bool read_ahead_published() const { return ahead_.load() != 0; }

private:
    void worker_loop();
    void stop_workers();  // wakes every worker with stop_ set and joins it
    // Claims and runs parts of generation gen until none is left; false when the job is no longer gen's.
    void claim_parts(uint32_t gen);
    // Waits (spin, then sleep) until the published generation differs from seen, or stop; returns it.
    uint32_t wait_for_job(uint32_t seen);
    void run_parts_locked(int n_parts, const std::function<void(int)> & fn);  // call_mutex_ held
    // Learns the job after the previous one and publishes the read-ahead of the job expected after this one.
    void learn_and_read_ahead(const StreamedBytes & s);
    bool read_ahead_chunk();  // reads one chunk of the read-ahead if one is left; false when none

    // The ticket: generation (high 32 bits), part count (bits 16-31), next part to claim (bits 0-15).
    static uint64_t ticket(uint32_t gen, uint32_t parts, uint32_t next) {
        return (static_cast<uint64_t>(gen) << 32) | (static_cast<uint64_t>(parts) << 16) | next;
    }

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex call_mutex_;  // serialises callers (uncontended in the engine: one context, one caller)

    // The current job, written by the caller before the ticket that publishes it and stable until every part
    // is done (a worker reads it only after a successful claim).
    const std::function<void(int)> * job_ = nullptr;
    std::atomic<uint64_t> ticket_{0};
    std::atomic<int> parts_done_{0};
    uint32_t generation_ = 0;  // the caller's own copy of the current generation

    // Read-ahead: the caller's table of successors (touched under call_mutex_ only) and the published range, one
    // word so that a reader sees a consistent pair: address (low 48 bits) and length in chunks (high 16 bits).
    struct Successor {
        const uint8_t * first = nullptr;
        size_t bytes = 0;
        bool confirmed = false;  // the same successor twice in a row
    };
    bool read_ahead_on_ = false;
    const void * last_key_ = nullptr;
    std::unordered_map<const void *, Successor> successors_;
    std::atomic<uint64_t> ahead_{0};
    std::atomic<uint32_t> ahead_next_{0};  // next chunk to read
    std::atomic<int> ahead_readers_{0};    // threads between loading ahead_ and finishing their chunk
    std::atomic<uint64_t> ahead_chunks_read_{0};

    std::mutex error_mutex_;
    std::exception_ptr error_;

    // The sleeping side (off the hot path).
    std::mutex sleep_mutex_;
    std::condition_variable wake_;
    std::atomic<int> sleepers_{0};
    std::atomic<bool> stop_{false};
};

// Runs fn over [0, n) on the pool, or inline when pool is null.
void parallel_for(ThreadPool * pool, size_t n, const std::function<void(size_t, size_t)> & fn,
                  size_t min_chunk = 1);
// ThreadPool::parallel_claims on the pool, or fn(0, n) inline when pool is null.
void parallel_claims(ThreadPool * pool, size_t n, const std::function<void(size_t, size_t)> & fn,
                     size_t min_chunk = 1, const StreamedBytes * streamed = nullptr);

// begin_read_ahead / end_read_ahead around a scope (nothing when pool is null).
class ReadAheadScope {
public:
    explicit ReadAheadScope(ThreadPool * pool) : pool_(pool) {
        if (pool_) pool_->begin_read_ahead();
    }
    ~ReadAheadScope() {
        if (pool_) pool_->end_read_ahead();
    }
    ReadAheadScope(const ReadAheadScope &) = delete;
    ReadAheadScope & operator=(const ReadAheadScope &) = delete;

private:
    ThreadPool * pool_;
};

}  // namespace offgrid::ops
