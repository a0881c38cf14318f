// Chain compute: one layer's expert nodes (a chain, see expert_chain.h) computed with ggml's
// CPU kernels on the experts' arena slots. Each group of resident experts becomes one small
// graph over gathered rows: a MUL_MAT_ID per matrix over a view of the slots, the chain's
// elementwise nodes between them, and the outputs staged until the whole chain is done. Owns
// the CPU backend and the scratch those graphs need; scratch_bound says how large it can grow.
#pragma once

#include "backend/expert_store.h"
#include "backend/pager_telemetry.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace epq {

// Experts of one group whose slots lie near each other: one MUL_MAT_ID per matrix over a view
// of just these slots.
struct ExpertWindow {
    struct Entry {
        int64_t k, t;  // slot position and token of one row
    };
    uint32_t first_slot = 0, n_slots = 0;
    bool solo = false;           // one expert in a node of its own (kernel_paths.h)
    std::vector<Entry> entries;  // (k, t) rows of its experts
    std::vector<int32_t> slots, experts;
    std::vector<ggml_tensor *> outs;  // per chain node
};

class ChainCompute {
public:
    // Throws epq::Error when ggml's CPU backend cannot be initialised.
    ChainCompute(ExpertStore & store, PagerTelemetry & telemetry);

    void set_n_threads(int n);
    int n_threads() const { return n_threads_; }
    // Whether `node` continues `chain`: a matmul of the same layer over the same ids, or an
    // elementwise node on the chain's rows.
    bool extends_chain(const std::vector<ggml_tensor *> & chain, const ggml_tensor * node) const;
    // Computes node `i` of `graph` alone, as the CPU backend would.
    void compute_node_on_cpu(ggml_cgraph * graph, int i);

    // Rows per expert of the chain about to run (the router's choice counted once per chain):
    // filled by the caller before compute_group.
    std::vector<int64_t> & expert_rows() { return expert_rows_; }
    // Before a chain: which of its nodes are read outside it, so their rows are staged.
    void stage_outputs(const std::vector<ggml_tensor *> & chain);
    // Computes every node of `chain` for the rows routed to `group` (experts resident in one pool).
    void compute_group(const std::vector<ggml_tensor *> & chain, const std::vector<const ExpertUse *> & group);
    // After a chain: copies the staged rows to the graph's tensors.
    void write_outputs(const std::vector<ggml_tensor *> & chain);

    // Memory held besides the arena: gathered rows, staged outputs, graph contexts and ggml's
    // work buffer for the expert matmuls (which grows and never shrinks).
    uint64_t scratch_bytes() const;
    // An upper bound of scratch_bytes for a batch of `n_batch` tokens: what --arena auto sets
    // aside for it.
    static uint64_t scratch_bound(const ExpertIndex & index, uint32_t n_batch);

private:
    // When the group is every expert the chain selects and they sit in expert order at one
    // stride from a base slot (home slots, expert_store.cpp), computes the chain's own nodes,
    // as stock builds them, over a 3-D view of the slots: no gather, no scatter, the outputs
    // written where the graph has them. Returns false (nothing done) otherwise.
    bool compute_whole_layer(const std::vector<ggml_tensor *> & chain, const std::vector<const ExpertUse *> & group);
    std::vector<char> solo_experts(const std::vector<ggml_tensor *> & chain,
                                   const std::vector<const ExpertUse *> & group) const;
    std::vector<ExpertWindow> plan_windows(const std::vector<ggml_tensor *> & chain,
                                           const std::vector<const ExpertUse *> & group, size_t & n_rows);
    void widen_for_fault(std::vector<ExpertWindow> & windows, uint32_t pool);
    void reserve_rows(const std::vector<ggml_tensor *> & chain, const std::vector<ExpertWindow> & windows);
    void build_window(ggml_context * ctx, ggml_cgraph * gf, const std::vector<ggml_tensor *> & chain, ExpertWindow & w,
                      uint32_t pool, size_t & used);
    ggml_tensor * weight_view(ggml_context * ctx, const ggml_tensor * c, const ExpertWindow & w, uint32_t pool) const;
    void scatter(const std::vector<ggml_tensor *> & chain, const std::vector<ExpertWindow> & windows, int64_t n_ids);

    ExpertStore & store_;
    PagerTelemetry & telemetry_;
    struct BackendFree {
        void operator()(ggml_backend_t b) const { ggml_backend_free(b); }
    };
    std::unique_ptr<ggml_backend, BackendFree> cpu_;
    int n_threads_ = 1;
    std::vector<int64_t> expert_rows_;
    // Scratch: every gathered row of a group (one allocation, see reserve_rows), the staged rows
    // per chain node read outside the chain, the graph context's memory.
    std::vector<float> rows_;
    std::vector<std::vector<float>> staged_;
    std::vector<uint8_t> ctx_mem_;
    uint64_t work_bytes_ = 0;  // the largest work buffer ggml's CPU backend took for these graphs
};

}  // namespace epq
