// The stream tuner (sched/stream_tuner.h) run beside `epq serve`: a thread that reads, about
// twice a second, the gate's time with a request generating and the pager's time waiting on
// reads, and sets the gate's capacity to what the tuner decides. Each change is said in the log.
#pragma once

#include "sched/stream_gate.h"
#include "sched/stream_tuner.h"

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace epq::server {

class StreamTuning {
public:
    // `read_wait_seconds`: the pager's running total of time compute waited on reads.
    StreamTuning(std::shared_ptr<StreamGate> gate, std::function<double()> read_wait_seconds,
                 std::function<void(const std::string &)> log);
    ~StreamTuning();  // stops and joins the thread
    StreamTuning(const StreamTuning &) = delete;
    StreamTuning & operator=(const StreamTuning &) = delete;

    StreamTuner::Status status() const;

private:
    void loop();

    std::shared_ptr<StreamGate> gate_;
    std::function<double()> read_wait_seconds_;
    std::function<void(const std::string &)> log_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    StreamTuner tuner_;
    std::thread thread_;  // last: started once everything it reads is set
};

}  // namespace epq::server
