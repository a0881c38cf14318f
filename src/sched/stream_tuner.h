// How many requests of `epq serve` generate at once, corrected by what the running server measures.
//
// streams_that_fit (stream_gate.h) sets the most streams the arena can hold the working sets of.
// Whether they help depends on the routing as well: streams share a step's compute (the dense
// weights are read once per step, experts two streams select are computed together), but every
// expert one of them misses is read for it alone, and reads do not get faster with company. So
// while a step is mostly compute, more streams raise the aggregate; once it is mostly waiting on
// reads, another stream adds its reads and its evictions and the aggregate falls. Measured on the
// 30B preset under 8 GiB, 2 threads (epq bench --streams; a layer's own misses only): realistic
// routing, 2 streams waited on reads for 5-8% of each step and decoded 7.2 tok/s together, as
// fast as one; flat routing (little reuse), one stream waited 32% (66% counting the guessed reads
// a layer settles first) and decoded 2.7, two waited 65% and decoded 2.2 together; the 35B preset
// waited 0-9% at 1-4 streams and rose from 4.4 to 6.9 tok/s.
//
// The tuner reads that share, time blocked on reads over the time in decode steps (a prompt's
// batches are left out: they read what the prompt selects, whatever else generates), over
// windows of a few seconds: above `lower_above` it lets one stream fewer generate, below
// `raise_below` one more (up to the arena's figure), in between it holds. A share says whether
// reads dominate, not whether another stream pays: on two cores, two realistic-routing streams
// waited only 6-13% of their steps, yet decoded 6.98-7.58 tok/s together against 7.34-8.12 for
// one alone (the compute of a step of two is 0.83x that of two steps of one, and the second
// stream's misses ate the rest). So the tuner also keeps the decode-step rate (tokens per second
// of decode steps) it last measured at each level, and lets one fewer generate when a window
// decodes fewer tokens per second than the last window one level lower did. It starts at one
// stream: a request admitted runs to its end, so a level that turns out too high costs whole
// requests, while starting low costs a window per level. A level it had to leave is tried again
// after a wait that doubles each time it has to leave it again, so a workload that changes gets
// re-measured and one that does not is not disturbed often. Pure: no llama.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct StreamTunerOptions {
    double window_seconds = 5.0;  // time in decode steps that one decision looks at
    double lower_above = 0.5;     // read-wait share above which a stream fewer generates
    double raise_below = 0.25;    // read-wait share below which a stream more may generate
    int max_hold_windows = 32;    // the longest wait before a level that was left is tried again
    int start_streams = 1;        // the level before the first window (clamped to 1 .. max_streams)
};

class StreamTuner {
public:
    // Between 1 and `max_streams` (the arena's figure), starting at o.start_streams.
    explicit StreamTuner(int max_streams, StreamTunerOptions o = {});

    // Running totals of the pager's decode steps: their time, the part of it spent waiting on
    // expert reads, and the tokens they decoded.
    struct DecodeTotals {
        double seconds = 0, read_wait_seconds = 0, tokens = 0;
    };
    // One observation of the totals. Returns the number of streams to admit now.
    int observe(const DecodeTotals & t);

    struct Status {
        int streams = 1;
        int max_streams = 1;
        double last_share = -1;  // the last window's read-wait share; < 0 before the first
        double last_rate = -1;   // the last window's decode-step tokens per second; < 0 before the first
        uint64_t lowered = 0, raised = 0;
        std::string last_change;  // why the last change was made ("" when none was)
    };
    const Status & status() const { return s_; }

private:
    StreamTunerOptions o_;
    Status s_;
    bool started_ = false;
    DecodeTotals at0_;          // the totals when the current window began
    std::vector<double> rate_;  // [level]: the last window's decode-step rate there (< 0: none yet)
    int hold_ = 1;              // windows to wait before raising to a level that was left
    int hold_left_ = 0;
    bool probing_ = false;  // the last window raised the level
};

}  // namespace epq
