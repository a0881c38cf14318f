// The pager's counters in Prometheus' text format (/epq/metrics), as epq: metrics beside
// llama-server's own llamacpp: ones at /metrics.
#pragma once

#include "backend/pager_snapshot.h"
#include "sched/stream_gate.h"

#include <optional>
#include <string>

namespace epq::server {

// `gate`: the stream gate's counters, when requests are gated.
std::string metrics_text(const PagerSnapshot & pager, const std::optional<StreamGate::Counters> & gate = std::nullopt);

}  // namespace epq::server
