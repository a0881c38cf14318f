#include "server/stream_tuning.h"

#include <chrono>

namespace epq::server {

StreamTuning::StreamTuning(std::shared_ptr<StreamGate> gate, std::function<DecodeTotals()> decode_totals,
                           std::function<void(const std::string &)> log)
    : gate_(std::move(gate)),
      decode_totals_(std::move(decode_totals)),
      log_(std::move(log)),
      tuner_(gate_->counters().max_capacity),
      thread_([this] { loop(); }) {
    gate_->set_capacity(status().streams);  // before any request: the thread's first look is 0.5 s away
}

StreamTuning::~StreamTuning() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

StreamTuner::Status StreamTuning::status() const {
    std::lock_guard<std::mutex> lk(mu_);
    return tuner_.status();
}

void StreamTuning::loop() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            if (cv_.wait_for(lk, std::chrono::milliseconds(500), [this] { return stop_; })) {
                return;
            }
        }
        // Sampled outside the lock: the pager's statistics may wait for a layer to finish.
        const DecodeTotals t = decode_totals_();
        int streams = 0;
        std::string said;
        {
            std::lock_guard<std::mutex> lk(mu_);
            const uint64_t changes = tuner_.status().lowered + tuner_.status().raised;
            streams = tuner_.observe(t);
            if (tuner_.status().lowered + tuner_.status().raised != changes) {
                said = "decode streams " + tuner_.status().last_change;
            }
        }
        gate_->set_capacity(streams);
        if (!said.empty()) {
            log_(said);
        }
    }
}

}  // namespace epq::server
