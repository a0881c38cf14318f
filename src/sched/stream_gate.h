// How many requests of `epq serve` generate at once, and the queue the others wait in.
//
// Under a memory cap every decode step of every generating request needs its experts in the
// arena. One stream's recent experts fit; the union of many streams' does not, and then each
// step evicts what the next needs (measured on the 30B preset under 8 GiB with every slot
// generating: 1 stream 6.61 tok/s, 8 streams 3.44 tok/s together). llama-server forms each
// step's batch from every generating slot inside its server library, where epq has no hook; so
// the requests are admitted at the HTTP layer instead: at most `capacity` of them run at once,
// the rest wait in arrival order, and aggregate decode stays at what the arena sustains. Pure:
// no llama.cpp here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace epq {

// What decides how many streams the arena can decode at once.
struct StreamFit {
    int n_parallel = 1;             // the server's slots (-np)
    bool holds_everything = false;  // the arena has a slot for every expert
    uint64_t slots_per_layer = 0;   // arena slots one layer's experts can count on (the total / layers)
    int n_expert = 0;               // routed experts per layer
    int n_expert_used = 0;          // experts each token selects per layer
};

// The number of requests that may generate at once (1 .. n_parallel), and why.
struct StreamCapacity {
    int streams = 1;
    std::string why;
};

// Every slot when the arena holds every expert (nothing is evicted). Otherwise one stream per
// kWorkingSetFactor x n_expert_used slots of a layer: a stream keeps coming back to more experts
// than it selects in one step (its working set), and the arena must hold the working sets of the
// streams it decodes together, or every step evicts what the next needs. The factor is measured:
// on the 30B preset under 8 GiB (41 of 128 experts per layer, top-8) 2 streams decoded 7.20 tok/s
// together against 6.61 for one, and 4 streams 5.25 (hit rate 98% -> 94% -> 78%).
constexpr int kWorkingSetFactor = 2;
StreamCapacity streams_that_fit(const StreamFit & f);

// A counting gate with first-come-first-served admission. acquire() blocks until the caller
// holds one of `capacity` places and returns a permit; dropping the permit frees the place for
// the longest waiter. The capacity can be changed while requests run (stream_tuner.h), between 1
// and the capacity it was made with; lowering it takes no place away, it only makes the next
// requests wait until the generating ones fall below it. Counters are for the server's metrics.
class StreamGate {
public:
    explicit StreamGate(int capacity);

    // Clamped to 1 .. max_capacity.
    void set_capacity(int capacity);

    using Permit = std::shared_ptr<void>;
    // Blocks until admitted. `stop` (polled every 100 ms) gives up: an empty permit is returned.
    Permit acquire(const std::function<bool()> & stop = nullptr);

    struct Counters {
        int capacity = 0;
        int max_capacity = 0;  // what the gate was made with: set_capacity's ceiling
        int active = 0;
        int waiting = 0;
        uint64_t admitted = 0;
        uint64_t waited = 0;      // of them, how many had to wait
        double wait_seconds = 0;  // total time spent waiting
        double busy_seconds = 0;  // time with at least one request generating
    };
    Counters counters() const;

private:
    void release();
    double busy_seconds_locked() const;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    int capacity_;
    int active_ = 0;
    uint64_t next_ticket_ = 0;                          // handed out on arrival
    std::deque<uint64_t> queue_;                        // the waiters' tickets, oldest first
    std::chrono::steady_clock::time_point busy_since_;  // when active_ last rose from 0
    Counters c_;
};

}  // namespace epq
