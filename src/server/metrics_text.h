// /metrics in Prometheus' text format: llama-server's llamacpp: counters and gauges, then the
// pager's as epq: (arena hits, misses, evictions, bytes read, read waits, prefetch bytes).
#pragma once

#include "engine/serving_engine.h"

#include <string>

namespace epq::server {

std::string metrics_text(const EngineCounters & c, const PagerCounters & p);

}  // namespace epq::server
