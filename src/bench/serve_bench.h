// epq bench --streams: `epq serve` driven by 1, 2, 4, 8 ... concurrent streaming requests,
// against the same server on stock llama.cpp (--no-pager) at the same concurrency and cap. For
// each concurrency it reports aggregate decode tok/s, p50/p95 time to first token, and the
// roofline: N tokens per step / max(compute per step with every expert resident, missed expert
// bytes per step / measured read bandwidth).
//
// Each server is a child process (under scripts/memcap.sh when capped), driven over loopback
// HTTP like any client; decode figures come from the server's own /metrics counters, sampled
// once every stream the server lets generate at once has its first token and again when the first
// stream ends, so the window holds only decode steps of those streams (all N, unless epq serve's
// --decode-streams holds some back). The time for all N requests to finish is reported beside it.
#pragma once

#include "bench/bench.h"
#include "util/child_process.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace epq {

// The figures of one server run at one concurrency.
struct StreamRun {
    bool ok = false;
    std::string error;
    std::string memcap_line;
    int streams = 0;
    int generating = 0;                // of them, how many the server lets generate at once (at the end)
    int generating_at_start = 0;       // when the server's tuner changed that during the run (else 0)
    std::vector<double> ttft_seconds;  // one per stream
    double decode_tps = 0;       // aggregate: while all streams generate, or (queued) over the pager's decode steps
    double decode_step_tps = 0;  // epq: tokens of the pager's decode steps per second of them (0: stock)
    double all_seconds = 0;      // from the requests sent to the last one done
    double end_to_end_tps = 0;   // every stream's tokens / all_seconds (prompts and waits included)
    double steps = 0;            // decode steps in the window
    double tokens_per_step = 0;  // queued: the pager's decode-step tokens per step (0: `generating`)
    double step_seconds = 0;     // per decode step
    double wait_per_step = 0;    // of which blocked on expert reads
    double missed_per_step = 0;  // expert bytes the misses needed
    double read_per_step = 0;    // bytes read (prefetch included)
    double hit_rate = 0;         // queued: of the decode steps' lookups
    uint64_t arena_bytes = 0;
};

// Waits until the `epq serve` child `p` is ready ("listening on http://127.0.0.1:PORT" on its
// stderr, then " ready in ") and returns the port. Throws epq::Error when it exits first or
// `timeout_seconds` pass.
int wait_until_serving(BackgroundProcess & p, double timeout_seconds);

// Nearest-rank percentile (p in 0..100) of `v`; 0 when empty.
double percentile(std::vector<double> v, double p);

// The Prometheus text of /metrics as name -> value (comments and labels skipped).
std::vector<std::pair<std::string, double>> parse_metrics_text(const std::string & text);

// Runs the concurrency benchmark for o.streams at every cap in o.memcaps. Returns the exit code.
int run_stream_bench(const BenchOptions & o);

}  // namespace epq
