#include "backend/expert_store.h"

#include "util/error.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace epq {

namespace {

ArenaPlan make_plan(const SlotLayout & layout, const ExpertIndex & index, uint64_t budget) {
    std::vector<SizeClassDemand> demand;
    for (size_t c = 0; c < layout.class_bytes.size(); ++c) {
        demand.push_back({layout.class_bytes[c], layout.class_experts[c]});
    }
    return plan_arena(budget, demand, index.n_expert_used);
}

// Where the repacked-experts file sits in the reader's byte space: past any model's files.
constexpr uint64_t kRepackedBase = 1ull << 62;

std::vector<ModelFilePart> reader_parts(const ExpertIndex & index, const ExpertStoreOptions & opts) {
    std::vector<ModelFilePart> parts = model_file_parts(index);
    if (opts.repack && opts.repacked_file) {
        parts.push_back({opts.repacked_file->path, kRepackedBase});
    }
    return parts;
}

constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14), absent from older headers

}  // namespace

ArenaPlan plan_expert_arena(const ExpertIndex & index, uint64_t budget) {
    return make_plan(SlotLayout::build(index), index, budget);
}

std::vector<ModelFilePart> model_file_parts(const ExpertIndex & index) {
    std::vector<ModelFilePart> parts;
    for (const auto & s : index.shards) {
        parts.push_back({s.path, s.base});
    }
    return parts;
}

// What the replacement policy may know: the MoE layers in the order a token computes them, and
// how many experts a token selects of how many.
PolicyContext policy_context(const SlotLayout & layout, const ExpertIndex & index) {
    PolicyContext ctx;
    for (const auto & l : layout.layers) {
        ctx.layers.push_back(static_cast<uint32_t>(l.layer));
    }
    ctx.n_expert = index.n_expert;
    ctx.n_expert_used = index.n_expert_used;
    ctx.lfu_half_life = lfu_half_life_acquires(layout.layers.size(), index.n_expert_used);
    return ctx;
}

ExpertStore::ExpertStore(const ExpertIndex & index, const ExpertStoreOptions & opts, PagerTelemetry & telemetry)
    : telemetry_(telemetry),
      layout_(SlotLayout::build(index)),
      plan_(make_plan(layout_, index, opts.arena_bytes)),
      arena_(plan_.pools, opts.policy, policy_context(layout_, index)),
      repack_(opts.repack, layout_),
      repacked_file_(opts.repack ? opts.repacked_file : std::nullopt),
      reader_(reader_parts(index, opts)),
      reads_(reader_, opts.read_threads),
      n_expert_(index.n_expert) {
    for (const auto & p : plan_.pools) {
        pools_.push_back(Mapping::anonymous(static_cast<size_t>(p.slot_bytes) * p.n_slots, "the expert arena"));
        // Huge pages where the system allows them (transparent huge pages in madvise mode): a
        // slot of a few MiB is then a couple of TLB entries for the expert matmuls instead of
        // hundreds, and a direct read pins a couple of pages instead of hundreds. Refused, it
        // stays on small pages.
        madvise(pools_.back().data(), pools_.back().size(), MADV_HUGEPAGE);
    }
    set_home_slots();
    faults_ = make_pager_faults();
    telemetry_.counters().direct_io = reader_.direct();
    telemetry_.counters().repacked_matrices = repack_.n_repacked();
    telemetry_.counters().repacked_file = repacked_file_ ? repacked_file_->path : "";
    start_populating();  // last, so nothing after it can throw
}

// A pool with a slot for every expert of its class places them in expert order, layer after
// layer of that class: see SlotArena::set_home and ChainCompute's whole-layer path.
void ExpertStore::set_home_slots() {
    for (uint32_t p = 0; p < plan_.pools.size() && p < layout_.class_experts.size(); ++p) {
        if (plan_.pools[p].n_slots < layout_.class_experts[p]) {
            continue;
        }
        auto rank = std::make_shared<std::unordered_map<uint32_t, uint32_t>>();
        for (const auto & l : layout_.layers) {
            if (l.size_class == p) {
                rank->emplace(static_cast<uint32_t>(l.layer), static_cast<uint32_t>(rank->size()));
            }
        }
        const uint32_t n_expert = n_expert_;
        arena_.set_home(p, [rank, n_expert](const ExpertKey & k) -> std::optional<uint32_t> {
            auto it = rank->find(k.layer);
            if (it == rank->end() || k.expert >= n_expert) {
                return std::nullopt;
            }
            return it->second * n_expert + k.expert;
        });
    }
}

// Faults the arena's pages in ahead of use, at low priority. A page touched for the first time
// inside a read costs an allocation (and on a busy machine, reclaim) on the path of a token;
// measured on a 10 GiB arena, first touches slowed decode by a third. Populating never changes a
// byte that a read has already placed, so it can run beside the reads.
void ExpertStore::start_populating() {
    populate_ = std::thread([this]() {
        setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
        constexpr size_t kChunk = 4u << 20;  // short holds of the mm lock: mmap() elsewhere waits on it
        for (const Mapping & pool : pools_) {
            for (size_t at = 0; at < pool.size() && !stop_populate_.load(); at += kChunk) {
                if (madvise(pool.data() + at, std::min(kChunk, pool.size() - at), kMadvPopulateWrite) != 0) {
                    return;  // not supported by this kernel (before 5.14): pages fault in on first use
                }
            }
        }
    });
}

ExpertStore::~ExpertStore() {
    stop_populate_ = true;
    if (populate_.joinable()) {
        populate_.join();
    }
    // Reads still queued or in flight write into the arena: they land before it is unmapped
    // (pools_ goes after this, with the other members).
    reads_.join();
}

uint8_t * ExpertStore::slot_ptr(SlotRef r) const {
    return pools_[r.pool].data() + static_cast<uint64_t>(r.slot) * plan_.pools[r.pool].slot_bytes;
}

std::shared_ptr<Ticket> ExpertStore::load(const LayerLayout & layer, int32_t expert, SlotRef r, bool guess) {
    telemetry_.activity().read(layer_index(layer), static_cast<uint32_t>(expert));
    std::vector<ReadRequest> reqs;
    uint8_t * slot = slot_ptr(r);
    if (repacked_file_) {
        // The whole slot image, ready to compute: one read, no rewrite.
        ReadRequest q;
        q.offset = kRepackedBase + repacked_file_->image_offset(layer_index(layer), static_cast<uint32_t>(expert));
        q.len = layer.bytes;
        q.dst = slot;
        for (const auto & m : layer.matrices) {
            telemetry_.counters().missed_expert_bytes += m.stride;
        }
        reqs.push_back(q);
        return reads_.submit(reqs, !guess);
    }
    for (const auto & m : layer.matrices) {
        ReadRequest q;
        q.offset = m.file_offset + static_cast<uint64_t>(expert) * m.stride;
        q.len = m.stride;
        q.dst = slot + m.slot_offset;
        telemetry_.counters().missed_expert_bytes += m.stride;
        q.room_before = m.slot_offset - m.region_begin;
        q.room_after = m.region_end - (m.slot_offset + m.stride);
        if (repack_.repacks(m)) {
            q.then = [this, &m](uint8_t * dst) { repack_.repack(m, dst); };
        }
        reqs.push_back(q);
    }
    return reads_.submit(reqs, !guess);
}

void ExpertStore::loaded(const LayerLayout & layer, SlotRef r) {
    arena_.loaded(r);
    if (faults_) {
        const MatrixPlacement & m = layer.matrices.front();
        faults_->landed(slot_ptr(r) + m.slot_offset, ggml_row_size(static_cast<ggml_type>(m.type), m.n_in));
    }
}

void ExpertStore::release(std::vector<ExpertUse> & uses) noexcept {
    for (auto & u : uses) {
        try {
            if (u.ticket && !arena_.is_ready(u.ref)) {
                // Let an in-flight read finish before the slot can be handed out again; its
                // error, if any, reached (or will reach) whoever waited for it to compute.
                try {
                    u.ticket->wait();
                } catch (const Error &) {
                }
                arena_.failed(u.ref);
            }
            arena_.unpin(u.ref);
        } catch (const std::exception & e) {
            // A broken arena invariant (or no memory for its queues): this runs while unwinding
            // and in destructors, so the error waits for the next compute, which throws it.
            if (deferred_error_.empty()) {
                deferred_error_ = std::string("internal: releasing an expert slot failed: ") + e.what();
            }
        }
    }
    uses.clear();
}

void ExpertStore::check_deferred_error() const {
    if (!deferred_error_.empty()) {
        throw Error(deferred_error_);
    }
}

int32_t ExpertStore::fault_slot(int32_t slot, uint32_t pool) {
    return faults_ ? static_cast<int32_t>(faults_->slot(static_cast<uint32_t>(slot), plan_.pools[pool].n_slots)) : slot;
}

uint64_t ExpertStore::preload() {
    uint64_t resident = 0;
    std::vector<ExpertUse> batch;  // reads in flight, all of layer `batch_layer`
    const LayerLayout * batch_layer = nullptr;
    auto finish = [&]() {
        try {
            for (auto & u : batch) {
                u.ticket->wait();
                loaded(*batch_layer, u.ref);
            }
        } catch (...) {
            release(batch);
            throw;
        }
        release(batch);
    };
    for (const auto & layer : layout_.layers) {
        batch_layer = &layer;
        for (uint32_t e = 0; e < n_expert_; ++e) {
            const uint64_t evictions = arena_.counters().evictions;
            auto a = arena_.acquire({static_cast<uint32_t>(layer.layer), e}, layer.size_class);
            if (!a) {
                finish();
                return resident;
            }
            if (arena_.counters().evictions != evictions || (a->ref.pool != layer.size_class && !a->hit)) {
                // Full: this read would push out an expert preloaded earlier (or borrow a slot
                // another class needs). Give the slot back unused.
                arena_.failed(a->ref);
                arena_.unpin(a->ref);
                finish();
                return resident;
            }
            ++resident;
            if (a->hit) {
                arena_.unpin(a->ref);
                continue;
            }
            batch.push_back({static_cast<int32_t>(e), a->ref, load(layer, static_cast<int32_t>(e), a->ref)});
            ++telemetry_.counters().preloaded;
            if (batch.size() >= 64) {
                finish();
            }
        }
        finish();  // a batch holds one layer's experts
    }
    finish();
    return resident;
}

ExpertSlotView ExpertStore::hold(int layer_no, int32_t expert) {
    const LayerLayout * layer = nullptr;
    for (const auto & l : layout_.layers) {
        layer = l.layer == layer_no ? &l : layer;
    }
    if (!layer) {
        throw Error("layer " + std::to_string(layer_no) + " has no routed experts");
    }
    auto a = arena_.acquire({static_cast<uint32_t>(layer_no), static_cast<uint32_t>(expert)}, layer->size_class);
    if (!a) {
        throw Error("internal: no arena slot for the kernel check");
    }
    try {
        if (!a->hit) {
            load(*layer, expert, a->ref)->wait();
            loaded(*layer, a->ref);
        }
    } catch (...) {
        if (!arena_.is_ready(a->ref)) {
            arena_.failed(a->ref);
        }
        arena_.unpin(a->ref);
        throw;
    }
    const uint32_t pool = a->ref.pool;
    std::vector<ExpertSlotView::Matrix> matrices;
    for (const auto & m : layer->matrices) {
        matrices.push_back(
            {&m, pools_[pool].data() + m.slot_offset, plan_.pools[pool].slot_bytes, plan_.pools[pool].n_slots});
    }
    const int32_t slot = fault_slot(static_cast<int32_t>(a->ref.slot), pool);
    return ExpertSlotView(*this, layer_no, a->ref, slot, std::move(matrices));
}

void ExpertStore::read_file(const MatrixPlacement & m, void * data, size_t offset, size_t size) const {
    reader_.read(m.file_offset + offset, size, static_cast<uint8_t *>(data));
}

uint64_t ExpertStore::resident_experts() const {
    uint64_t n = 0;
    for (const auto & l : layout_.layers) {
        for (uint32_t e = 0; e < n_expert_; ++e) {
            const auto ref = arena_.find({static_cast<uint32_t>(l.layer), e});
            n += ref && arena_.is_ready(*ref);
        }
    }
    return n;
}

ExpertSlotView::ExpertSlotView(ExpertSlotView && o) noexcept
    : store_(o.store_), layer_(o.layer_), ref_(o.ref_), slot_(o.slot_), matrices_(std::move(o.matrices_)) {
    o.store_ = nullptr;
}

ExpertSlotView::~ExpertSlotView() {
    if (store_) {
        std::vector<ExpertUse> held{{0, ref_, nullptr}};
        store_->release(held);
    }
}

const ExpertSlotView::Matrix * ExpertSlotView::matrix(const std::string & kind) const {
    for (const Matrix & m : matrices_) {
        if (m.placement->kind == kind) {
            return &m;
        }
    }
    return nullptr;
}

ggml_tensor * ExpertSlotView::weights(ggml_context * ctx, const Matrix & m) const {
    const MatrixPlacement & p = *m.placement;
    ggml_tensor * w = ggml_new_tensor_3d(ctx, static_cast<ggml_type>(p.type), p.n_in, p.n_out, m.n_slots);
    w->data = m.pool_data;
    w->nb[2] = m.slot_bytes;
    w->nb[3] = w->nb[2] * static_cast<size_t>(w->ne[2]);
    store_->repack().tag(w, p);
    return w;
}

}  // namespace epq
