// What the pager counts, times and records as it works: the statistics every report reads, the
// per-layer batch bookkeeping they need, the serve page's heat map and the routing trace. The
// pager's parts (expert reads, read-ahead, chain compute) add to it; it decides nothing.
#pragma once

#include "arena/expert_activity.h"
#include "arena/prefetch_account.h"
#include "arena/trace.h"
#include "gguf/expert_index.h"
#include "gguf/slot_layout.h"

#include "ggml.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace epq {

struct PagerStats {
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
    uint64_t repacked_matrices = 0;    // expert matrices per expert held in the repacked layout (0: -nr)
    double repack_seconds = 0.0;       // rewriting read experts in that layout, summed over read threads
    // Memory the pager holds besides the arena, at its peak: gathered rows, staged outputs, graph
    // contexts and ggml's work buffer for the expert matmuls (which grows and never shrinks).
    uint64_t scratch_bytes = 0;
    double read_busy_seconds = 0.0;  // summed over read threads
    double read_wall_seconds = 0.0;  // with at least one read in flight
    double read_cpu_seconds = 0.0;   // CPU the read threads spent on the reads themselves
    double wait_seconds = 0.0;       // compute stalled on reads
    double compute_seconds = 0.0;    // ggml computing the expert nodes (matmuls and what lies between)
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
};

class PagerTelemetry {
public:
    // `trace_path` empty: no routing trace. Throws epq::Error when the trace cannot be created.
    PagerTelemetry(const std::string & model_path, const ExpertIndex & index, const SlotLayout & layout,
                   const std::string & trace_path);

    // The running counters; the arena's and the read pool's own are added by Pager::stats().
    PagerStats & counters() { return stats_; }
    const PagerStats & counters() const { return stats_; }
    ExpertActivity & activity() { return activity_; }
    const ExpertActivity & activity() const { return activity_; }

    // A chain of `n_mm` expert matmuls of layer `li` (which has `n_matrices` per expert) starts.
    // Returns whether it is the layer's first for this batch: a batch runs each layer's matrices
    // once, in one chain or several when the scheduler cuts it.
    bool begin_chain(size_t li, size_t n_mm, size_t n_matrices);
    // Counts a demand read of expert `e` of layer `li` that the same batch already read once.
    void count_reread(size_t li, uint32_t e);
    // Records the router's choice (`ids`: n_expert_used x tokens, I32) for the trace, once per
    // layer and batch.
    void record_routing(size_t li, uint32_t layer_no, const ggml_tensor * ids);
    // Writes out the routing trace; throws epq::Error when the write fails.
    void flush_trace();

private:
    PagerStats stats_;
    uint32_t n_expert_ = 0;
    std::vector<uint64_t> layer_ops_;      // expert matmuls served per layer
    std::vector<uint64_t> layer_batches_;  // batches seen per layer
    std::vector<uint64_t> read_in_batch_;  // [layer x expert]: the batch it was last read in, + 1
    ExpertActivity activity_;
    std::unique_ptr<TraceWriter> trace_;
    uint64_t trace_step_ = 0, trace_token_ = 0, trace_step_tokens_ = 0;
};

}  // namespace epq
