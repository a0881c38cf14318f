// What `epq simulate` reads from its options and shows: arena sizes in, a table and JSON out.
#pragma once

#include "sim/cache_sim.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace epq {

// "2G,4G,6GiB" -> bytes; throws epq::Error naming the item that is not a size.
std::vector<uint64_t> parse_arena_sizes(const std::string & text);

// 25%, 50% and 75% of the model's expert bytes, each raised to the minimum arena (k experts
// of the largest class) so that every default can run; duplicates dropped.
std::vector<uint64_t> default_arena_sizes(const TraceHeader & h);

// One row per arena size (results as simulate_all gives them): hit rates, each policy's hit
// rate as a fraction of belady's, and GiB missed per step.
std::string sim_table(const TraceHeader & h, uint64_t steps, const std::vector<SimResult> & results);
nlohmann::json sim_json(const TraceHeader & h, uint64_t steps, const std::vector<SimResult> & results);

}  // namespace epq
