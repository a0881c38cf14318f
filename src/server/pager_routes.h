// The pager's own view, added to llama.cpp's HTTP server (server_hooks.h) under /epq/:
//   /epq/          llama.cpp's web UI (in a frame) beside the live pager view
//   /epq/stats     the pager's statistics snapshot (PagerSnapshot::to_json) and heat map, JSON
//   /epq/metrics   the pager's counters (and the stream gate's) in Prometheus' text format
#pragma once

#include <string>

struct server_http_context;

namespace epq {
class Pager;
class StreamGate;
}  // namespace epq

namespace epq::server {

class StreamTuning;

// The stream gate and its tuner, when the server has them (null otherwise).
struct DecodeStreamsView {
    const StreamGate * gate = nullptr;
    const StreamTuning * tuning = nullptr;
};

struct PagerPageInfo {
    std::string model;            // the file served
    std::string arena_reasoning;  // how the arena was sized
    std::string not_paged;        // why there is no pager ("" when there is one)
};

// `pager`: null when the model is not paged (the routes then say why). `streams.gate`: null when
// every slot generates at once.
void add_pager_routes(server_http_context & http, const Pager * pager, DecodeStreamsView streams,
                      const PagerPageInfo & info);

}  // namespace epq::server
