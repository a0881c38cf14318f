// Which bound a benchmark row's time per token sits on, from the figures measured in its runs:
// compute (the CPU time a token takes with every expert resident), reads (time blocked on
// expert reads), repack (CPU the read threads spend rewriting experts into ggml's repacked
// layout, taken from the same cores), or scheduling (the rest: the pager's own work, graph
// splits, thread wake-ups). Pure arithmetic, so it is unit-tested alone.
#pragma once

#include <string>

namespace epq {

struct TimeParts {
    double total = 0;       // measured seconds per token (1 / tok/s)
    double compute = 0;     // the compute floor, seconds per token
    double read_wait = 0;   // measured seconds per token blocked on reads
    double repack = 0;      // measured repack CPU seconds per token
    double read_floor = 0;  // the bytes those reads needed / the measured read bandwidth
};

struct TimeBound {
    std::string name;  // "compute", "reads", "repack" or "scheduling"
    double seconds = 0;
    std::string detail;  // every part in ms, for the report
};

// Repack runs while decode waits for the slot it fills, so it is counted out of the wait first;
// what the wait does not cover took CPU from the compute threads and shows in the rest.
TimeBound time_bound(const TimeParts & t);

}  // namespace epq
