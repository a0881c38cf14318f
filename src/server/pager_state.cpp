#include "server/pager_state.h"

namespace epq::server {

nlohmann::json pager_state_json(const EngineCounters & e, const PagerCounters & p, const PagerView & v,
                                double read_floor_bytes_per_second) {
    nlohmann::json j = {{"paged", p.paged},
                        {"arena_bytes", p.arena_bytes},
                        {"policy", p.policy},
                        {"prefetch", p.prefetch},
                        {"repacked", p.repacked},
                        {"read_floor_bytes_per_second", read_floor_bytes_per_second},
                        {"resident_experts", v.resident_experts},
                        {"total_experts", static_cast<uint64_t>(v.layers.size()) * v.n_expert},
                        {"views_taken", v.views_taken},
                        {"view_seconds_total", v.view_seconds}};
    j["counters"] = {{"tokens_predicted_total", e.tokens_predicted_total},
                     {"tokens_predicted_seconds_total", e.tokens_predicted_seconds_total},
                     {"prompt_tokens_total", e.prompt_tokens_total},
                     {"prompt_seconds_total", e.prompt_seconds_total},
                     {"hits", p.hits},
                     {"misses", p.misses},
                     {"bytes_read", p.bytes_read},
                     {"read_seconds", p.read_seconds},
                     {"read_wait_seconds", p.read_wait_seconds}};
    if (!v.cells.empty()) {
        j["heat"] = {{"layers", v.layers}, {"n_expert", v.n_expert}, {"batches", v.batches}, {"cells", v.cells}};
    }
    return j;
}

}  // namespace epq::server
