// One snapshot of the pager's statistics (Pager::snapshot) and its JSON form. Every report of
// the pager reads this one shape: `epq run`'s text and --stats-json (engine/run_report.h),
// /metrics and the serve page's state (server/), and `epq bench`, which reads --stats-json.
#pragma once

#include "arena/prefetch_account.h"
#include "arena/slot_arena.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

struct PagerSnapshot {
    uint64_t arena_bytes = 0;  // the arena's size (ArenaPlan::bytes)
    std::string policy = kDefaultPolicy;
    uint64_t tokens = 0;             // tokens through the first MoE layer (prompt and generated)
    uint64_t ops = 0;                // expert matmuls served
    uint64_t expert_lookups = 0;     // distinct (layer, expert) uses per batch
    uint64_t hits = 0;               // uses found resident: expert_lookups - misses
    uint64_t misses = 0;             // experts read from disk
    uint64_t demand_misses = 0;      // of which a layer asked for and did not find: misses - speculative
    uint64_t speculative_reads = 0;  // experts read early on a guess (prefetch)
    uint64_t speculative_bytes = 0;
    uint64_t readahead_reads = 0;  // of the speculative reads, those read ahead for prompt ubatches
    uint64_t readahead_used = 0;   // of which the next layer then selected
    uint64_t preloaded = 0;        // experts read by preload()
    uint64_t evictions = 0;
    uint64_t borrowed = 0;
    uint64_t bytes_read = 0;
    uint64_t read_requests = 0;
    uint64_t missed_expert_bytes = 0;  // the expert bytes the misses needed (reads may round up)
    uint64_t chains = 0;               // runs of a layer's expert nodes computed expert by expert
    uint64_t rereads = 0;              // an expert read again within the same batch of the same layer
    uint64_t solo_experts = 0;         // expert groups computed in a node of their own (kernel_paths.h)
    // Chains computed as stock computes them: the layer's own nodes over its experts' slots,
    // which sit in expert order at one stride (see ChainCompute::compute_whole_layer).
    uint64_t whole_layer_chains = 0;
    uint64_t repacked_matrices = 0;  // expert matrices per expert held in the repacked layout (0: -nr)
    double repack_seconds = 0.0;     // rewriting read experts in that layout, summed over read threads
    std::string repacked_file;       // where experts are read ready-repacked from (repacked_experts.h), or ""
    // Memory the pager holds besides the arena, at its peak: gathered rows, staged outputs, graph
    // contexts and ggml's work buffer for the expert matmuls (which grows and never shrinks).
    uint64_t scratch_bytes = 0;
    double read_busy_seconds = 0.0;  // summed over read threads
    double read_wall_seconds = 0.0;  // with at least one read in flight
    double read_cpu_seconds = 0.0;   // CPU the read threads spent on the reads themselves
    double wait_seconds = 0.0;       // compute stalled on reads
    // Decode steps: batches of at most decode_batch_max tokens (one per generating sequence),
    // timed from layer 0's expert matmuls to the last layer's, and the time in them blocked on
    // reads (wait_seconds and prefetch_wait_seconds: misses, and guesses settled). The
    // server's stream tuner reads them (sched/stream_tuner.h): a prompt's batches do not count.
    uint32_t decode_batch_max = 1;
    uint64_t decode_tokens = 0;
    double decode_seconds = 0.0;
    double decode_wait_seconds = 0.0;
    // What those steps looked up and missed: with requests coming and going, a server's hit rate
    // over all batches mixes in the admitted prompts', which select nearly every expert once.
    uint64_t decode_steps = 0;
    uint64_t decode_lookups = 0;
    uint64_t decode_demand_misses = 0;
    uint64_t decode_missed_bytes = 0;  // including the guesses' reads (missed_expert_bytes)
    double compute_seconds = 0.0;      // ggml computing the expert nodes (matmuls and what lies between)
    // Where the rest of the pager's time goes, each on its own clock, so that pager_seconds minus
    // all of them is what nothing accounts for.
    double pager_seconds = 0.0;       // wall time in the graph splits the pager computes
    double gather_seconds = 0.0;      // copying each group's input rows and building its graph
    double scatter_seconds = 0.0;     // copying outputs back to the graph's rows
    double arena_seconds = 0.0;       // routing lookup, pinning, eviction, read submission, unpinning
    double predict_seconds = 0.0;     // next-layer guesses (prefetch)
    uint64_t graph_computes = 0;      // ggml graphs the pager computed (each one parallel region)
    uint64_t all_graph_computes = 0;  // every ggml CPU graph of the process so far (graph_compute_count.h)
    bool direct_io = false;
    PrefetchMode prefetch_mode = PrefetchMode::off;
    std::string prefetch_state;  // on, off, or why it switched itself off
    PredictionCounts prefetch;   // all layers
    std::vector<PredictionCounts> prefetch_layers;
    double prefetch_wait_seconds = 0.0;  // waiting for speculative reads to land

    // The one JSON form every report reads: `epq run --stats-json` (RunReport adds per-token and
    // per-phase figures), /metrics, the serve page's state and `epq bench` through them.
    nlohmann::json to_json() const;
};

// A prediction tally as JSON (the "prefetch" object and its "per_layer" entries).
nlohmann::json prediction_json(const PredictionCounts & c);

}  // namespace epq
