// The worker threads of the HTTP server (an httplib::TaskQueue): each connection runs on one thread from accept
// to close. A fixed pool starves as soon as every thread waits on an idle or slow client, and then even /health
// queues behind them; this pool starts a new thread whenever a connection arrives and no thread is free, up to a
// hard limit, so a fresh request is served at once unless `max_threads` connections are open at the same time.
//
// Invariants: threads() <= max_threads; threads are never stopped before shutdown() (an idle one waits for the
// next connection); shutdown() lets the queued jobs finish and joins the threads; enqueue() after it drops the job.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace offgrid::server {

class ConnectionPool : public httplib::TaskQueue {
public:
    ConnectionPool(size_t base_threads, size_t max_threads);
    ~ConnectionPool() override;
    void enqueue(std::function<void()> fn) override;
    void shutdown() override;
    size_t threads() const;

private:
    void work();
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    std::vector<std::thread> threads_;
    size_t idle_ = 0;
    size_t max_;
    bool stopping_ = false;
};

}  // namespace offgrid::server
