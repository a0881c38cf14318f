#include "backend/pager.h"

#include "backend/graph_compute_count.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/scoped_timer.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
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

constexpr int kMadvPopulateWrite = 23;  // MADV_POPULATE_WRITE (Linux 5.14), absent from older headers

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The bytes one expert of `layer` occupies in the file (what a read of it moves).
uint64_t file_bytes_of_expert(const LayerLayout & layer) {
    uint64_t n = 0;
    for (const auto & m : layer.matrices) {
        n += m.stride;
    }
    return n;
}

const ggml_tensor * base_of(const ggml_tensor * t) {
    return t->view_src ? t->view_src : t;
}

}  // namespace

Pager::Pager(const std::string & model_path, const ExpertIndex & index, const PagerOptions & opts)
    : path_(model_path),
      layout_(SlotLayout::build(index)),
      plan_(make_plan(layout_, index, opts.arena_bytes)),
      arena_(plan_.pools, opts.policy, lfu_half_life_acquires(layout_.layers.size(), index.n_expert_used)),
      repack_(opts.repack, layout_),
      reader_(model_path),
      reads_(reader_, opts.read_threads),
      prefetch_(opts.prefetch, layout_.layers.size(), 64ull << 20, 0.3),
      activity_(layout_.layers.size(), index.n_expert) {
    for (const auto & p : plan_.pools) {
        pools_.push_back(Mapping::anonymous(static_cast<size_t>(p.slot_bytes) * p.n_slots, "the expert arena"));
    }
    cpu_.reset(ggml_backend_cpu_init());
    if (!cpu_) {
        throw Error("cannot initialise ggml's CPU backend for the expert matmuls");
    }
    faults_ = make_pager_faults();
    stats_.direct_io = reader_.direct();
    stats_.repacked_matrices = repack_.n_repacked();
    layer_ops_.assign(layout_.layers.size(), 0);
    layer_batches_.assign(layout_.layers.size(), 0);
    n_expert_ = index.n_expert;
    read_in_batch_.assign(layout_.layers.size() * n_expert_, 0);
    if (opts.prefetch != PrefetchMode::off) {
        predictor_ = std::make_unique<RouterPredictor>(model_path, index);
        if (!predictor_->available()) {
            prefetch_ = PrefetchAccount(PrefetchMode::off, layout_.layers.size());
            prefetch_.set_state("off (" + predictor_->why() + ")");
        }
    }
    stats_.prefetch_mode = opts.prefetch;
    if (!opts.trace_path.empty()) {
        TraceHeader h;
        h.model = model_path.substr(model_path.find_last_of('/') + 1);
        h.arch = index.arch;
        h.n_expert = index.n_expert;
        h.n_expert_used = index.n_expert_used;
        for (size_t c = 0; c < layout_.class_bytes.size(); ++c) {
            h.classes.push_back({layout_.class_bytes[c], layout_.class_experts[c]});
        }
        for (const auto & l : layout_.layers) {
            h.layers.emplace_back(static_cast<uint32_t>(l.layer), l.size_class);
        }
        trace_ = std::make_unique<TraceWriter>(opts.trace_path, h);
    }
    // Last, so nothing after it can throw. Fault the arena's pages in ahead of use, at low priority. A page touched for
    // the first time inside a read costs an allocation (and on a busy machine, reclaim) on the path of a token;
    // measured on a 10 GiB arena, first touches slowed decode by a third. Populating never changes a byte that a read
    // has already placed, so it can run beside the reads.
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

Pager::~Pager() {
    stop_populate_ = true;
    if (populate_.joinable()) {
        populate_.join();
    }
    drain_prefetch();
    // Reads still queued or in flight write into the arena: they land before it is unmapped
    // (pools_ goes after this, with the other members).
    reads_.join();
}

bool Pager::serves(const ggml_tensor * t) const {
    return layout_.find(base_of(t)->name, nullptr) != nullptr;
}

void Pager::set_n_threads(int n) {
    n_threads_ = n > 0 ? n : 1;
    ggml_backend_cpu_set_n_threads(cpu_.get(), n_threads_);
}

uint8_t * Pager::slot_ptr(SlotRef r) const {
    return pools_[r.pool].data() + static_cast<uint64_t>(r.slot) * plan_.pools[r.pool].slot_bytes;
}

std::shared_ptr<Ticket> Pager::load(const LayerLayout & layer, int32_t expert, SlotRef r) {
    activity_.read(static_cast<size_t>(&layer - layout_.layers.data()), static_cast<uint32_t>(expert));
    std::vector<ReadRequest> reqs;
    uint8_t * slot = slot_ptr(r);
    for (const auto & m : layer.matrices) {
        ReadRequest q;
        q.offset = m.file_offset + static_cast<uint64_t>(expert) * m.stride;
        q.len = m.stride;
        q.dst = slot + m.slot_offset;
        stats_.missed_expert_bytes += m.stride;
        q.room_before = m.slot_offset - m.region_begin;
        q.room_after = m.region_end - (m.slot_offset + m.stride);
        if (repack_.repacks(m)) {
            q.then = [this, &m](uint8_t * dst) { repack_.repack(m, dst); };
        }
        reqs.push_back(q);
    }
    return reads_.submit(reqs);
}

std::vector<std::string> Pager::activity_cells() const {
    return activity_.cells([this](size_t li, uint32_t e) {
        return arena_.find({static_cast<uint32_t>(layout_.layers[li].layer), e}).has_value();
    });
}

uint64_t Pager::resident_experts() const {
    uint64_t n = 0;
    for (const auto & l : layout_.layers) {
        for (uint32_t e = 0; e < n_expert_; ++e) {
            const auto ref = arena_.find({static_cast<uint32_t>(l.layer), e});
            n += ref && arena_.is_ready(*ref);
        }
    }
    return n;
}

void Pager::read_tensor(const ggml_tensor * t, void * data, size_t offset, size_t size) const {
    const MatrixPlacement * m = nullptr;
    if (!layout_.find(base_of(t)->name, &m)) {
        throw Error(std::string("internal: ") + t->name + " is not an expert tensor");
    }
    reader_.read(m->file_offset + offset, size, static_cast<uint8_t *>(data));
}

void Pager::run_chain(const std::vector<ggml_tensor *> & chain, const LayerLayout & layer) {
    auto t_arena = std::chrono::steady_clock::now();  // routing lookup and pinning, until the first wait
    const ggml_tensor * ids = chain.front()->src[2];
    if (ids->type != GGML_TYPE_I32) {
        throw Error(std::string("internal: expert ids of ") + chain.front()->name + " are not I32");
    }
    size_t n_mm = 0;
    for (const ggml_tensor * n : chain) {
        n_mm += n->op == GGML_OP_MUL_MAT_ID;
    }
    stats_.ops += n_mm;
    ++stats_.chains;
    const size_t li = static_cast<size_t>(&layer - layout_.layers.data());
    const bool first_op_of_layer = layer_ops_[li] % layer.matrices.size() == 0;
    layer_ops_[li] += n_mm;
    if (first_op_of_layer) {
        ++layer_batches_[li];
        if (li == 0) {
            activity_.next_batch();
        }
    }

    // The distinct experts the router chose, those already resident first: pinning them before
    // any miss takes a slot keeps a batch that selects more experts than the arena holds from
    // evicting its own resident experts.
    std::vector<int32_t> experts;
    chain_rows_.assign(n_expert_, 0);
    for (int64_t t = 0; t < ids->ne[1]; ++t) {
        for (int64_t k = 0; k < ids->ne[0]; ++k) {
            const int32_t e = *reinterpret_cast<const int32_t *>(static_cast<const char *>(ids->data) + t * ids->nb[1] +
                                                                 k * ids->nb[0]);
            if (e < 0 || static_cast<uint32_t>(e) >= n_expert_) {
                throw Error("internal: router selected expert " + std::to_string(e) + " of " +
                            std::to_string(n_expert_));
            }
            if (chain_rows_[static_cast<size_t>(e)]++ == 0) {
                experts.push_back(e);
            }
        }
    }
    const uint32_t layer_no = static_cast<uint32_t>(layer.layer);
    std::stable_partition(experts.begin(), experts.end(), [&](int32_t e) {
        return arena_.find({layer_no, static_cast<uint32_t>(e)}).has_value();
    });
    if (first_op_of_layer) {
        stats_.expert_lookups += experts.size();
        for (int32_t e : experts) {
            activity_.used(li, static_cast<uint32_t>(e));
        }
    }
    if (trace_ && first_op_of_layer) {
        if (li == 0) {
            ++trace_step_;
            trace_token_ += trace_step_tokens_;
            trace_step_tokens_ = static_cast<uint64_t>(ids->ne[1]);
        }
        std::vector<int32_t> row(static_cast<size_t>(ids->ne[0]));
        for (int64_t t = 0; t < ids->ne[1]; ++t) {
            for (int64_t k = 0; k < ids->ne[0]; ++k) {
                row[static_cast<size_t>(k)] = *reinterpret_cast<const int32_t *>(static_cast<const char *>(ids->data) +
                                                                                 t * ids->nb[1] + k * ids->nb[0]);
            }
            trace_->record(trace_step_, trace_token_ + static_cast<uint64_t>(t), layer_no, row.data(), row.size());
        }
    }
    const bool decode = ids->ne[1] == 1;
    if (li == 0 && first_op_of_layer) {
        // Token boundaries of decode: the auto prefetch trial compares whole-token times.
        const auto now = std::chrono::steady_clock::now();
        if (decode && token_clock_running_) {
            prefetch_.token_time(std::chrono::duration<double>(now - token_start_).count());
        }
        token_start_ = now;
        token_clock_running_ = decode;
    }
    stats_.arena_seconds += since(t_arena);
    // Reads started ahead for this layer during the previous one's prompt ubatch are taken over
    // as they are, in flight or landed: an expert selected here waits on its read like a miss of
    // its own, and nothing waits for the ones it does not select until the chain is done.
    std::vector<Use> adopted;
    std::vector<std::shared_ptr<Ticket>> landing;
    if (pending_.valid && pending_.prefill && pending_.li == li && first_op_of_layer) {
        adopted = std::move(pending_.reads);
        pending_ = Prefetch{};
        landing.assign(n_expert_, nullptr);
        for (const Use & u : adopted) {
            landing[static_cast<size_t>(u.expert)] = u.ticket;
        }
    } else {
        settle_prefetch(li, experts, decode && first_op_of_layer);
    }
    bool predicted =
        !(decode && first_op_of_layer && predictor_ && prefetch_.active() && li + 1 < layout_.layers.size());
    // A prompt ubatch reads the next layer's experts while this one computes (when prefetch is
    // not off): see start_prefill_readahead.
    bool read_ahead =
        !decode && first_op_of_layer && stats_.prefetch_mode != PrefetchMode::off && li + 1 < layout_.layers.size();

    // A pipeline bounded by the arena: pin and request as many experts as fit, compute those
    // that are ready, release their slots, and pin more. Every expert is pinned once per chain.
    stage_outputs(chain);
    std::vector<Use> inflight;
    size_t next = 0;
    try {
        bool read_any = false;
        while (next < experts.size() || !inflight.empty()) {
            t_arena = std::chrono::steady_clock::now();
            for (; next < experts.size(); ++next) {
                const uint32_t e = static_cast<uint32_t>(experts[next]);
                auto a = arena_.acquire({layer_no, e}, layer.size_class);
                if (!a) {
                    break;
                }
                Use u;
                u.expert = experts[next];
                u.ref = a->ref;
                if (a->hit && !landing.empty() && landing[e]) {
                    ++stats_.readahead_used;
                    if (!arena_.is_ready(u.ref)) {
                        u.ticket = landing[e];  // read ahead and still landing
                    }
                }
                if (!a->hit) {
                    u.ticket = load(layer, u.expert, u.ref);
                    read_any = true;
                    uint64_t & last = read_in_batch_[li * n_expert_ + e];
                    stats_.rereads += last == layer_batches_[li];
                    last = layer_batches_[li];
                }
                inflight.push_back(std::move(u));
            }
            if (inflight.empty()) {
                throw Error("internal: no arena slot can be pinned");
            }
            if (!predicted && next == experts.size()) {
                // Every expert of this layer is pinned and its reads are queued: guess the next
                // layer's and queue those reads behind them.
                stats_.arena_seconds += since(t_arena);
                {
                    ScopedTimer timer(stats_.predict_seconds);
                    start_prefetch(li, chain.front()->src[1]);
                }
                t_arena = std::chrono::steady_clock::now();
                predicted = true;
            }
            if (read_ahead && next == experts.size()) {
                stats_.arena_seconds += since(t_arena);
                {
                    ScopedTimer timer(stats_.predict_seconds);
                    start_prefill_readahead(li, chain.front()->src[1], ids->ne[0]);
                }
                t_arena = std::chrono::steady_clock::now();
                read_ahead = false;
            }
            // Resident experts first, then misses as they arrive (at least the oldest one).
            std::vector<size_t> ready;
            for (size_t i = 0; i < inflight.size(); ++i) {
                if (!inflight[i].ticket || inflight[i].ticket->done()) {
                    ready.push_back(i);
                }
            }
            if (ready.empty()) {
                stats_.arena_seconds += since(t_arena);
                const auto t0 = std::chrono::steady_clock::now();
                size_t first = 0;
                while (!inflight[first].ticket) {
                    ++first;
                }
                inflight[first].ticket->wait();
                stats_.wait_seconds += since(t0);
                t_arena = std::chrono::steady_clock::now();
                for (size_t i = 0; i < inflight.size(); ++i) {
                    if (inflight[i].ticket && inflight[i].ticket->done()) {
                        ready.push_back(i);
                    }
                }
            }
            std::vector<const Use *> ready_uses;
            for (size_t i : ready) {
                Use & u = inflight[i];
                if (u.ticket) {
                    u.ticket->wait();  // rethrows a read error
                    if (!arena_.is_ready(u.ref)) {
                        loaded(layer, u.ref);
                    }
                }
                ready_uses.push_back(&u);
            }
            stats_.arena_seconds += since(t_arena);
            for (uint32_t p = 0; p < plan_.pools.size(); ++p) {
                std::vector<const Use *> group;
                for (const Use * u : ready_uses) {
                    if (u->ref.pool == p) {
                        group.push_back(u);
                    }
                }
                if (!group.empty()) {
                    compute_group(chain, group);
                }
            }
            ScopedTimer unpin_timer(stats_.arena_seconds);
            std::vector<Use> rest;
            for (size_t i = 0, r = 0; i < inflight.size(); ++i) {
                if (r < ready.size() && ready[r] == i) {
                    arena_.unpin(inflight[i].ref);
                    ++r;
                } else {
                    rest.push_back(std::move(inflight[i]));
                }
            }
            inflight = std::move(rest);
        }
        if (read_any) {
            ScopedTimer timer(stats_.arena_seconds);
            reader_.check_unchanged();
        }
        write_outputs(chain);
        // Read-ahead this layer did not select: keep what landed, and the slots for what follows.
        for (Use & u : adopted) {
            u.ticket->wait();
            if (!arena_.is_ready(u.ref)) {
                loaded(layer, u.ref);
            }
        }
        release(adopted);
    } catch (...) {
        release(inflight);
        release(adopted);
        throw;
    }
}

uint64_t Pager::preload() {
    uint64_t resident = 0;
    std::vector<Use> batch;  // reads in flight, all of layer `batch_layer`
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
            Use u;
            u.expert = static_cast<int32_t>(e);
            u.ref = a->ref;
            u.ticket = load(layer, u.expert, u.ref);
            ++stats_.preloaded;
            batch.push_back(std::move(u));
            if (batch.size() >= 64) {
                finish();
            }
        }
        finish();  // a batch holds one layer's experts
    }
    finish();
    return resident;
}

void Pager::flush_trace() {
    if (trace_) {
        trace_->flush();
    }
}

void Pager::start_prefetch(size_t li, const ggml_tensor * x) {
    const LayerLayout & next = layout_.layers[li + 1];
    Prefetch p;
    p.li = li + 1;
    p.guessed = predictor_->predict(next.layer, static_cast<const float *>(x->data), x->ne[0]);
    const uint64_t expert_bytes = file_bytes_of_expert(next);
    for (uint32_t e : p.guessed) {
        auto a = arena_.acquire({static_cast<uint32_t>(next.layer), e}, next.size_class);
        if (!a) {
            p.read_bytes.push_back(0);
            continue;
        }
        if (a->hit) {
            arena_.unpin(a->ref);  // already resident: the lookup only refreshed it
            p.read_bytes.push_back(0);
            continue;
        }
        Use u;
        u.expert = static_cast<int32_t>(e);
        u.ref = a->ref;
        u.ticket = load(next, u.expert, u.ref);
        ++stats_.speculative_reads;
        stats_.speculative_bytes += expert_bytes;
        p.reads.push_back(std::move(u));
        p.read_bytes.push_back(expert_bytes);
    }
    p.valid = true;
    pending_ = std::move(p);
}

void Pager::start_prefill_readahead(size_t li, const ggml_tensor * x, int64_t k) {
    const LayerLayout & next = layout_.layers[li + 1];
    const int64_t n_tok = x->ne[2];
    // Which of the next layer's experts the ubatch will select: the union of the next layer's
    // router applied to each row of this layer's input (the residual stream moves little between
    // layers), where the model's routers allow it. That costs a router per row (0.27 ms on the
    // 35B shape, 2 threads), so a ubatch of more than kPredictRows rows reads every expert it
    // does not hold instead: it selects most of them. Measured on the 35B shape with realistic
    // routing under an 8 GiB cap: a 64-token ubatch used only 37% of a whole next layer read
    // ahead (all wasted reads are also repacked on the read threads), a 512-token one 63%.
    constexpr int64_t kPredictRows = 128;
    std::vector<uint32_t> want;
    const bool predict = predictor_ && predictor_->available() && n_tok <= kPredictRows;
    if (!predict && n_tok * k >= 2 * static_cast<int64_t>(n_expert_)) {
        for (uint32_t e = 0; e < n_expert_; ++e) {
            want.push_back(e);
        }
    } else if (predict) {
        std::vector<char> seen(n_expert_, 0);
        for (int64_t t = 0; t < n_tok; ++t) {
            const float * row = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + t * x->nb[2]);
            for (uint32_t e : predictor_->predict(next.layer, row, x->ne[0])) {
                if (!seen[e]) {
                    seen[e] = 1;
                    want.push_back(e);
                }
            }
        }
    }
    // At most half of the next layer's size class, so a small arena is not flushed by guesses.
    const size_t cap = plan_.pools[next.size_class].n_slots / 2;
    const uint64_t expert_bytes = file_bytes_of_expert(next);
    Prefetch p;
    p.prefill = true;
    p.li = li + 1;
    for (uint32_t e : want) {
        if (p.reads.size() >= cap) {
            break;
        }
        const ExpertKey key{static_cast<uint32_t>(next.layer), e};
        if (arena_.find(key)) {
            continue;  // resident: the layer pins it itself
        }
        auto a = arena_.acquire(key, next.size_class);
        if (!a) {
            break;  // every slot is pinned
        }
        Use u;
        u.expert = static_cast<int32_t>(e);
        u.ref = a->ref;
        u.ticket = load(next, u.expert, u.ref);
        ++stats_.speculative_reads;
        ++stats_.readahead_reads;
        stats_.speculative_bytes += expert_bytes;
        p.reads.push_back(std::move(u));
    }
    p.valid = true;
    pending_ = std::move(p);
}

void Pager::settle_prefetch(size_t li, const std::vector<int32_t> & selected, bool decode) {
    if (!pending_.valid) {
        return;
    }
    Prefetch p = std::move(pending_);
    pending_ = Prefetch{};
    const LayerLayout & layer = layout_.layers[p.li];
    const auto t0 = std::chrono::steady_clock::now();
    try {
        for (auto & u : p.reads) {
            u.ticket->wait();
            loaded(layer, u.ref);
        }
    } catch (...) {
        release(p.reads);
        throw;
    }
    release(p.reads);
    stats_.prefetch_wait_seconds += since(t0);
    if (decode && p.li == li) {
        prefetch_.settle(li, p.guessed, p.read_bytes, std::vector<uint32_t>(selected.begin(), selected.end()));
    }
}

void Pager::drain_prefetch() noexcept {
    release(pending_.reads);
    pending_ = Prefetch{};
}

void Pager::release(std::vector<Use> & uses) noexcept {
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

void Pager::loaded(const LayerLayout & layer, SlotRef r) {
    arena_.loaded(r);
    if (faults_) {
        const MatrixPlacement & m = layer.matrices.front();
        faults_->landed(slot_ptr(r) + m.slot_offset, ggml_row_size(static_cast<ggml_type>(m.type), m.n_in));
    }
}

int32_t Pager::fault_slot(int32_t slot, uint32_t pool) {
    return faults_ ? static_cast<int32_t>(faults_->slot(static_cast<uint32_t>(slot), plan_.pools[pool].n_slots)) : slot;
}

uint64_t Pager::scratch_bound(const ExpertIndex & index, uint32_t n_batch) {
    // Per (token, selected expert) entry of a layer's batch, in floats: the gathered input row
    // (n_in of the first matrix), every chain node's output row (gate, up, their biases and
    // activation: n_out of gate/up each; down, its bias and the weighting: n_out of down each),
    // the staged copy of the chain's output, and ggml's work buffer, which holds the quantized
    // input of the largest matmul (at most a float per value).
    uint64_t per_entry = 0;
    for (const auto & l : index.layers) {
        uint64_t in = 0, mid = 0, out = 0;
        for (const auto & t : l.tensors) {
            if (t.kind == "down") {
                out = std::max<uint64_t>(out, static_cast<uint64_t>(t.ne[1]));
                mid = std::max<uint64_t>(mid, static_cast<uint64_t>(t.ne[0]));
            } else {
                in = std::max<uint64_t>(in, static_cast<uint64_t>(t.ne[0]));
                mid = std::max<uint64_t>(mid, static_cast<uint64_t>(t.ne[1]));
            }
        }
        per_entry = std::max(per_entry, in * 3 + mid * 9 + out * 6);  // a node or two to spare
    }
    const uint64_t entries = static_cast<uint64_t>(std::max<uint32_t>(n_batch, 1)) * index.n_expert_used;
    // Graph contexts: a few dozen nodes per expert window, and slack for allocator rounding.
    return entries * per_entry * sizeof(float) + static_cast<uint64_t>(index.n_expert) * 32 * 1024 + (4ull << 20);
}

PagerStats Pager::stats() const {
    PagerStats s = stats_;
    s.scratch_bytes = work_bytes_ + ctx_mem_.capacity();
    s.scratch_bytes += rows_.capacity() * sizeof(float);
    for (const auto & v : staged_) {
        s.scratch_bytes += v.capacity() * sizeof(float);
    }
    const auto & c = arena_.counters();
    s.misses = c.misses;
    // Speculative reads are not misses of a lookup: an expert read early and then used was
    // resident when its layer asked for it.
    const uint64_t demand_misses = c.misses - std::min(c.misses, s.speculative_reads + s.preloaded);
    s.demand_misses = demand_misses;
    s.hits = s.expert_lookups > demand_misses ? s.expert_lookups - demand_misses : 0;
    s.evictions = c.evictions;
    s.borrowed = c.borrowed;
    const ReadStats rs = reads_.stats();
    s.bytes_read = rs.bytes;
    s.read_requests = rs.requests;
    s.read_busy_seconds = rs.busy_seconds;
    s.read_wall_seconds = rs.wall_seconds;
    s.repack_seconds = rs.then_seconds;
    s.read_cpu_seconds = rs.cpu_seconds;
    s.all_graph_computes = ggml_graph_compute_counter().load(std::memory_order_relaxed);
    s.prefetch_state = prefetch_.state();
    s.prefetch = prefetch_.total();
    s.prefetch_layers = prefetch_.per_layer();
    return s;
}

}  // namespace epq
