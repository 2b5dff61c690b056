#include "server/connection_pool.h"

#include <algorithm>
#include <system_error>

namespace offgrid::server {

ConnectionPool::ConnectionPool(size_t base_threads, size_t max_threads) : max_(std::max<size_t>(max_threads, 1)) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < std::min(base_threads, max_); ++i) threads_.emplace_back([this] { work(); });
}

ConnectionPool::~ConnectionPool() { shutdown(); }

void ConnectionPool::enqueue(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        jobs_.push_back(std::move(fn));
        // Every queued job needs a free thread of its own; start one when there is none to take it.
        if (jobs_.size() > idle_ && threads_.size() < max_) {
            try {
                threads_.emplace_back([this] { work(); });
            } catch (const std::system_error &) {
                // No thread to be had (a thread or memory limit): the job waits for a busy one to finish.
            }
        }
    }
    cv_.notify_one();
}

void ConnectionPool::shutdown() {
    std::vector<std::thread> threads;
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
        threads.swap(threads_);
    }
    cv_.notify_all();
    for (auto & t : threads) {
        if (t.joinable()) t.join();
    }
}

size_t ConnectionPool::threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_.size();
}

void ConnectionPool::work() {
    for (;;) {
        std::function<void()> job;
        {
            std::unique_lock<std::mutex> lock(mu_);
            ++idle_;
            cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
            --idle_;
            // Jobs queued before shutdown still run: each closes its socket (at once, the server has stopped).
            if (jobs_.empty()) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        job();
    }
}

}  // namespace offgrid::server
