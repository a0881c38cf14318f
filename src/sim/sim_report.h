// What `epq simulate` reads from its options and shows: arena sizes in, a table and JSON out.
#pragma once

#include "sim/cache_sim.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace epq {

// An arena size as given: bytes, or a share of the model's expert bytes ("12%"), which only the
// trace's header can turn into bytes.
struct ArenaSizeArg {
    uint64_t bytes = 0;
    double share = 0;  // > 0: a share of the expert bytes; bytes is then unused
};

// "2G,12%,6GiB" -> sizes; throws epq::Error naming the item that is neither a size nor a share.
std::vector<ArenaSizeArg> parse_arena_sizes(const std::string & text);

// Bytes for each size: shares of the trace's expert bytes, raised to the minimum arena (k
// experts of the largest class) so that each can run; duplicates dropped, order kept.
std::vector<uint64_t> resolve_arena_sizes(const TraceHeader & h, const std::vector<ArenaSizeArg> & sizes);

// The minimum arena, then 5%, 12%, 25%, 50% and 75% of the model's expert bytes: from an
// arena smaller than one token's working set to one that holds most of the model.
std::vector<uint64_t> default_arena_sizes(const TraceHeader & h);

// One row per arena size (results as simulate_all gives them): hit rates, each policy's hit
// rate as a fraction of belady's, and GiB missed per step.
std::string sim_table(const TraceHeader & h, uint64_t steps, const std::vector<SimResult> & results);
nlohmann::json sim_json(const TraceHeader & h, uint64_t steps, const std::vector<SimResult> & results);

}  // namespace epq
