// A few threads that serve positional reads in FIFO order, so several expert reads are in
// flight at once (an SSD only reaches its bandwidth with a queue of requests). Each submitted
// group of reads returns a Ticket to wait on; errors travel with the ticket.
#pragma once

#include "io/model_reader.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace epq {

struct ReadRequest {
    uint64_t offset = 0;
    uint64_t len = 0;
    uint8_t * dst = nullptr;
    uint64_t room_before = 0;
    uint64_t room_after = 0;
    // Run on the read thread once the bytes are in place (not after a failed read): work that
    // must happen before anyone uses them, such as rewriting them in another layout.
    std::function<void(uint8_t * dst)> then;
};

class Ticket {
public:
    // Blocks until every read of the group finished; throws epq::Error if one failed.
    void wait();
    bool done();

private:
    friend class ReadPool;
    std::mutex mu_;
    std::condition_variable cv_;
    size_t remaining_ = 0;
    std::string error_;
};

struct ReadStats {
    uint64_t requests = 0;
    uint64_t bytes = 0;
    double busy_seconds = 0.0;  // summed over threads
    double wall_seconds = 0.0;  // time with at least one read in flight: bytes / this is the bandwidth
    double then_seconds = 0.0;  // in the requests' `then` work, summed over threads (not in the above)
    double cpu_seconds = 0.0;   // CPU time the read threads spent reading (syscalls, copies), not waiting
};

class ReadPool {
public:
    ReadPool(const ModelReader & reader, int n_threads);
    ~ReadPool();
    ReadPool(const ReadPool &) = delete;
    ReadPool & operator=(const ReadPool &) = delete;

    // `urgent`: a computation waits for these now (a miss); they go before every read that is
    // not (reads started ahead on a guess), which would otherwise delay it by their length.
    std::shared_ptr<Ticket> submit(const std::vector<ReadRequest> & reads, bool urgent = true);
    ReadStats stats();
    // Finishes every read already submitted (their `then` work included) and stops the threads,
    // so that no read can write into memory the caller is about to free. Submitting afterwards
    // is an error; calling it again (or the destructor after it) does nothing.
    void join();

private:
    struct Job {
        ReadRequest req;
        std::shared_ptr<Ticket> ticket;
    };
    void worker();

    const ModelReader & reader_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> queue_;  // urgent reads first, in submission order, then the others
    size_t n_urgent_ = 0;    // the urgent reads at the queue's front
    bool stop_ = false;
    ReadStats stats_;
    int active_ = 0;
    std::chrono::steady_clock::time_point active_since_;
    std::vector<std::thread> threads_;
};

}  // namespace epq
