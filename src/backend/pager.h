// The pager: serves the expert matmuls of a model whose experts stay on disk. For each
// MUL_MAT_ID it finds the experts the router selected, makes them resident in the arena
// (direct reads for the misses, several in flight), and computes with ggml's own CPU
// MUL_MAT_ID kernel on the arena slots - the kernel stock llama.cpp runs, so the result is
// bit-identical. Experts already resident are computed while the misses are still being read.
//
// It coordinates four parts, each with its own state: ExpertStore (the arena's memory and the
// reads that fill it), ReadAhead (reads started before a layer asks: decode prediction and
// prompt read-ahead), ChainCompute (the ggml graphs over the slots and their scratch) and
// PagerTelemetry (statistics, clocks, trace, heat map).
#pragma once

#include "arena/prefetch_account.h"
#include "arena/routing_script.h"
#include "arena/slot_arena.h"
#include "backend/chain_compute.h"
#include "backend/expert_store.h"
#include "backend/pager_telemetry.h"
#include "backend/read_ahead.h"
#include "gguf/expert_index.h"
#include "gguf/slot_layout.h"

#include "ggml.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace epq {

struct PagerOptions {
    uint64_t arena_bytes = 0;
    int read_threads = 4;
    // Next-layer prediction: read the experts the next layer's router would pick for the
    // current hidden state while this layer computes (decode only).
    PrefetchMode prefetch = PrefetchMode::automatic;
    std::string policy = kDefaultPolicy;
    std::string trace_path;  // record every (token, layer, experts) here when set
    // Hold experts in ggml's repacked layout where stock llama.cpp's default flags would (see
    // expert_repack.h); false is `-nr`, the file's layout.
    bool repack = true;
    // With `repack`: read experts ready-repacked from this file (repacked_experts.h).
    std::optional<RepackedExperts> repacked_file;
};

class Pager {
public:
    // Throws epq::Error (arena below the minimum, file problems).
    Pager(const std::string & model_path, const ExpertIndex & index, const PagerOptions & opts);
    Pager(const Pager &) = delete;
    Pager & operator=(const Pager &) = delete;

    // True if `t` (or what it views) is an expert tensor this pager serves.
    bool serves(const ggml_tensor * t) const;
    // Computes the nodes of a graph split the pager claimed: expert matmuls and the
    // elementwise nodes between them (see expert_chain.h). Throws epq::Error.
    void compute(ggml_cgraph * graph);
    // Reads part of an expert tensor's bytes straight from the file (ggml get_tensor).
    void read_tensor(const ggml_tensor * t, void * data, size_t offset, size_t size) const;
    // Makes one expert resident and holds it for a caller outside the paging path (`epq verify
    // kernel`, which computes its forward over the slot). Throws epq::Error.
    ExpertSlotView hold_expert(int layer, int32_t expert) { return store_.hold(layer, expert); }

    void set_n_threads(int n) { chain_.set_n_threads(n); }
    // Batches of at most `n` tokens are timed as decode steps (PagerSnapshot::decode_seconds):
    // a server sets the most sequences it decodes at once. 1 by default.
    void set_decode_batch_max(uint32_t n);
    // While on, the pager reads and computes nothing: every expert node's output is zeros. For
    // decodes whose outputs nobody reads (llama-server's start-up probe, which decodes 2 tokens
    // to learn whether the KV cache can drop a sequence's tail, then clears it): without this
    // it would read 2 x top-k experts per layer (1.26 GiB on the 30B preset) at load.
    void set_dry_run(bool on) { dry_run_ = on; }
    // `epq bench --routing` only: every expert choice is taken from `script` instead of the
    // router (arena/routing_script.h). Timing only: the output is no longer the model's.
    void set_routing_script(std::shared_ptr<const RoutingScript> script) { script_ = std::move(script); }
    // Throws epq::Error if the model file was truncated or rewritten since the pager opened it:
    // the dense weights are mapped from it, so with every expert resident nothing else would see
    // a rewrite. A few microseconds (two stat calls); the engines call it after every batch.
    void check_model_file() const { store_.check_unchanged(); }
    // Reads experts in file order until the arena is full (or holds them all), many reads in
    // flight. Returns the number of experts now resident.
    uint64_t preload() { return store_.preload(); }
    // Writes out the routing trace; throws epq::Error when the write fails.
    void flush_trace() { telemetry_.flush_trace(); }
    // The statistics so far, in the one shape every report reads. Any thread.
    PagerSnapshot stats() const;
    // The serve page's heat map and what it shows beside it. Any thread (between two computes).
    struct View {
        std::vector<uint32_t> layers;  // the MoE layers' numbers, in order
        uint32_t n_expert = 0;
        std::vector<std::string> cells;  // per layer, one character per expert (ExpertActivity::cells)
        uint64_t resident_experts = 0;
        uint64_t batches = 0;
    };
    View view() const;
    // Bytes the pager may hold besides the arena for a batch of `n_batch` tokens (an upper bound
    // of PagerSnapshot::scratch_bytes): what --arena auto sets aside for it.
    static uint64_t scratch_bound(const ExpertIndex & index, uint32_t n_batch) {
        return ChainCompute::scratch_bound(index, n_batch);
    }
    const std::string & policy() const { return store_.arena().policy(); }
    const ArenaPlan & plan() const { return store_.plan(); }
    const SlotLayout & layout() const { return store_.layout(); }

private:
    struct ChainRun;
    // One layer's expert nodes for one batch: pins and reads the selected experts, at most
    // once each, and computes every node of `chain` for each group of ready experts.
    void run_chain(const std::vector<ggml_tensor *> & chain, const LayerLayout & layer);
    // The phases of run_chain: which experts the router chose (and the accounting of a layer's
    // first chain of a batch), pinning and reading as many as fit, waiting for some to be
    // ready, computing those, and unpinning them.
    void route(ChainRun & run);
    void take_over_read_ahead(ChainRun & run);
    void pin(ChainRun & run);
    void start_read_ahead(ChainRun & run);
    std::vector<size_t> wait_ready(ChainRun & run);
    void compute_ready(ChainRun & run, const std::vector<size_t> & ready);
    void unpin_ready(ChainRun & run, const std::vector<size_t> & ready);
    void finish_chain(ChainRun & run);
    // Overwrites the router's choices in `ids` with the routing script's (set_routing_script).
    void apply_script(const ChainRun & run, ggml_tensor * ids);

    // Members in construction order: telemetry first (the others count into it), the store
    // before what reads through it, read-ahead last so its pending reads are released first.
    // Held while a graph computes: stats() and view() take it too, so a server's HTTP
    // threads read the pager between two of its computes, never in the middle of one.
    mutable std::mutex compute_mu_;
    std::atomic<bool> dry_run_{false};
    std::shared_ptr<const RoutingScript> script_;
    uint64_t script_prompt_tokens_ = 0;  // prompt tokens and decode steps the script drove so far
    uint64_t script_decode_steps_ = 0;
    uint64_t script_batch_ = 0;  // this batch's first prompt token or decode step
    uint64_t script_batch_tokens_ = 0;
    bool script_batch_decode_ = false;
    PagerTelemetry telemetry_;
    ExpertStore store_;
    ChainCompute chain_;
    ReadAhead read_ahead_;
};

}  // namespace epq
