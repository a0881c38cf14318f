#include "io/read_pool.h"

#include "util/error.h"

#include <chrono>
#include <ctime>

namespace epq {

namespace {

double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void Ticket::wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return remaining_ == 0; });
    if (!error_.empty()) {
        throw Error(error_);
    }
}

bool Ticket::done() {
    std::lock_guard<std::mutex> lock(mu_);
    return remaining_ == 0;
}

ReadPool::ReadPool(const ModelReader & reader, int n_threads) : reader_(reader) {
    for (int i = 0; i < std::max(1, n_threads); ++i) {
        threads_.emplace_back([this] { worker(); });
    }
}

ReadPool::~ReadPool() {
    join();
}

void ReadPool::join() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    // A worker leaves only once the queue is empty, so every submitted read lands first.
    for (auto & t : threads_) {
        if (t.joinable()) {
            t.join();
        }
    }
}

std::shared_ptr<Ticket> ReadPool::submit(const std::vector<ReadRequest> & reads, bool urgent) {
    auto ticket = std::make_shared<Ticket>();
    ticket->remaining_ = reads.size();
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) {
            throw Error("internal: a read was submitted after the read pool stopped");
        }
        for (const auto & r : reads) {
            if (urgent) {
                queue_.insert(queue_.begin() + static_cast<std::ptrdiff_t>(n_urgent_++), Job{r, ticket});
            } else {
                queue_.push_back(Job{r, ticket});
            }
        }
    }
    cv_.notify_all();
    return ticket;
}

ReadStats ReadPool::stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
}

void ReadPool::worker() {
    for (;;) {
        Job job;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) {
                return;
            }
            job = std::move(queue_.front());
            queue_.pop_front();
            n_urgent_ -= n_urgent_ > 0;
            if (active_++ == 0) {
                active_since_ = std::chrono::steady_clock::now();
            }
        }
        std::string error;
        const double cpu0 = thread_cpu_seconds();
        const auto t0 = std::chrono::steady_clock::now();
        try {
            reader_.read(job.req.offset, job.req.len, job.req.dst, job.req.room_before, job.req.room_after);
        } catch (const std::exception & e) {
            error = e.what();
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double cpu = thread_cpu_seconds() - cpu0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            ++stats_.requests;
            stats_.bytes += job.req.len;
            stats_.busy_seconds += secs;
            stats_.cpu_seconds += cpu;
            if (--active_ == 0) {
                stats_.wall_seconds +=
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - active_since_).count();
            }
        }
        if (error.empty() && job.req.then) {
            const auto t1 = std::chrono::steady_clock::now();
            try {
                job.req.then(job.req.dst);
            } catch (const std::exception & e) {
                error = e.what();
            }
            const double then_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
            std::lock_guard<std::mutex> lock(mu_);
            stats_.then_seconds += then_secs;
        }
        {
            std::lock_guard<std::mutex> lock(job.ticket->mu_);
            if (!error.empty() && job.ticket->error_.empty()) {
                job.ticket->error_ = error;
            }
            if (--job.ticket->remaining_ == 0) {
                job.ticket->cv_.notify_all();
            }
        }
    }
}

}  // namespace epq
