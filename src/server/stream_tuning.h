// The stream tuner (sched/stream_tuner.h) run beside `epq serve`: a thread that reads, about
// twice a second, the pager's decode-step totals: their time, the part of it spent waiting on
// reads and their tokens (prompts' batches are left out: they read what a prompt selects, however
// many generate), and
// sets the gate's capacity to what the tuner decides. Each change is said in the log.
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
    using DecodeTotals = StreamTuner::DecodeTotals;
    StreamTuning(std::shared_ptr<StreamGate> gate, std::function<DecodeTotals()> decode_totals,
                 std::function<void(const std::string &)> log);
    ~StreamTuning();  // stops and joins the thread
    StreamTuning(const StreamTuning &) = delete;
    StreamTuning & operator=(const StreamTuning &) = delete;

    StreamTuner::Status status() const;

private:
    void loop();

    std::shared_ptr<StreamGate> gate_;
    std::function<DecodeTotals()> decode_totals_;
    std::function<void(const std::string &)> log_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stop_ = false;
    StreamTuner tuner_;
    std::thread thread_;  // last: started once everything it reads is set
};

}  // namespace epq::server
