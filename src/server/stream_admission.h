// The stream gate (sched/stream_gate.h) in front of llama-server's routes that generate: a
// request takes a place before llama.cpp's handler sees it and gives it back when its response
// is done (a streamed one when its last chunk is sent or its client goes away). Requests that
// only read (tokenize, props, metrics, slots) or do not decode token by token (embeddings,
// rerank) are not gated.
#pragma once

#include "sched/stream_gate.h"
#include "server/server_hooks.h"

#include <memory>
#include <string>

namespace epq::server {

// Whether a POST to `path` generates tokens (completions, chat, responses, messages, infill).
bool route_generates(const std::string & path);

// `inner` behind `gate`.
HttpHandler gated_handler(std::shared_ptr<StreamGate> gate, HttpHandler inner);

}  // namespace epq::server
