// What the pager counts, times and records as it works: the statistics every report reads, the
// per-layer batch bookkeeping they need, the serve page's heat map and the routing trace. The
// pager's parts (expert reads, read-ahead, chain compute) add to it; it decides nothing.
#pragma once

#include "arena/expert_activity.h"
#include "arena/prefetch_account.h"
#include "arena/trace.h"
#include "backend/pager_snapshot.h"
#include "gguf/expert_index.h"
#include "gguf/slot_layout.h"

#include "ggml.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace epq {

class PagerTelemetry {
public:
    // `trace_path` empty: no routing trace. Throws epq::Error when the trace cannot be created.
    PagerTelemetry(const std::string & model_path, const ExpertIndex & index, const SlotLayout & layout,
                   const std::string & trace_path);

    // The running counters; the arena's and the read pool's own are added by Pager::stats().
    PagerSnapshot & counters() { return stats_; }
    const PagerSnapshot & counters() const { return stats_; }
    ExpertActivity & activity() { return activity_; }
    const ExpertActivity & activity() const { return activity_; }

    // A chain of `n_mm` expert matmuls of layer `li` (which has `n_matrices` per expert) starts.
    // Returns whether it is the layer's first for this batch: a batch runs each layer's matrices
    // once, in one chain or several when the scheduler cuts it.
    bool begin_chain(size_t li, size_t n_mm, size_t n_matrices);
    // A batch of `tokens` reaches layer 0's experts; the one before it ended with its last chain.
    // Times decode steps (PagerSnapshot::decode_seconds).
    void batch_starts(uint64_t tokens);
    void chain_ends();
    // Counts a demand read of expert `e` of layer `li` (a miss the layer asked for), and a reread
    // when the same batch of the same layer already read it once.
    void count_demand_read(size_t li, uint32_t e);
    // Records the router's choice (`ids`: n_expert_used x tokens, I32) for the trace, once per
    // layer and batch.
    void record_routing(size_t li, uint32_t layer_no, const ggml_tensor * ids);
    // Records decode prediction's guess of model layer `layer_no`'s experts, made in this step.
    void record_guess(uint32_t layer_no, const std::vector<uint32_t> & experts);
    // Writes out the routing trace; throws epq::Error when the write fails.
    void flush_trace();

private:
    double read_waits() const;

    PagerSnapshot stats_;
    uint32_t n_expert_ = 0;
    std::vector<uint64_t> layer_ops_;      // expert matmuls served per layer
    std::vector<uint64_t> layer_batches_;  // batches seen per layer
    std::vector<uint64_t> read_in_batch_;  // [layer x expert]: the batch it was last read in, + 1
    ExpertActivity activity_;
    uint64_t demand_reads_ = 0;
    // The batch being timed: its size, when it reached layer 0, the last chain's end, and the
    // running totals when it started.
    uint64_t batch_tokens_ = 0;
    std::chrono::steady_clock::time_point batch_start_, last_chain_end_;
    double batch_wait0_ = 0.0;
    uint64_t batch_lookups0_ = 0, batch_demand0_ = 0, batch_missed0_ = 0;
    std::unique_ptr<TraceWriter> trace_;
    uint64_t trace_step_ = 0, trace_token_ = 0, trace_step_tokens_ = 0;
};

}  // namespace epq
