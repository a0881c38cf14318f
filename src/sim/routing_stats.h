// Routing statistics of a decode trace, in the terms published measurements of real MoE models
// use, so a benchmark on synthetic weights can say how its routing compares: per-layer caches
// holding a share of each layer's experts, their LRU and Belady (optimal) hit rates once warm,
// and how many of a token's experts the previous token also selected (reuse).
#pragma once

#include "arena/trace.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct ShareHits {
    double share = 0;  // of each layer's experts cached, in its own cache
    double lru = 0;    // hit rates over the counted tokens
    double belady = 0;
};

struct RoutingStats {
    uint64_t decode_tokens = 0;  // single-token steps in the trace
    uint64_t counted = 0;        // of which counted (after the warm-up)
    std::vector<ShareHits> shares;
    double reuse = 0;       // selected experts the previous token also selected at that layer
    double reuse_lag8 = 0;  // ... that the token 8 before selected
    // Of the routed slots of decode steps the run guessed (--prefetch: the next layer's router
    // applied to this layer's input), the share the guess named; guessed_layers = 0: no guesses.
    uint64_t guessed_layers = 0;
    double guess_recall = 0;
};

// Decode steps only (one token per step); the first `warmup` of them fill the caches uncounted.
RoutingStats routing_stats(const Trace & t, const std::vector<double> & shares, uint64_t warmup = 16);

// Published decode figures for the real model of an architecture, to print beside a
// synthetic run's; empty where none are known.
struct PublishedRouting {
    std::string model;
    std::vector<ShareHits> shares;
    double reuse = 0;         // 0: not known
    double reuse_lag8 = 0;    // 0: not known
    double guess_recall = 0;  // the next layer's router on this layer's input; 0: not known
};
PublishedRouting published_routing(const std::string & arch);

// The trace's decode routing beside the published figures for the real model of `arch`, as a
// table (per-layer caches of 12.5-50% of each layer's experts, LRU and Belady hit rates once
// warm, reuse by the next token) and as JSON in `j`. A reader can judge how far synthetic
// weights route like the real ones: the hit rates an arena sees depend on it.
std::string routing_report(const Trace & t, const std::string & arch, nlohmann::json & j);

}  // namespace epq
