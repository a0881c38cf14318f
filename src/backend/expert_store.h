// Expert reads: the arena's memory (one anonymous mapping per slot size), the reads that fill
// its slots from the model file (several in flight, rewritten into ggml's repacked layout where
// stock llama.cpp would repack), pinning and releasing slots, preloading, and the seam through
// which a test build plants faults. It knows which expert sits in which slot; it does not know
// what a graph computes with them.
#pragma once

#include "arena/slot_arena.h"
#include "backend/expert_repack.h"
#include "backend/pager_faults.h"
#include "backend/pager_telemetry.h"
#include "backend/repacked_experts.h"
#include "gguf/expert_index.h"
#include "gguf/slot_layout.h"
#include "io/model_reader.h"
#include "io/read_pool.h"
#include "util/mapping.h"

#include "ggml.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace epq {

// One pinned expert: its slot, and the read that fills it (null when it was resident).
struct ExpertUse {
    int32_t expert = 0;
    SlotRef ref;
    std::shared_ptr<Ticket> ticket;
};

struct ExpertStoreOptions {
    uint64_t arena_bytes = 0;
    int read_threads = 4;
    std::string policy = kDefaultPolicy;
    bool repack = true;
    // With `repack`: read slots ready-repacked from this file (repacked_experts.h) instead of
    // rewriting them after each read.
    std::optional<RepackedExperts> repacked_file;
};

class ExpertSlotView;

// How an arena of `budget` bytes is split into slots for this model (throws epq::Error below
// the minimum): what ExpertStore allocates, computed from the index alone.
ArenaPlan plan_expert_arena(const ExpertIndex & index, uint64_t budget);

// The files a model's experts are read from (every shard of a split model), for a ModelReader.
std::vector<ModelFilePart> model_file_parts(const ExpertIndex & index);

class ExpertStore {
public:
    // Throws epq::Error (arena below the minimum, file problems).
    ExpertStore(const ExpertIndex & index, const ExpertStoreOptions & opts, PagerTelemetry & telemetry);
    ~ExpertStore();
    ExpertStore(const ExpertStore &) = delete;
    ExpertStore & operator=(const ExpertStore &) = delete;

    const SlotLayout & layout() const { return layout_; }
    const ArenaPlan & plan() const { return plan_; }
    SlotArena & arena() { return arena_; }
    const SlotArena & arena() const { return arena_; }
    const ExpertRepack & repack() const { return repack_; }
    uint32_t n_expert() const { return n_expert_; }
    size_t layer_index(const LayerLayout & layer) const { return static_cast<size_t>(&layer - layout_.layers.data()); }

    // The first byte of a slot.
    uint8_t * slot_ptr(SlotRef r) const;
    // The first byte of slot 0 of `pool`: the base of a weight view over the pool's slots.
    uint8_t * pool_base(uint32_t pool) const { return pools_[pool].data(); }
    // Whether a test-only fault (pager_faults.h) may move or damage slots.
    bool faults_planted() const { return faults_ != nullptr; }
    // Starts the reads that fill slot `r` with `expert` of `layer`: ahead of every queued read
    // started on a guess unless it is one itself (`guess`).
    std::shared_ptr<Ticket> load(const LayerLayout & layer, int32_t expert, SlotRef r, bool guess = false);
    // Marks slot `r` ready once its read landed (a test build's fault may damage it here).
    void loaded(const LayerLayout & layer, SlotRef r);
    // Unpins `uses`; a slot whose read did not complete is waited for and forgotten. An error
    // here (a broken arena invariant) is kept for the next check_deferred_error().
    void release(std::vector<ExpertUse> & uses) noexcept;
    // Throws what release() could not.
    void check_deferred_error() const;
    // The slot an expert matmul reads: `slot`, unless a test build planted a fault.
    int32_t fault_slot(int32_t slot, uint32_t pool);

    // Reads experts in file order until the arena is full (or holds them all), many reads in
    // flight. Returns the number of experts now resident.
    uint64_t preload();
    // Pins `expert` of layer `layer_no`, read if it is not resident, for a caller outside the
    // paging path (epq verify kernel). Throws epq::Error.
    ExpertSlotView hold(int layer_no, int32_t expert);

    // Reads part of an expert tensor's bytes straight from the file (ggml get_tensor).
    void read_file(const MatrixPlacement & m, void * data, size_t offset, size_t size) const;
    // Throws epq::Error if the model file was truncated or rewritten since it was opened.
    void check_unchanged() const { reader_.check_unchanged(); }
    bool direct_io() const { return reader_.direct(); }
    ReadStats read_stats() const { return reads_.stats(); }
    uint64_t resident_experts() const;

private:
    void set_home_slots();
    void start_populating();

    PagerTelemetry & telemetry_;
    SlotLayout layout_;
    ArenaPlan plan_;
    SlotArena arena_;
    ExpertRepack repack_;
    std::optional<RepackedExperts> repacked_file_;  // read from at kRepackedBase of reader_'s byte space
    std::vector<Mapping> pools_;  // one per slot size; before reads_, so it is unmapped after the reads end
    ModelReader reader_;
    mutable ReadPool reads_;
    uint32_t n_expert_ = 0;
    std::unique_ptr<PagerFaults> faults_;  // null outside the test executables
    std::string deferred_error_;           // from release(), which must not throw
    std::thread populate_;
    std::atomic<bool> stop_populate_{false};
};

// One expert held resident for a caller outside the paging path: the slot its matrices are in,
// and for each matrix its type, shape and where slot 0 of its pool holds it, so the caller can
// view the pool as ggml's stacked expert tensor and select the slot as ggml's MUL_MAT_ID would.
// Unpins the expert when it goes.
class ExpertSlotView {
public:
    struct Matrix {
        const MatrixPlacement * placement = nullptr;  // kind ("gate", "up", "down", "gate_up"), type, shape
        uint8_t * pool_data = nullptr;                // this matrix in slot 0 of the pool
        size_t slot_bytes = 0;                        // from one slot to the next
        uint32_t n_slots = 0;
    };
    ExpertSlotView(ExpertStore & store, int layer, SlotRef ref, int32_t slot, std::vector<Matrix> matrices)
        : store_(&store), layer_(layer), ref_(ref), slot_(slot), matrices_(std::move(matrices)) {}
    ~ExpertSlotView();
    ExpertSlotView(ExpertSlotView && o) noexcept;
    ExpertSlotView(const ExpertSlotView &) = delete;
    ExpertSlotView & operator=(const ExpertSlotView &) = delete;
    ExpertSlotView & operator=(ExpertSlotView &&) = delete;

    int layer() const { return layer_; }
    // The slot to select (a test build's wrong-slot fault may name another one).
    int32_t slot() const { return slot_; }
    // The matrix of that kind, or nullptr when the layer has none.
    const Matrix * matrix(const std::string & kind) const;
    // A weight tensor of `ctx` over the whole pool for `m`, marked the way the paging path marks
    // its views (repacked layout), so ggml picks the kernel it picks there.
    ggml_tensor * weights(ggml_context * ctx, const Matrix & m) const;

private:
    ExpertStore * store_;
    int layer_ = 0;
    SlotRef ref_;
    int32_t slot_ = 0;
    std::vector<Matrix> matrices_;
};

}  // namespace epq
