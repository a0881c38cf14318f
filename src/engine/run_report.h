// Per-run statistics: generation speed, arena behaviour, reads, memory, time to first token.
#pragma once

#include "backend/pager.h"
#include "engine/generator.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace epq {

struct RunReport {
    GenerationStats gen;
    std::optional<PagerSnapshot> pager;                 // absent for --no-pager runs
    std::optional<PagerSnapshot> pager_before_prefill;  // to split the pager's work between prefill
    std::optional<PagerSnapshot> pager_after_prefill;   // and decode
    double load_seconds = 0.0;
    double ttft_seconds = 0.0;  // from the start of the run (model load included) to the first token
    uint64_t peak_rss_bytes = 0;
    uint64_t storage_read_bytes = 0;  // this process's reads from storage (/proc/self/io), mmap faults included
    // Page faults that waited on storage: under a memory cap, dense weights the kernel dropped
    // and read back. From the run's start, and at the end of the prompt (to count the decode's).
    uint64_t major_faults = 0;
    std::optional<uint64_t> major_faults_after_prefill;
    int n_threads = 0;
    bool repack = true;                // weights repacked (stock's default layout) or the file's (-nr)
    bool gpu_host = false;             // a GPU's host buffer holds CPU weights (weight_layout.h)
    bool remote_layers = false;        // some layers (and their experts) are on RPC servers
    uint64_t dense_locked_bytes = 0;   // dense weights locked in RAM (paged runs)
    uint64_t expert_tensor_bytes = 0;  // expert tensor bytes llama.cpp placed in the pager's buffer

    std::string text() const;
    nlohmann::json json() const;
};

// Where a phase's wall time went, from the pager's clocks between two snapshots: every part
// is measured on its own clock, so `unexplained` is what none of them saw.
struct TimeSplit {
    double total = 0.0;
    double read_wait = 0.0;       // expert reads and speculative reads waited for
    double expert_compute = 0.0;  // ggml computing the expert nodes
    double pager_own = 0.0;       // the pager's work around them (the four below)
    double gather = 0.0, scatter = 0.0, arena = 0.0, predict = 0.0;
    double outside_pager = 0.0;       // llama.cpp's other graph splits and scheduling (total - pager wall)
    double unexplained = 0.0;         // pager wall time none of the above accounts for
    uint64_t graph_computes = 0;      // the pager's
    uint64_t all_graph_computes = 0;  // every ggml CPU graph: llama.cpp's and the pager's
    // `threads`: the thread count, for the wake-ups the graphs' parallel regions cost.
    nlohmann::json json(int tokens, int threads) const;
};
TimeSplit time_split(const PagerSnapshot & before, const PagerSnapshot & after, double wall_seconds);

// Peak resident set size of this process so far.
uint64_t peak_rss_bytes();
// Major page faults (those that read from storage) of this process so far.
uint64_t major_page_faults();
// Bytes this process caused to be read from storage so far (0 where the kernel does not say).
uint64_t storage_read_bytes();

// One line for --stats after each token: what changed since `before`.
std::string token_stats_line(int step, const PagerSnapshot & before, const PagerSnapshot & after, double seconds);

}  // namespace epq
