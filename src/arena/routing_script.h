// Expert choices taken from a recorded routing trace instead of the model's router, for
// `epq bench --routing`: the pager reads and computes the experts a real model chose, so a
// synthetic model of the same shape is timed on real routing (synthetic weights only approximate
// it). The text and logits such a run produces are not the model's: timing only, never in
// `epq run` or `epq serve`.
//
// The trace's MoE layers are matched to the model's by position; its prompt tokens drive the
// prompt (repeated when the prompt is longer) and its decode steps the decode (likewise).
#pragma once

#include "arena/trace.h"

#include <cstdint>
#include <vector>

namespace epq {

class RoutingScript {
public:
    // Throws epq::Error when the trace's MoE layer count, expert count or top-k differ from the
    // model's, when a token lacks a layer, or when it has no decode steps.
    RoutingScript(const Trace & trace, size_t n_layers, uint32_t n_expert, uint32_t n_expert_used);

    size_t n_expert_used() const { return k_; }
    size_t prompt_tokens() const { return prompt_.size() / stride(); }
    size_t decode_steps() const { return decode_.size() / stride(); }
    // The n_expert_used experts of MoE layer `li` for the `i`-th prompt token and the `i`-th
    // decode step of a run (cycling through the trace's).
    const uint32_t * prompt(size_t li, uint64_t i) const;
    const uint32_t * decode(size_t li, uint64_t i) const;

private:
    size_t stride() const { return n_layers_ * k_; }

    size_t n_layers_ = 0;
    size_t k_ = 0;
    std::vector<uint32_t> prompt_;  // [token][layer][k]
    std::vector<uint32_t> decode_;  // [step][layer][k]
};

}  // namespace epq
