// The pager's counters in Prometheus' text format (/epq/metrics), as epq: metrics beside
// llama-server's own llamacpp: ones at /metrics.
#pragma once

#include "backend/pager_snapshot.h"

#include <string>

namespace epq::server {

std::string metrics_text(const PagerSnapshot & pager);

}  // namespace epq::server
