// GET /pager/state: what the serve page's live pager view draws, as JSON. Counters are totals
// since the server started (the page turns them into rates between polls); `heat` is the
// latest heat map (ServingEngine::pager_view).
#pragma once

#include "engine/serving_engine.h"

#include <nlohmann/json.hpp>
#include <optional>

namespace epq::server {

// `pager`: empty without a pager (--no-pager).
nlohmann::json pager_state_json(const EngineCounters & e, const std::optional<PagerSnapshot> & pager,
                                const PagerView & v, double read_floor_bytes_per_second);

}  // namespace epq::server
