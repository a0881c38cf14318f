// Routing traces recorded by other tools, read into epq's own Trace so that `epq simulate` can
// replay a real model's routing next to the synthetic models'.
//
// `route_trace v1` (CSV, one row per routed expert), as llama.cpp-based expert-streaming
// engines write it:
//   # route_trace v1
//   # model=<path> arch=<a> n_layer=<L> n_expert=<E> n_expert_used=<k>
//   # layer=<i> expert_bytes=<bytes of one expert> dense_bytes=<bytes>      one per MoE layer
//   turn,phase,step,layer,slot,expert,weight,residency,expert_bytes
//   ...                                                                    phase 0 prompt, 1 decode
// A turn's prompt rows become one batch (epq computes a prompt as one batch, each expert read
// once for all its tokens); every decode step is a batch of its own. Layers are grouped into
// size classes by expert_bytes. The weight and the recording engine's own residency columns are
// not properties of the model and are ignored.
#pragma once

#include "arena/trace.h"

#include <istream>
#include <string>

namespace epq {

constexpr const char * kRouteTraceMagic = "# route_trace v1";

// Reads the rest of a route_trace v1 stream whose first line has been consumed; `path` names it
// in errors, which give the line and what to do. Throws epq::Error.
Trace read_route_trace(std::istream & in, const std::string & path);

}  // namespace epq
