#include "backend/pager.h"

#include "backend/expert_chain.h"
#include "backend/graph_compute_count.h"
#include "util/error.h"
#include "util/scoped_timer.h"

#include <algorithm>
#include <cstring>
#include <chrono>
#include <memory>

namespace epq {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const ggml_tensor * base_of(const ggml_tensor * t) {
    return t->view_src ? t->view_src : t;
}

int32_t id_at(const ggml_tensor * ids, int64_t k, int64_t t) {
    return *reinterpret_cast<const int32_t *>(static_cast<const char *>(ids->data) + t * ids->nb[1] + k * ids->nb[0]);
}

ExpertStoreOptions store_options(const PagerOptions & o) {
    ExpertStoreOptions s;
    s.arena_bytes = o.arena_bytes;
    s.read_threads = o.read_threads;
    s.policy = o.policy;
    s.repack = o.repack;
    s.repacked_file = o.repacked_file;
    return s;
}

}  // namespace

// One run of run_chain: what the router chose, and the experts pinned and in flight.
struct Pager::ChainRun {
    const std::vector<ggml_tensor *> & chain;
    const LayerLayout & layer;
    const ggml_tensor * ids = nullptr;
    size_t li = 0;
    uint32_t layer_no = 0;
    bool first = false;  // the layer's first chain of this batch
    bool decode = false;
    std::vector<int32_t> experts;  // the distinct experts selected, resident ones first
    size_t next = 0;               // experts[next] is the next to pin
    std::vector<ExpertUse> inflight;
    std::vector<ExpertUse> adopted;                // read ahead for this layer during the previous one
    std::vector<std::shared_ptr<Ticket>> landing;  // [expert]: its adopted read, if any
    bool read_any = false, predicted = false, read_ahead = false;
    std::chrono::steady_clock::time_point t_arena;  // the arena clock's running interval
};

Pager::Pager(const std::string & model_path, const ExpertIndex & index, const PagerOptions & opts)
    : telemetry_(model_path, index, SlotLayout::build(index), opts.trace_path),
      store_(index, store_options(opts), telemetry_),
      chain_(store_, telemetry_),
      read_ahead_(opts.prefetch, model_path, index, store_, telemetry_) {}

bool Pager::serves(const ggml_tensor * t) const {
    return store_.layout().find(base_of(t)->name, nullptr) != nullptr;
}

void Pager::read_tensor(const ggml_tensor * t, void * data, size_t offset, size_t size) const {
    const MatrixPlacement * m = nullptr;
    if (!store_.layout().find(base_of(t)->name, &m)) {
        throw Error(std::string("internal: ") + t->name + " is not an expert tensor");
    }
    store_.read_file(*m, data, offset, size);
}

Pager::View Pager::view() const {
    std::lock_guard<std::mutex> lock(compute_mu_);
    const SlotLayout & layout = store_.layout();
    View v;
    for (const auto & l : layout.layers) {
        v.layers.push_back(static_cast<uint32_t>(l.layer));
    }
    v.cells = telemetry_.activity().cells([this, &layout](size_t li, uint32_t e) {
        return store_.arena().find({static_cast<uint32_t>(layout.layers[li].layer), e}).has_value();
    });
    v.n_expert = v.cells.empty() ? 0 : static_cast<uint32_t>(v.cells.front().size());
    v.resident_experts = store_.resident_experts();
    v.batches = telemetry_.activity().batches();
    return v;
}

void Pager::compute(ggml_cgraph * graph) {
    std::lock_guard<std::mutex> lock(compute_mu_);
    store_.check_deferred_error();
    ScopedTimer timer(telemetry_.counters().pager_seconds);
    const int n = ggml_graph_n_nodes(graph);
    if (dry_run_) {
        for (int k = 0; k < n; ++k) {
            ggml_tensor * node = ggml_graph_node(graph, k);
            if (!is_layout_node(node) && !node->view_src && node->data) {
                std::memset(node->data, 0, ggml_nbytes(node));
            }
        }
        return;
    }
    int i = 0;
    while (i < n) {
        ggml_tensor * node = ggml_graph_node(graph, i);
        if (is_layout_node(node)) {
            ++i;
            continue;
        }
        if (node->op != GGML_OP_MUL_MAT_ID) {
            // An elementwise node whose chain was cut by the scheduler (an eval callback asks
            // for a node in between): compute it alone, as the CPU backend would.
            chain_.compute_node_on_cpu(graph, i++);
            continue;
        }
        const ggml_tensor * w = node->src[0];
        const ggml_tensor * x = node->src[1];
        const LayerLayout * layer = store_.layout().find(base_of(w)->name, nullptr);
        if (!layer || w->view_offs != 0 || x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) ||
            node->nb[0] != sizeof(float)) {
            throw Error(std::string("internal: unsupported expert matmul on ") + w->name);
        }
        std::vector<ggml_tensor *> chain{node};
        int j = i + 1;
        for (; j < n; ++j) {
            ggml_tensor * next = ggml_graph_node(graph, j);
            if (is_layout_node(next)) {
                continue;
            }
            if (!chain_.extends_chain(chain, next)) {
                break;
            }
            chain.push_back(next);
        }
        run_chain(chain, *layer);
        i = j;
    }
}

void Pager::run_chain(const std::vector<ggml_tensor *> & chain, const LayerLayout & layer) {
    ChainRun run{chain, layer};
    run.t_arena = std::chrono::steady_clock::now();  // routing lookup and pinning, until the first wait
    route(run);
    take_over_read_ahead(run);
    run.predicted = !(run.first && read_ahead_.predicts(run.li, run.decode));
    run.read_ahead = run.first && read_ahead_.reads_ahead(run.li, run.decode);

    // A pipeline bounded by the arena: pin and request as many experts as fit, compute those
    // that are ready, release their slots, and pin more. Every expert is pinned once per chain.
    chain_.stage_outputs(chain);
    try {
        while (run.next < run.experts.size() || !run.inflight.empty()) {
            run.t_arena = std::chrono::steady_clock::now();
            pin(run);
            start_read_ahead(run);
            const std::vector<size_t> ready = wait_ready(run);
            compute_ready(run, ready);
            unpin_ready(run, ready);
        }
        finish_chain(run);
        telemetry_.chain_ends();
    } catch (...) {
        store_.release(run.inflight);
        store_.release(run.adopted);
        throw;
    }
}

// The distinct experts the router chose, those already resident first: pinning them before any
// miss takes a slot keeps a batch that selects more experts than the arena holds from evicting
// its own resident experts. A layer's first chain of a batch is counted, traced and, at layer 0,
// marks a token boundary.
void Pager::route(ChainRun & run) {
    const ggml_tensor * ids = run.chain.front()->src[2];
    if (ids->type != GGML_TYPE_I32) {
        throw Error(std::string("internal: expert ids of ") + run.chain.front()->name + " are not I32");
    }
    run.ids = ids;
    size_t n_mm = 0;
    for (const ggml_tensor * n : run.chain) {
        n_mm += n->op == GGML_OP_MUL_MAT_ID;
    }
    run.li = store_.layer_index(run.layer);
    run.first = telemetry_.begin_chain(run.li, n_mm, run.layer.matrices.size());
    if (run.first && run.li == 0) {
        telemetry_.counters().tokens += static_cast<uint64_t>(ids->ne[1]);
        telemetry_.batch_starts(static_cast<uint64_t>(ids->ne[1]));
    }
    if (script_) {
        apply_script(run, const_cast<ggml_tensor *>(ids));
    }
    const uint32_t n_expert = store_.n_expert();
    std::vector<int64_t> & rows = chain_.expert_rows();
    rows.assign(n_expert, 0);
    for (int64_t t = 0; t < ids->ne[1]; ++t) {
        for (int64_t k = 0; k < ids->ne[0]; ++k) {
            const int32_t e = id_at(ids, k, t);
            if (e < 0 || static_cast<uint32_t>(e) >= n_expert) {
                throw Error("internal: router selected expert " + std::to_string(e) + " of " +
                            std::to_string(n_expert));
            }
            if (rows[static_cast<size_t>(e)]++ == 0) {
                run.experts.push_back(e);
            }
        }
    }
    run.layer_no = static_cast<uint32_t>(run.layer.layer);
    std::stable_partition(run.experts.begin(), run.experts.end(), [&](int32_t e) {
        return store_.arena().find({run.layer_no, static_cast<uint32_t>(e)}).has_value();
    });
    run.decode = ids->ne[1] == 1;
    if (run.first) {
        telemetry_.counters().expert_lookups += run.experts.size();
        for (int32_t e : run.experts) {
            telemetry_.activity().used(run.li, static_cast<uint32_t>(e));
        }
        telemetry_.record_routing(run.li, run.layer_no, ids);
        read_ahead_.layer_starts(run.li, run.decode);
    }
    telemetry_.counters().arena_seconds += since(run.t_arena);
}

void Pager::apply_script(const ChainRun & run, ggml_tensor * ids) {
    if (run.first && run.li == 0) {
        script_batch_decode_ = ids->ne[1] == 1;
        script_batch_tokens_ = static_cast<uint64_t>(ids->ne[1]);
        uint64_t & counter = script_batch_decode_ ? script_decode_steps_ : script_prompt_tokens_;
        script_batch_ = counter;
        counter += script_batch_tokens_;
    }
    if (ids->ne[0] != static_cast<int64_t>(script_->n_expert_used())) {
        throw Error("a routing trace of top-" + std::to_string(script_->n_expert_used()) + " routing met " +
                    std::to_string(ids->ne[0]) + " experts per token");
    }
    // A prompt's last layer computes only the rows an output needs: the batch's last tokens.
    const uint64_t skipped = script_batch_tokens_ - std::min<uint64_t>(script_batch_tokens_, ids->ne[1]);
    for (int64_t t = 0; t < ids->ne[1]; ++t) {
        const uint64_t i = script_batch_ + skipped + static_cast<uint64_t>(t);
        const uint32_t * experts = script_batch_decode_ ? script_->decode(run.li, i) : script_->prompt(run.li, i);
        for (int64_t k = 0; k < ids->ne[0]; ++k) {
            *reinterpret_cast<int32_t *>(static_cast<char *>(ids->data) + t * ids->nb[1] + k * ids->nb[0]) =
                static_cast<int32_t>(experts[k]);
        }
    }
}

// Reads started ahead for this layer during the previous one's batch are taken over as they
// are, in flight or landed: an expert selected here waits on its read like a miss of its own.
// Of a prompt ubatch's reads ahead, nothing waits for the ones it does not select until the
// chain is done; of a decode guess, nothing waits for them at all. Otherwise the last guess is
// settled.
void Pager::take_over_read_ahead(ChainRun & run) {
    if (run.first && read_ahead_.adopt(run.li, run.experts, run.decode, run.adopted)) {
        run.landing.assign(store_.n_expert(), nullptr);
        for (const ExpertUse & u : run.adopted) {
            run.landing[static_cast<size_t>(u.expert)] = u.ticket;
        }
    } else {
        read_ahead_.settle(run.li, run.experts, run.decode && run.first);
    }
}

// Pins as many of the remaining experts as the arena has slots for, and starts the reads of
// those that are not resident.
void Pager::pin(ChainRun & run) {
    SlotArena & arena = store_.arena();
    for (; run.next < run.experts.size(); ++run.next) {
        const uint32_t e = static_cast<uint32_t>(run.experts[run.next]);
        const uint32_t uses = static_cast<uint32_t>(chain_.expert_rows()[e]);
        auto a = arena.acquire({run.layer_no, e}, run.layer.size_class, uses);
        if (!a && read_ahead_.land_strays(true)) {
            a = arena.acquire({run.layer_no, e}, run.layer.size_class, uses);  // unpinned guesses made room
        }
        if (!a) {
            break;
        }
        ExpertUse u;
        u.expert = run.experts[run.next];
        u.ref = a->ref;
        if (a->hit && !run.landing.empty() && run.landing[e]) {
            telemetry_.counters().readahead_used += !run.decode;
            if (!arena.is_ready(u.ref)) {
                u.ticket = run.landing[e];  // read ahead and still landing
            }
        }
        if (a->hit && !u.ticket && !arena.is_ready(u.ref)) {
            // Guessed for an earlier step, not selected then, and still landing.
            u.ticket = read_ahead_.stray_read(u.ref);
            if (!u.ticket) {
                arena.unpin(u.ref);
                throw Error("internal: expert " + std::to_string(e) + " of layer " + std::to_string(run.layer_no) +
                            " is in a slot whose read is not done and has no reader");
            }
        }
        if (!a->hit) {
            u.ticket = store_.load(run.layer, u.expert, u.ref);
            run.read_any = true;
            telemetry_.count_demand_read(run.li, e);
        }
        run.inflight.push_back(std::move(u));
    }
    if (run.inflight.empty()) {
        throw Error("internal: no arena slot can be pinned");
    }
}

// Once every expert of this layer is pinned and its reads are queued: guess the next layer's
// (decode) or read ahead for it (prompt), and queue those reads behind them.
void Pager::start_read_ahead(ChainRun & run) {
    if (run.next != run.experts.size() || (run.predicted && !run.read_ahead)) {
        return;
    }
    PagerSnapshot & stats = telemetry_.counters();
    const ggml_tensor * x = run.chain.front()->src[1];
    if (!run.predicted) {
        stats.arena_seconds += since(run.t_arena);
        {
            ScopedTimer timer(stats.predict_seconds);
            read_ahead_.predict_next(run.li, x);
        }
        run.t_arena = std::chrono::steady_clock::now();
        run.predicted = true;
    }
    if (run.read_ahead) {
        stats.arena_seconds += since(run.t_arena);
        {
            ScopedTimer timer(stats.predict_seconds);
            read_ahead_.read_ahead_for_prompt(run.li, x, run.ids->ne[0]);
        }
        run.t_arena = std::chrono::steady_clock::now();
        run.read_ahead = false;
    }
}

// Resident experts first, then misses as they arrive (at least the oldest one). Returns the
// positions in `inflight` of those ready, their slots marked loaded.
std::vector<size_t> Pager::wait_ready(ChainRun & run) {
    PagerSnapshot & stats = telemetry_.counters();
    std::vector<ExpertUse> & inflight = run.inflight;
    std::vector<size_t> ready;
    for (size_t i = 0; i < inflight.size(); ++i) {
        if (!inflight[i].ticket || inflight[i].ticket->done()) {
            ready.push_back(i);
        }
    }
    if (ready.empty()) {
        stats.arena_seconds += since(run.t_arena);
        const auto t0 = std::chrono::steady_clock::now();
        size_t first = 0;
        while (!inflight[first].ticket) {
            ++first;
        }
        inflight[first].ticket->wait();
        stats.wait_seconds += since(t0);
        run.t_arena = std::chrono::steady_clock::now();
        for (size_t i = 0; i < inflight.size(); ++i) {
            if (inflight[i].ticket && inflight[i].ticket->done()) {
                ready.push_back(i);
            }
        }
    }
    for (size_t i : ready) {
        ExpertUse & u = inflight[i];
        if (u.ticket) {
            u.ticket->wait();  // rethrows a read error
            if (!store_.arena().is_ready(u.ref)) {
                store_.loaded(run.layer, u.ref);
            }
        }
    }
    stats.arena_seconds += since(run.t_arena);
    return ready;
}

// Every node of the chain for the ready experts: one group per pool, as a weight view spans one.
void Pager::compute_ready(ChainRun & run, const std::vector<size_t> & ready) {
    for (uint32_t p = 0; p < store_.plan().pools.size(); ++p) {
        std::vector<const ExpertUse *> group;
        for (size_t i : ready) {
            if (run.inflight[i].ref.pool == p) {
                group.push_back(&run.inflight[i]);
            }
        }
        if (!group.empty()) {
            chain_.compute_group(run.chain, group);
        }
    }
}

void Pager::unpin_ready(ChainRun & run, const std::vector<size_t> & ready) {
    ScopedTimer unpin_timer(telemetry_.counters().arena_seconds);
    std::vector<ExpertUse> rest;
    for (size_t i = 0, r = 0; i < run.inflight.size(); ++i) {
        if (r < ready.size() && ready[r] == i) {
            store_.arena().unpin(run.inflight[i].ref);
            ++r;
        } else {
            rest.push_back(std::move(run.inflight[i]));
        }
    }
    run.inflight = std::move(rest);
}

// The chain is computed: its outputs go to the graph's tensors, and read-ahead this layer did
// not select keeps what landed and gives back the slots for what follows.
void Pager::finish_chain(ChainRun & run) {
    if (run.read_any) {
        ScopedTimer timer(telemetry_.counters().arena_seconds);
        store_.check_unchanged();
    }
    chain_.write_outputs(run.chain);
    for (ExpertUse & u : run.adopted) {
        u.ticket->wait();
        if (!store_.arena().is_ready(u.ref)) {
            store_.loaded(run.layer, u.ref);
        }
    }
    store_.release(run.adopted);
}

void Pager::set_decode_batch_max(uint32_t n) {
    std::lock_guard<std::mutex> lock(compute_mu_);
    telemetry_.counters().decode_batch_max = std::max<uint32_t>(1, n);
}

PagerSnapshot Pager::stats() const {
    std::lock_guard<std::mutex> lock(compute_mu_);
    PagerSnapshot s = telemetry_.counters();
    s.arena_bytes = store_.plan().bytes;
    s.policy = store_.arena().policy();
    s.scratch_bytes = chain_.scratch_bytes();
    const auto & c = store_.arena().counters();
    s.misses = c.misses;
    // Speculative reads are not misses of a lookup: an expert read early and then used was
    // resident when its layer asked for it.
    const uint64_t demand_misses = c.misses - std::min(c.misses, s.speculative_reads + s.preloaded);
    s.demand_misses = demand_misses;
    s.hits = s.expert_lookups > demand_misses ? s.expert_lookups - demand_misses : 0;
    s.evictions = c.evictions;
    s.borrowed = c.borrowed;
    const ReadStats rs = store_.read_stats();
    s.bytes_read = rs.bytes;
    s.read_requests = rs.requests;
    s.read_busy_seconds = rs.busy_seconds;
    s.read_wall_seconds = rs.wall_seconds;
    s.repack_seconds = rs.then_seconds;
    s.read_cpu_seconds = rs.cpu_seconds;
    s.all_graph_computes = ggml_graph_compute_counter().load(std::memory_order_relaxed);
    s.prefetch_state = read_ahead_.account().state();
    s.prefetch = read_ahead_.account().total();
    s.prefetch_layers = read_ahead_.account().per_layer();
    return s;
}

}  // namespace epq
