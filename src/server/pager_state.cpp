#include "server/pager_state.h"

namespace epq::server {

nlohmann::json pager_state_json(const EngineCounters & e, const std::optional<PagerSnapshot> & pager,
                                const PagerView & v, double read_floor_bytes_per_second) {
    // The pager's figures are taken from the snapshot's one JSON form, under the same keys.
    const nlohmann::json p = pager ? pager->to_json() : PagerSnapshot{}.to_json();
    nlohmann::json j = {{"paged", pager.has_value()},
                        {"arena_bytes", p["arena_bytes"]},
                        {"policy", pager ? p["policy"] : nlohmann::json("")},
                        {"prefetch", p["prefetch"]["state"]},
                        {"repacked", p["repacked_matrices_per_expert"].get<uint64_t>() > 0},
                        {"read_floor_bytes_per_second", read_floor_bytes_per_second},
                        {"resident_experts", v.resident_experts},
                        {"total_experts", static_cast<uint64_t>(v.layers.size()) * v.n_expert},
                        {"views_taken", v.views_taken},
                        {"view_seconds_total", v.view_seconds}};
    j["counters"] = {{"tokens_predicted_total", e.tokens_predicted_total},
                     {"tokens_predicted_seconds_total", e.tokens_predicted_seconds_total},
                     {"prompt_tokens_total", e.prompt_tokens_total},
                     {"prompt_seconds_total", e.prompt_seconds_total}};
    for (const char * key : {"hits", "misses", "bytes_read", "read_seconds", "read_wait_seconds"}) {
        j["counters"][key] = p[key];
    }
    if (!v.cells.empty()) {
        j["heat"] = {{"layers", v.layers}, {"n_expert", v.n_expert}, {"batches", v.batches}, {"cells", v.cells}};
    }
    return j;
}

}  // namespace epq::server
