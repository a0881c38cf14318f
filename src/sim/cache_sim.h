// Replays a routing trace against an arena of a given size, the way the pager uses it, to
// compare eviction policies (and the unreachable optimum, belady) without running the model.
#pragma once

#include "arena/slot_arena.h"
#include "arena/trace.h"

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct SimResult {
    std::string policy;  // a policy's name (replacement_policy.h); "+prefetch" when the trace's guesses were replayed
    uint64_t arena_bytes = 0;  // the budget asked for (the plan may use a little less)
    uint64_t accesses = 0;     // distinct experts per (step, layer), summed
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t bytes_missed = 0;  // misses x their class's slot_bytes: what the pager would read
    double hit_rate = 0;
    // With prefetch: the guesses' reads (experts not resident when guessed), and how many of
    // them the guessed layer then used. A demand use of a guessed read counts as a hit, as in a
    // run (its read started a layer early).
    uint64_t speculative_reads = 0;
    uint64_t speculative_bytes = 0;
    uint64_t speculative_used = 0;
};

struct SimOptions {
    std::string policy = kDefaultPolicy;
    // Replay the trace's guesses as decode prediction does: after a layer's experts are pinned,
    // the next layer's guessed experts are acquired (read when missing) and stay pinned until
    // that layer's own experts are pinned.
    bool prefetch = false;
};

// Plans the arena as the pager does (throws epq::Error below the minimum) and replays `t`:
// per (step, layer), the distinct experts in order of first use are pinned one after another,
// then all unpinned, like one expert matmul; a group the arena cannot pin at once goes in chunks.
SimResult simulate(const Trace & t, uint64_t arena_bytes, const SimOptions & o);
SimResult simulate(const Trace & t, uint64_t arena_bytes, const std::string & policy);

// Every policy of replacement_policies() (belady last) for each size, size by size; then, when
// the trace has guesses, the default policy with prefetch as the pager runs it.
std::vector<SimResult> simulate_all(const Trace & t, const std::vector<uint64_t> & arena_sizes);

// The number of batches (distinct consecutive steps) in `t`, to express results per step.
uint64_t count_steps(const Trace & t);

}  // namespace epq
