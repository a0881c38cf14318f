#include "backend/chain_compute.h"

#include "backend/expert_chain.h"
#include "backend/kernel_paths.h"
#include "util/error.h"
#include "util/scoped_timer.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

namespace epq {

namespace {

const ggml_tensor * weight_base(const ggml_tensor * t) {
    return t->view_src ? t->view_src : t;
}

int32_t id_at(const ggml_tensor * ids, int64_t k, int64_t t) {
    return *reinterpret_cast<const int32_t *>(static_cast<const char *>(ids->data) + t * ids->nb[1] + k * ids->nb[0]);
}

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ggml's kernel keeps per-expert counters for every slot of a view, so a window caps that at a
// few thousand; below that, fewer graph nodes won in measurement (decode with a 16 GiB arena:
// 12.68 tok/s with one view of the pool, 12.64 with 256-slot windows, 12.37 with 16-slot ones).
constexpr uint32_t kWindowSlots = 4096;

// Slices of the group's one row allocation, handed out in order.
struct RowSlices {
    std::vector<float> & rows;
    size_t & used;
    float * take(int64_t n_floats) {
        if (used + static_cast<size_t>(n_floats) > rows.size()) {
            throw Error("internal: the expert group's rows outgrew their scratch");
        }
        float * p = rows.data() + used;
        used += static_cast<size_t>(n_floats);
        return p;
    }
};

// The tensors of one window's graph: its rows gathered from the layer's inputs, and each chain
// node's counterpart on those rows.
class WindowNodes {
public:
    WindowNodes(ggml_context * ctx, const ExpertWindow & w, RowSlices & slices)
        : ctx_(ctx), w_(w), n_(static_cast<int64_t>(w.entries.size())), slices_(slices) {}

    int64_t n() const { return n_; }
    // A matmul input: a chain node's rows, or from outside the chain (the layer's hidden state,
    // broadcast over the slots when it has one row per token), gathered once.
    ggml_tensor * matmul_input(const ggml_tensor * src) {
        auto it = local_.find(src);
        if (it != local_.end()) {
            return it->second;
        }
        const int64_t ne0 = src->ne[0];
        float * dst = slices_.take(n_ * ne0);
        for (int64_t j = 0; j < n_; ++j) {
            const char * row = static_cast<const char *>(src->data) + (w_.entries[j].k % src->ne[1]) * src->nb[1] +
                               w_.entries[j].t * src->nb[2];
            std::memcpy(dst + j * ne0, row, static_cast<size_t>(ne0) * sizeof(float));
        }
        ggml_tensor * t = ggml_new_tensor_3d(ctx_, GGML_TYPE_F32, ne0, 1, n_);
        t->data = dst;
        local_[src] = t;
        return t;
    }
    // A row input inside the chain: a chain node, or a view of part of each of its rows.
    ggml_tensor * row_input(const ggml_tensor * src) {
        auto it = local_.find(src);
        if (it != local_.end()) {
            return it->second;
        }
        ggml_tensor * base = local_.at(src->view_src);
        return ggml_view_3d(ctx_, base, src->ne[0], 1, n_, base->nb[1], base->nb[2], src->view_offs);
    }
    void set(const ggml_tensor * c, ggml_tensor * out) {
        out->data = slices_.take(n_ * out->ne[0]);
        local_[c] = out;
    }

private:
    ggml_context * ctx_;
    const ExpertWindow & w_;
    int64_t n_;
    RowSlices & slices_;
    std::unordered_map<const ggml_tensor *, ggml_tensor *> local_;
};

}  // namespace

ChainCompute::ChainCompute(ExpertStore & store, PagerTelemetry & telemetry)
    : store_(store), telemetry_(telemetry), cpu_(ggml_backend_cpu_init()) {
    if (!cpu_) {
        throw Error("cannot initialise ggml's CPU backend for the expert matmuls");
    }
}

void ChainCompute::set_n_threads(int n) {
    n_threads_ = n > 0 ? n : 1;
    ggml_backend_cpu_set_n_threads(cpu_.get(), n_threads_);
}

bool ChainCompute::extends_chain(const std::vector<ggml_tensor *> & chain, const ggml_tensor * node) const {
    const ggml_tensor * ids = chain.front()->src[2];
    const SlotLayout & layout = store_.layout();
    if (node->op == GGML_OP_MUL_MAT_ID) {
        return node->src[2] == ids && layout.find(weight_base(node->src[0])->name, nullptr) ==
                                          layout.find(weight_base(chain.front()->src[0])->name, nullptr);
    }
    return row_node_fits(chain, node, ids->ne[0], ids->ne[1]);
}

void ChainCompute::compute_node_on_cpu(ggml_cgraph * graph, int i) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t mem = ggml_graph_overhead_custom(1, false) + 256;
    std::vector<uint8_t> ctx_mem(mem);
    ggml_init_params ip{mem, ctx_mem.data(), true};
    ggml_context * ctx = ggml_init(ip);
    ggml_cgraph * one = ggml_new_graph_custom(ctx, 1, false);
    ggml_graph_add_node(one, ggml_graph_node(graph, i));
    const ggml_status st = ggml_backend_graph_compute(cpu_.get(), one);
    ++telemetry_.counters().graph_computes;
    ggml_free(ctx);
    if (st != GGML_STATUS_SUCCESS) {
        throw Error(std::string("the CPU computation of ") + ggml_graph_node(graph, i)->name + " failed");
    }
    telemetry_.counters().compute_seconds += since(t0);
}

void ChainCompute::stage_outputs(const std::vector<ggml_tensor *> & chain) {
    ScopedTimer timer(telemetry_.counters().scatter_seconds);
    staged_.resize(std::max(staged_.size(), chain.size()));
    for (size_t c = 0; c < chain.size(); ++c) {
        bool used_inside = false;
        for (size_t d = c + 1; d < chain.size(); ++d) {
            for (const ggml_tensor * src : chain[d]->src) {
                used_inside = used_inside || (src && (src == chain[c] || src->view_src == chain[c]));
            }
        }
        staged_[c].clear();
        if (!used_inside) {
            staged_[c].resize(static_cast<size_t>(ggml_nelements(chain[c])));
        }
    }
}

void ChainCompute::write_outputs(const std::vector<ggml_tensor *> & chain) {
    ScopedTimer timer(telemetry_.counters().scatter_seconds);
    for (size_t c = 0; c < chain.size(); ++c) {
        if (staged_[c].empty()) {
            continue;
        }
        ggml_tensor * node = chain[c];
        const int64_t ne0 = node->ne[0];
        for (int64_t t = 0; t < node->ne[2]; ++t) {
            for (int64_t k = 0; k < node->ne[1]; ++k) {
                std::memcpy(static_cast<char *>(node->data) + k * node->nb[1] + t * node->nb[2],
                            staged_[c].data() + (t * node->ne[1] + k) * ne0, static_cast<size_t>(ne0) * sizeof(float));
            }
        }
    }
}

std::vector<char> ChainCompute::solo_experts(const std::vector<ggml_tensor *> & chain,
                                             const std::vector<const ExpertUse *> & group) const {
    std::vector<char> solo(store_.n_expert(), 0);
    for (const ExpertUse * u : group) {
        const int64_t n = expert_rows_[static_cast<size_t>(u->expert)];
        for (const ggml_tensor * c : chain) {
            const ggml_tensor * w = c->src[0];
            const MatrixPlacement * m = nullptr;
            if (c->op != GGML_OP_MUL_MAT_ID || !store_.layout().find(weight_base(w)->name, &m) ||
                store_.repack().repacks(*m)) {
                continue;  // a repacked matrix always takes ggml's repacked kernel, in any window
            }
            if (expert_takes_special_kernel(w->type, w->ne[0], w->ne[1], n)) {
                solo[static_cast<size_t>(u->expert)] = 1;
            }
        }
    }
    return solo;
}

// Experts in slot order, cut into windows of nearby slots (kWindowSlots). An expert that ggml
// would compute with a kernel of its own (see kernel_paths.h) gets a window of one slot: a
// contiguous weight view, so ggml makes the same choice as stock. `n_rows`: the rows routed to
// the group.
std::vector<ExpertWindow> ChainCompute::plan_windows(const std::vector<ggml_tensor *> & chain,
                                                     const std::vector<const ExpertUse *> & group, size_t & n_rows) {
    std::vector<const ExpertUse *> sorted(group);
    std::sort(sorted.begin(), sorted.end(),
              [](const ExpertUse * a, const ExpertUse * b) { return a->ref.slot < b->ref.slot; });
    const std::vector<char> solo = solo_experts(chain, group);
    std::vector<ExpertWindow> windows;
    const uint32_t n_expert = store_.n_expert();
    std::vector<int32_t> window_of(n_expert, -1), slot_of(n_expert, -1);
    for (const ExpertUse * u : sorted) {
        const bool alone = solo[static_cast<size_t>(u->expert)] != 0;
        if (windows.empty() || alone || windows.back().solo ||
            u->ref.slot - windows.back().first_slot >= kWindowSlots) {
            windows.push_back({});
            windows.back().first_slot = u->ref.slot;
            windows.back().solo = alone;
            telemetry_.counters().solo_experts += alone;
        }
        ExpertWindow & w = windows.back();
        w.n_slots = u->ref.slot - w.first_slot + 1;
        window_of[static_cast<size_t>(u->expert)] = static_cast<int32_t>(windows.size() - 1);
        slot_of[static_cast<size_t>(u->expert)] = static_cast<int32_t>(u->ref.slot - w.first_slot);
    }
    const ggml_tensor * ids = chain.front()->src[2];
    n_rows = 0;
    for (int64_t t = 0; t < ids->ne[1]; ++t) {
        for (int64_t k = 0; k < ids->ne[0]; ++k) {
            const int32_t e = id_at(ids, k, t);
            if (window_of[static_cast<size_t>(e)] >= 0) {
                ExpertWindow & w = windows[static_cast<size_t>(window_of[static_cast<size_t>(e)])];
                w.entries.push_back({k, t});
                w.slots.push_back(slot_of[static_cast<size_t>(e)]);
                w.experts.push_back(e);
                ++n_rows;
            }
        }
    }
    return windows;
}

// The test-only wrong-slot fault may name a slot outside the first window: widen it.
void ChainCompute::widen_for_fault(std::vector<ExpertWindow> & windows, uint32_t pool) {
    for (ExpertWindow & w : windows) {
        if (w.slots.empty()) {
            continue;
        }
        const uint32_t s =
            static_cast<uint32_t>(store_.fault_slot(static_cast<int32_t>(w.first_slot) + w.slots[0], pool));
        const uint32_t first = std::min(w.first_slot, s), end = std::max(w.first_slot + w.n_slots, s + 1);
        for (int32_t & local : w.slots) {
            local += static_cast<int32_t>(w.first_slot - first);
        }
        w.first_slot = first;
        w.n_slots = end - first;
        w.slots[0] = static_cast<int32_t>(s - first);
        return;
    }
}

// Every row buffer of a group is a slice of one allocation, sized up front for the group's
// entries (an input row per matmul and an output row per node, each at most as wide as the
// node's own rows), so the scratch is bounded by the largest group, not by a patchwork of
// per-buffer maxima over groups of different shapes.
void ChainCompute::reserve_rows(const std::vector<ggml_tensor *> & chain, const std::vector<ExpertWindow> & windows) {
    size_t per_entry = 0;  // floats: each node's output row, and each outside input gathered once
    std::vector<const ggml_tensor *> outside;
    for (const ggml_tensor * c : chain) {
        per_entry += static_cast<size_t>(c->ne[0]);
        const ggml_tensor * in = c->src[1];
        if (c->op == GGML_OP_MUL_MAT_ID && std::find(chain.begin(), chain.end(), in) == chain.end() &&
            std::find(outside.begin(), outside.end(), in) == outside.end()) {
            outside.push_back(in);
            per_entry += static_cast<size_t>(in->ne[0]);
        }
    }
    size_t need = 0;
    for (const ExpertWindow & w : windows) {
        need += w.entries.size() * per_entry;
    }
    if (rows_.size() < need) {
        rows_.resize(need);
    }
}

// A chain matmul's weight over the window's slots of `pool`, marked repacked where it is.
ggml_tensor * ChainCompute::weight_view(ggml_context * ctx, const ggml_tensor * c, const ExpertWindow & w,
                                        uint32_t pool) const {
    const MatrixPlacement * m = nullptr;
    store_.layout().find(weight_base(c->src[0])->name, &m);
    const ggml_tensor * wsrc = c->src[0];
    const uint64_t slot_bytes = store_.plan().pools[pool].slot_bytes;
    ggml_tensor * wt = ggml_new_tensor_3d(ctx, wsrc->type, wsrc->ne[0], wsrc->ne[1], w.n_slots);
    wt->data = store_.pool_base(pool) + w.first_slot * slot_bytes + m->slot_offset;
    wt->nb[2] = slot_bytes;
    wt->nb[3] = wt->nb[2] * static_cast<size_t>(wt->ne[2]);
    store_.repack().tag(wt, *m);
    return wt;
}

void ChainCompute::build_window(ggml_context * ctx, ggml_cgraph * gf, const std::vector<ggml_tensor *> & chain,
                                ExpertWindow & w, uint32_t pool, size_t & used) {
    if (w.entries.empty()) {
        return;
    }
    RowSlices slices{rows_, used};
    WindowNodes nodes(ctx, w, slices);
    const int64_t n = nodes.n();
    ggml_tensor * slots = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, n);
    slots->data = w.slots.data();
    ggml_tensor * experts = nullptr;
    for (const ggml_tensor * c : chain) {
        ggml_tensor * out = nullptr;
        if (c->op == GGML_OP_MUL_MAT_ID) {
            ggml_tensor * wt = weight_view(ctx, c, w, pool);
            out = ggml_mul_mat_id(ctx, wt, nodes.matmul_input(c->src[1]), slots);
        } else if (c->op == GGML_OP_ADD_ID) {
            if (!experts) {
                experts = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, n);
                experts->data = w.experts.data();
            }
            out = ggml_add_id(ctx, nodes.row_input(c->src[0]), c->src[1], experts);
        } else {
            // GLU or UNARY: the node's own operation and parameters on the gathered rows.
            out = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c->ne[0], 1, n);
            out->op = c->op;
            std::memcpy(out->op_params, c->op_params, sizeof(out->op_params));
            out->src[0] = nodes.row_input(c->src[0]);
            out->src[1] = c->src[1] ? nodes.row_input(c->src[1]) : nullptr;
        }
        nodes.set(c, out);
        w.outs.push_back(out);
        ggml_build_forward_expand(gf, out);
    }
}

bool ChainCompute::compute_whole_layer(const std::vector<ggml_tensor *> & chain,
                                       const std::vector<const ExpertUse *> & group) {
    if (store_.faults_planted()) {
        return false;  // a planted wrong slot must be seen by the path that can take it
    }
    const auto t0 = std::chrono::steady_clock::now();
    const ggml_tensor * ids = chain.front()->src[2];
    std::vector<char> selected(store_.n_expert(), 0);
    int32_t max_e = -1;
    size_t n_selected = 0;
    for (int64_t t = 0; t < ids->ne[1]; ++t) {
        for (int64_t k = 0; k < ids->ne[0]; ++k) {
            const int32_t e = id_at(ids, k, t);
            if (e < 0 || static_cast<uint32_t>(e) >= store_.n_expert()) {
                return false;
            }
            n_selected += selected[static_cast<size_t>(e)] == 0;
            selected[static_cast<size_t>(e)] = 1;
            max_e = std::max(max_e, e);
        }
    }
    if (n_selected != group.size() || max_e < 0) {
        return false;
    }
    const uint32_t pool = group.front()->ref.pool;
    const int64_t base = static_cast<int64_t>(group.front()->ref.slot) - group.front()->expert;
    for (const ExpertUse * u : group) {
        if (u->ref.pool != pool || static_cast<int64_t>(u->ref.slot) - u->expert != base ||
            !selected[static_cast<size_t>(u->expert)]) {
            return false;
        }
    }
    const int64_t n_slots = store_.plan().pools[pool].n_slots;
    if (base < 0 || base + max_e >= n_slots) {
        return false;
    }
    // ggml gives an expert with enough rows a kernel of its own only over a contiguous weight
    // (kernel_paths.h), which a view of slots at the slot stride is not: such a chain takes the
    // windows, where that expert gets a node over just its slot.
    const std::vector<char> solo = solo_experts(chain, group);
    if (std::find(solo.begin(), solo.end(), 1) != solo.end()) {
        return false;
    }
    // As many experts in the view as the model's tensor has where the pool reaches that far
    // (the node stock runs); ggml only needs the ids below it.
    const int64_t n_view = std::min<int64_t>(store_.n_expert(), n_slots - base);
    const uint64_t slot_bytes = store_.plan().pools[pool].slot_bytes;

    const size_t n_nodes = chain.size() * (GGML_MAX_SRC + 2) + 8;
    const size_t mem = n_nodes * ggml_tensor_overhead() + ggml_graph_overhead_custom(n_nodes, false) + 1024;
    ctx_mem_.resize(std::max(ctx_mem_.size(), mem));
    ggml_init_params ip{mem, ctx_mem_.data(), true};
    ggml_context * ctx = ggml_init(ip);
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, n_nodes, false);
    // A tensor of the same shape over the same bytes, without the graph it came from (so ggml
    // does not compute its sources again).
    auto same_bytes = [ctx](const ggml_tensor * t) {
        ggml_tensor * c = ggml_new_tensor(ctx, t->type, GGML_MAX_DIMS, t->ne);
        std::memcpy(c->nb, t->nb, sizeof(c->nb));
        c->data = t->data;
        return c;
    };
    std::unordered_map<const ggml_tensor *, ggml_tensor *> mirror;
    for (ggml_tensor * c : chain) {
        ggml_tensor * m = same_bytes(c);
        m->op = c->op;
        std::memcpy(m->op_params, c->op_params, sizeof(m->op_params));
        for (int s = 0; s < GGML_MAX_SRC && c->src[s]; ++s) {
            const ggml_tensor * src = c->src[s];
            const MatrixPlacement * mp = nullptr;
            if (s == 0 && c->op == GGML_OP_MUL_MAT_ID) {
                store_.layout().find(weight_base(src)->name, &mp);
                ggml_tensor * wt = ggml_new_tensor_3d(ctx, src->type, src->ne[0], src->ne[1], n_view);
                wt->data = store_.pool_base(pool) + static_cast<uint64_t>(base) * slot_bytes + mp->slot_offset;
                wt->nb[2] = slot_bytes;
                wt->nb[3] = wt->nb[2] * static_cast<size_t>(n_view);
                store_.repack().tag(wt, *mp);
                m->src[s] = wt;
            } else {
                auto it = mirror.find(src);
                m->src[s] = it != mirror.end() ? it->second : same_bytes(src);
            }
        }
        mirror[c] = m;
        ggml_build_forward_expand(gf, m);
    }
    const auto t_compute = std::chrono::steady_clock::now();
    PagerSnapshot & stats = telemetry_.counters();
    stats.gather_seconds += std::chrono::duration<double>(t_compute - t0).count();
    work_bytes_ = std::max<uint64_t>(work_bytes_, ggml_graph_plan(gf, n_threads_, nullptr).work_size);
    const ggml_status st = ggml_backend_graph_compute(cpu_.get(), gf);
    ++stats.graph_computes;
    ++stats.whole_layer_chains;
    ggml_free(ctx);
    stats.compute_seconds += since(t_compute);
    if (st != GGML_STATUS_SUCCESS) {
        throw Error("the CPU expert computation failed (ggml status " + std::to_string(static_cast<int>(st)) + ")");
    }
    // The outputs are in place: nothing staged to copy back.
    for (auto & s : staged_) {
        s.clear();
    }
    return true;
}

void ChainCompute::compute_group(const std::vector<ggml_tensor *> & chain,
                                 const std::vector<const ExpertUse *> & group) {
    if (compute_whole_layer(chain, group)) {
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    PagerSnapshot & stats = telemetry_.counters();
    const uint32_t pool = group.front()->ref.pool;
    size_t n_rows = 0;
    std::vector<ExpertWindow> windows = plan_windows(chain, group, n_rows);
    if (n_rows == 0) {
        stats.gather_seconds += since(t0);
        return;
    }
    widen_for_fault(windows, pool);

    const size_t n_nodes = windows.size() * (chain.size() * 3 + 6) + 8;
    const size_t mem = n_nodes * ggml_tensor_overhead() + ggml_graph_overhead_custom(n_nodes, false) + 1024;
    ctx_mem_.resize(mem);
    ggml_init_params ip{mem, ctx_mem_.data(), true};
    ggml_context * ctx = ggml_init(ip);
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, n_nodes, false);
    reserve_rows(chain, windows);
    size_t used = 0;
    for (ExpertWindow & w : windows) {
        build_window(ctx, gf, chain, w, pool, used);
    }
    const auto t_compute = std::chrono::steady_clock::now();
    stats.gather_seconds += std::chrono::duration<double>(t_compute - t0).count();
    // The CPU backend keeps a work buffer as large as its largest plan: counted as scratch.
    work_bytes_ = std::max<uint64_t>(work_bytes_, ggml_graph_plan(gf, n_threads_, nullptr).work_size);
    const ggml_status st = ggml_backend_graph_compute(cpu_.get(), gf);
    ++stats.graph_computes;
    ggml_free(ctx);
    const auto t_scatter = std::chrono::steady_clock::now();
    stats.compute_seconds += std::chrono::duration<double>(t_scatter - t_compute).count();
    if (st != GGML_STATUS_SUCCESS) {
        throw Error("the CPU expert computation failed (ggml status " + std::to_string(static_cast<int>(st)) + ")");
    }
    scatter(chain, windows, chain.front()->src[2]->ne[0]);
    stats.scatter_seconds += since(t_scatter);
}

// Rows of the nodes read outside the chain are staged and copied to the graph's tensors once the
// whole chain is done: the graph allocator may have placed an output in memory that an input of
// the chain (read again by the next group) occupied.
void ChainCompute::scatter(const std::vector<ggml_tensor *> & chain, const std::vector<ExpertWindow> & windows,
                           int64_t n_ids) {
    for (const ExpertWindow & w : windows) {
        for (size_t c = 0; c < chain.size() && !w.entries.empty(); ++c) {
            if (staged_[c].empty()) {
                continue;
            }
            const float * src = static_cast<const float *>(w.outs[c]->data);
            const int64_t ne0 = chain[c]->ne[0];
            for (size_t j = 0; j < w.entries.size(); ++j) {
                float * dst = staged_[c].data() + (w.entries[j].t * n_ids + w.entries[j].k) * ne0;
                std::memcpy(dst, src + static_cast<int64_t>(j) * ne0, static_cast<size_t>(ne0) * sizeof(float));
            }
        }
    }
}

uint64_t ChainCompute::scratch_bytes() const {
    uint64_t n = work_bytes_ + ctx_mem_.capacity() + rows_.capacity() * sizeof(float);
    for (const auto & v : staged_) {
        n += v.capacity() * sizeof(float);
    }
    return n;
}

uint64_t ChainCompute::scratch_bound(const ExpertIndex & index, uint32_t n_batch) {
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

}  // namespace epq
