// /metrics in Prometheus' text format: llama-server's llamacpp: counters and gauges, then the
// pager's as epq: (arena hits, misses, evictions, bytes read, read waits, prefetch bytes).
#pragma once

#include "engine/serving_engine.h"

#include <optional>
#include <string>

namespace epq::server {

// `pager`: empty without a pager (no epq: pager metrics then).
std::string metrics_text(const EngineCounters & c, const std::optional<PagerSnapshot> & pager);

}  // namespace epq::server
