// The pager: serves the expert matmuls of a model whose experts stay on disk. For each
// MUL_MAT_ID it finds the experts the router selected, makes them resident in the arena
// (direct reads for the misses, several in flight), and computes with ggml's own CPU
// MUL_MAT_ID kernel on the arena slots - the kernel stock llama.cpp runs, so the result is
// bit-identical. Experts already resident are computed while the misses are still being read.
#pragma once

#include "arena/expert_activity.h"
#include "arena/prefetch_account.h"
#include "arena/slot_arena.h"
#include "arena/trace.h"
#include "backend/expert_repack.h"
#include "backend/pager_faults.h"
#include "util/mapping.h"
#include "backend/router_predictor.h"
#include "gguf/expert_index.h"
#include "gguf/slot_layout.h"
#include "io/read_pool.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace epq {

struct PagerOptions {
    uint64_t arena_bytes = 0;
    int read_threads = 4;
    // Next-layer prediction: read the experts the next layer's router would pick for the
    // current hidden state while this layer computes (decode only).
    PrefetchMode prefetch = PrefetchMode::automatic;
    EvictionPolicy policy = EvictionPolicy::lfu;
    std::string trace_path;  // record every (token, layer, experts) here when set
    // Hold experts in ggml's repacked layout where stock llama.cpp's default flags would (see
    // expert_repack.h); false is `-nr`, the file's layout.
    bool repack = true;
};

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

class Pager {
public:
    // Throws epq::Error (arena below the minimum, file problems).
    Pager(const std::string & model_path, const ExpertIndex & index, const PagerOptions & opts);
    ~Pager();
    Pager(const Pager &) = delete;
    Pager & operator=(const Pager &) = delete;

    // True if `t` (or what it views) is an expert tensor this pager serves.
    bool serves(const ggml_tensor * t) const;
    // Computes the nodes of a graph split the pager claimed: expert matmuls and the
    // elementwise nodes between them (see expert_chain.h). Throws epq::Error.
    void compute(ggml_cgraph * graph);
    // Reads part of an expert tensor's bytes straight from the file (ggml get_tensor).
    void read_tensor(const ggml_tensor * t, void * data, size_t offset, size_t size) const;

    // One expert's forward through the arena, as llama.cpp's build_moe_ffn computes it: gate and
    // up MUL_MAT_ID (or one fused gate_up and its halves), their biases, the activation, down
    // MUL_MAT_ID and its bias, and the routing weight (before the FFN, or on its output).
    // For `epq verify kernel`, whose reference computes the same from the file.
    enum class Activation { swiglu, swiglu_oai, geglu, reglu, silu, gelu, relu, relu_sqr };
    struct ExpertForwardSpec {
        Activation act = Activation::swiglu;
        float alpha = 0.0f, limit = 0.0f;  // swiglu_oai
        bool weight_before_ffn = false;
        // This expert's biases (a fused gate_up's split into its halves); empty when there are none.
        std::vector<float> gate_b, up_b, down_b;
    };
    struct ExpertForward {
        std::vector<float> gate, up, h, down, out;  // gate and up after their biases
    };
    ExpertForward expert_forward(int layer, int32_t expert, const std::vector<float> & x, float weight,
                                 const ExpertForwardSpec & spec);

    void set_n_threads(int n);
    // Throws epq::Error if the model file was truncated or rewritten since the pager opened it:
    // the dense weights are mapped from it, so with every expert resident nothing else would see
    // a rewrite. A few microseconds (two stat calls); the engines call it after every batch.
    void check_model_file() const { reader_.check_unchanged(); }
    // Reads experts in file order until the arena is full (or holds them all), many reads in
    // flight. Returns the number of experts now resident.
    uint64_t preload();
    // Writes out the routing trace; throws epq::Error when the write fails.
    void flush_trace();
    PagerStats stats() const;
    // The serve page's heat map: per MoE layer, one character per expert (ExpertActivity::cells).
    // Call on the thread that runs the model, between batches.
    std::vector<std::string> activity_cells() const;
    uint64_t resident_experts() const;
    // Bytes the pager may hold besides the arena for a batch of `n_batch` tokens (an upper bound
    // of PagerStats::scratch_bytes): what --arena auto sets aside for it.
    static uint64_t scratch_bound(const ExpertIndex & index, uint32_t n_batch);
    EvictionPolicy policy() const { return arena_.policy(); }
    uint64_t activity_batches() const { return activity_.batches(); }
    const ArenaPlan & plan() const { return plan_; }
    const SlotLayout & layout() const { return layout_; }

private:
    struct Use {  // one selected expert of the current op
        int32_t expert = 0;
        SlotRef ref;
        std::shared_ptr<Ticket> ticket;  // null when it was resident
    };
    // One layer's expert nodes for one batch: pins and reads the selected experts, at most
    // once each, and computes every node of `chain` for each group of ready experts.
    void run_chain(const std::vector<ggml_tensor *> & chain, const LayerLayout & layer);
    void compute_group(const std::vector<ggml_tensor *> & chain, const std::vector<const Use *> & group);
    // Per expert of `group`: whether it needs a node of its own to get ggml's kernel choice.
    std::vector<char> solo_experts(const std::vector<ggml_tensor *> & chain,
                                   const std::vector<const Use *> & group) const;
    void compute_node_on_cpu(ggml_cgraph * graph, int i);
    void stage_outputs(const std::vector<ggml_tensor *> & chain);
    void write_outputs(const std::vector<ggml_tensor *> & chain);
    bool extends_chain(const std::vector<ggml_tensor *> & chain, const ggml_tensor * node) const;
    uint8_t * slot_ptr(SlotRef r) const;
    std::shared_ptr<Ticket> load(const LayerLayout & layer, int32_t expert, SlotRef r);

    // The guess for the next layer and its speculative reads, settled when that layer runs.
    struct Prefetch {
        bool valid = false;
        bool prefill = false;  // read ahead for a prompt ubatch: adopted by the next layer, not settled
        size_t li = 0;
        std::vector<uint32_t> guessed;
        std::vector<uint64_t> read_bytes;
        std::vector<Use> reads;
    };
    void start_prefetch(size_t li, const ggml_tensor * x);
    // Prompt ubatches: while layer `li` computes, read the next layer's experts that are not
    // resident (see run_chain for which), as far as unpinned slots allow.
    void start_prefill_readahead(size_t li, const ggml_tensor * x, int64_t k);
    void settle_prefetch(size_t li, const std::vector<int32_t> & selected, bool decode);
    void drain_prefetch() noexcept;
    // Unpins `uses`; a slot whose read did not complete is waited for and forgotten.
    void release(std::vector<Use> & uses) noexcept;

    std::string path_;
    SlotLayout layout_;
    ArenaPlan plan_;
    SlotArena arena_;
    ExpertRepack repack_;
    std::vector<Mapping> pools_;  // one per slot size; before reads_, so it is unmapped after the reads end
    DirectReader reader_;
    mutable ReadPool reads_;
    struct BackendFree {
        void operator()(ggml_backend_t b) const { ggml_backend_free(b); }
    };
    std::unique_ptr<ggml_backend, BackendFree> cpu_;
    int n_threads_ = 1;
    uint32_t n_expert_ = 0;
    PagerStats stats_;
    void loaded(const LayerLayout & layer, SlotRef r);
    // The slot an expert matmul reads: `slot`, unless a test build planted a fault.
    int32_t fault_slot(int32_t slot, uint32_t pool);

    std::unique_ptr<PagerFaults> faults_;  // null outside the test executables
    std::string deferred_error_;           // from release(), which must not throw: raised by compute()
    // scratch: every gathered row of a group (one allocation, see compute_group), slot and expert ids
    std::vector<float> rows_;
    std::vector<int32_t> idg_, expg_;
    std::vector<std::vector<float>> staged_;  // per chain node read outside the chain: its rows
    std::vector<uint8_t> ctx_mem_;
    uint64_t work_bytes_ = 0;  // the largest work buffer ggml's CPU backend took for the pager's graphs
    std::thread populate_;
    std::atomic<bool> stop_populate_{false};
    std::unique_ptr<TraceWriter> trace_;
    uint64_t trace_step_ = 0, trace_token_ = 0, trace_step_tokens_ = 0;
    std::unique_ptr<RouterPredictor> predictor_;
    PrefetchAccount prefetch_;
    Prefetch pending_;
    std::chrono::steady_clock::time_point token_start_;
    bool token_clock_running_ = false;
    std::vector<uint64_t> layer_ops_;      // expert matmuls served per layer
    std::vector<uint64_t> layer_batches_;  // batches seen per layer
    std::vector<int64_t> chain_rows_;      // rows of the current chain's batch per expert (counted once per chain)
    ExpertActivity activity_;
    std::vector<uint64_t> read_in_batch_;  // [layer x expert]: the batch it was last read in, + 1
};

}  // namespace epq
