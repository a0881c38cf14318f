#include "sched/stream_gate.h"

#include <algorithm>
#include <chrono>

namespace epq {

StreamCapacity streams_that_fit(const StreamFit & f) {
    const int np = std::max(1, f.n_parallel);
    if (f.holds_everything || f.n_expert_used <= 0) {
        return {np, "the arena holds every expert"};
    }
    const uint64_t per_stream = static_cast<uint64_t>(kWorkingSetFactor) * static_cast<uint64_t>(f.n_expert_used);
    const int fit = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(np), f.slots_per_layer / per_stream));
    const int streams = std::max(1, fit);
    const std::string why = "the arena holds " + std::to_string(f.slots_per_layer) + " experts per layer of " +
                            std::to_string(f.n_expert) + "; a stream works on about " + std::to_string(per_stream) +
                            " (" + std::to_string(kWorkingSetFactor) + " x top-" + std::to_string(f.n_expert_used) +
                            ")";
    return {streams, why};
}

StreamGate::StreamGate(int capacity) : capacity_(std::max(1, capacity)) {
    c_.max_capacity = capacity_;  // c_.capacity is filled from capacity_ by counters()
}

void StreamGate::set_capacity(int capacity) {
    std::lock_guard<std::mutex> lk(mu_);
    capacity_ = std::clamp(capacity, 1, c_.max_capacity);
    cv_.notify_all();  // a raised capacity admits the oldest waiters now
}

StreamGate::Permit StreamGate::acquire(const std::function<bool()> & stop) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lk(mu_);
    const uint64_t ticket = next_ticket_++;
    queue_.push_back(ticket);
    bool waited = false;
    // Admitted in arrival order: only the oldest waiter takes a free place.
    const auto admissible = [&] { return active_ < capacity_ && queue_.front() == ticket; };
    while (!admissible()) {
        waited = true;
        if (stop) {
            cv_.wait_for(lk, std::chrono::milliseconds(100));
            if (!admissible() && stop()) {
                queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
                cv_.notify_all();  // the next waiter may now be the oldest
                return nullptr;
            }
        } else {
            cv_.wait(lk);
        }
    }
    queue_.pop_front();
    if (active_++ == 0) {
        busy_since_ = std::chrono::steady_clock::now();
    }
    ++c_.admitted;
    if (waited) {
        ++c_.waited;
        c_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    cv_.notify_all();  // another place may still be free for the next in line
    // The permit's deleter gives the place back; the pointee is only a non-null token.
    return Permit(this, [](void * g) { static_cast<StreamGate *>(g)->release(); });
}

void StreamGate::release() {
    std::lock_guard<std::mutex> lk(mu_);
    if (--active_ == 0) {
        c_.busy_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    }
    cv_.notify_all();
}

double StreamGate::busy_seconds_locked() const {
    double s = c_.busy_seconds;
    if (active_ > 0) {
        s += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    }
    return s;
}

StreamGate::Counters StreamGate::counters() const {
    std::lock_guard<std::mutex> lk(mu_);
    Counters c = c_;
    c.capacity = capacity_;
    c.active = active_;
    c.busy_seconds = busy_seconds_locked();
    c.waiting = static_cast<int>(queue_.size());
    return c;
}

}  // namespace epq
