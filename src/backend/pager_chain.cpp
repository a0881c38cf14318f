// The compute side of the pager: splitting a claimed graph split into expert chains and
// computing each group of resident experts with ggml's CPU kernels on gathered rows.
#include "backend/expert_chain.h"
#include "backend/kernel_paths.h"
#include "backend/pager.h"
#include "util/error.h"
#include "util/scoped_timer.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

namespace epq {

namespace {

const ggml_tensor * weight_base(const ggml_tensor * t) {
    return t->view_src ? t->view_src : t;
}

struct Entry {
    int64_t k, t;  // slot position and token of one row
};

int32_t id_at(const ggml_tensor * ids, int64_t k, int64_t t) {
    return *reinterpret_cast<const int32_t *>(static_cast<const char *>(ids->data) + t * ids->nb[1] + k * ids->nb[0]);
}

}  // namespace

bool Pager::extends_chain(const std::vector<ggml_tensor *> & chain, const ggml_tensor * node) const {
    const ggml_tensor * ids = chain.front()->src[2];
    if (node->op == GGML_OP_MUL_MAT_ID) {
        return node->src[2] == ids && layout_.find(weight_base(node->src[0])->name, nullptr) ==
                                          layout_.find(weight_base(chain.front()->src[0])->name, nullptr);
    }
    return row_node_fits(chain, node, ids->ne[0], ids->ne[1]);
}

void Pager::compute(ggml_cgraph * graph) {
    if (!deferred_error_.empty()) {
        throw Error(deferred_error_);
    }
    ScopedTimer timer(stats_.pager_seconds);
    const int n = ggml_graph_n_nodes(graph);
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
            compute_node_on_cpu(graph, i++);
            continue;
        }
        const ggml_tensor * w = node->src[0];
        const ggml_tensor * x = node->src[1];
        const LayerLayout * layer = layout_.find(weight_base(w)->name, nullptr);
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
            if (!extends_chain(chain, next)) {
                break;
            }
            chain.push_back(next);
        }
        run_chain(chain, *layer);
        i = j;
    }
}

void Pager::stage_outputs(const std::vector<ggml_tensor *> & chain) {
    ScopedTimer timer(stats_.scatter_seconds);
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

void Pager::write_outputs(const std::vector<ggml_tensor *> & chain) {
    ScopedTimer timer(stats_.scatter_seconds);
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

void Pager::compute_node_on_cpu(ggml_cgraph * graph, int i) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t mem = ggml_graph_overhead_custom(1, false) + 256;
    std::vector<uint8_t> ctx_mem(mem);
    ggml_init_params ip{mem, ctx_mem.data(), true};
    ggml_context * ctx = ggml_init(ip);
    ggml_cgraph * one = ggml_new_graph_custom(ctx, 1, false);
    ggml_graph_add_node(one, ggml_graph_node(graph, i));
    const ggml_status st = ggml_backend_graph_compute(cpu_.get(), one);
    ++stats_.graph_computes;
    ggml_free(ctx);
    if (st != GGML_STATUS_SUCCESS) {
        throw Error(std::string("the CPU computation of ") + ggml_graph_node(graph, i)->name + " failed");
    }
    stats_.compute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<char> Pager::solo_experts(const std::vector<ggml_tensor *> & chain,
                                      const std::vector<const Use *> & group) const {
    std::vector<char> solo(n_expert_, 0);
    for (const Use * u : group) {
        const int64_t n = chain_rows_[static_cast<size_t>(u->expert)];
        for (const ggml_tensor * c : chain) {
            const ggml_tensor * w = c->src[0];
            const MatrixPlacement * m = nullptr;
            if (c->op != GGML_OP_MUL_MAT_ID || !layout_.find(weight_base(w)->name, &m) || repack_.repacks(*m)) {
                continue;  // a repacked matrix always takes ggml's repacked kernel, in any window
            }
            if (expert_takes_special_kernel(w->type, w->ne[0], w->ne[1], n)) {
                solo[static_cast<size_t>(u->expert)] = 1;
            }
        }
    }
    return solo;
}

void Pager::compute_group(const std::vector<ggml_tensor *> & chain, const std::vector<const Use *> & group) {
    const auto t0 = std::chrono::steady_clock::now();
    const ggml_tensor * ids = chain.front()->src[2];
    const int64_t n_ids = ids->ne[0], n_tok = ids->ne[1];
    const uint32_t pool = group.front()->ref.pool;
    const uint64_t slot_bytes = plan_.pools[pool].slot_bytes;

    // Experts in slot order, cut into windows of nearby slots; each window is one MUL_MAT_ID
    // per matrix over a view of just its slots. ggml's kernel keeps per-expert counters for
    // every slot of the view, so the window caps that at a few thousand; below that, fewer
    // graph nodes won in measurement (decode with a 16 GiB arena: 12.68 tok/s with one view
    // of the pool, 12.64 with 256-slot windows, 12.37 with 16-slot windows).
    // An expert that ggml would compute with a kernel of its own (see kernel_paths.h) gets a
    // window of one slot: a contiguous weight view, so ggml makes the same choice as stock.
    std::vector<const Use *> sorted(group);
    std::sort(sorted.begin(), sorted.end(), [](const Use * a, const Use * b) { return a->ref.slot < b->ref.slot; });
    const std::vector<char> solo = solo_experts(chain, group);
    constexpr uint32_t kWindowSlots = 4096;
    struct Window {
        uint32_t first_slot = 0, n_slots = 0;
        bool solo = false;
        std::vector<Entry> entries;  // (k, t) rows of its experts
        std::vector<int32_t> slots, experts;
        std::vector<ggml_tensor *> outs;
    };
    std::vector<Window> windows;
    std::vector<int32_t> window_of(n_expert_, -1), slot_of(n_expert_, -1);
    for (const Use * u : sorted) {
        const bool alone = solo[static_cast<size_t>(u->expert)] != 0;
        if (windows.empty() || alone || windows.back().solo ||
            u->ref.slot - windows.back().first_slot >= kWindowSlots) {
            windows.push_back({});
            windows.back().first_slot = u->ref.slot;
            windows.back().solo = alone;
            stats_.solo_experts += alone;
        }
        Window & w = windows.back();
        w.n_slots = u->ref.slot - w.first_slot + 1;
        window_of[static_cast<size_t>(u->expert)] = static_cast<int32_t>(windows.size() - 1);
        slot_of[static_cast<size_t>(u->expert)] = static_cast<int32_t>(u->ref.slot - w.first_slot);
    }
    size_t n_rows = 0;
    for (int64_t t = 0; t < n_tok; ++t) {
        for (int64_t k = 0; k < n_ids; ++k) {
            const int32_t e = id_at(ids, k, t);
            if (window_of[static_cast<size_t>(e)] >= 0) {
                Window & w = windows[static_cast<size_t>(window_of[static_cast<size_t>(e)])];
                w.entries.push_back({k, t});
                w.slots.push_back(slot_of[static_cast<size_t>(e)]);
                w.experts.push_back(e);
                ++n_rows;
            }
        }
    }
    if (n_rows == 0) {
        stats_.gather_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return;
    }
    for (Window & w : windows) {
        if (!w.slots.empty()) {
            // The test-only wrong-slot fault may name a slot outside the window: widen it.
            const uint32_t s = static_cast<uint32_t>(fault_slot(static_cast<int32_t>(w.first_slot) + w.slots[0], pool));
            const uint32_t first = std::min(w.first_slot, s), end = std::max(w.first_slot + w.n_slots, s + 1);
            for (int32_t & local : w.slots) {
                local += static_cast<int32_t>(w.first_slot - first);
            }
            w.first_slot = first;
            w.n_slots = end - first;
            w.slots[0] = static_cast<int32_t>(s - first);
            break;
        }
    }

    const size_t n_nodes = windows.size() * (chain.size() * 3 + 6) + 8;
    const size_t mem = n_nodes * ggml_tensor_overhead() + ggml_graph_overhead_custom(n_nodes, false) + 1024;
    ctx_mem_.resize(mem);
    ggml_init_params ip{mem, ctx_mem_.data(), true};
    ggml_context * ctx = ggml_init(ip);
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, n_nodes, false);
    // Every row buffer of this group is a slice of one allocation, sized up front for the
    // group's entries (an input row per matmul and an output row per node, each at most as wide
    // as the node's own rows), so the scratch is bounded by the largest group, not by a
    // patchwork of per-buffer maxima over groups of different shapes.
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
    for (const Window & w : windows) {
        need += w.entries.size() * per_entry;
    }
    if (rows_.size() < need) {
        rows_.resize(need);
    }
    size_t used = 0;
    auto buffer = [&](int64_t n_floats) {
        if (used + static_cast<size_t>(n_floats) > rows_.size()) {
            throw Error("internal: the expert group's rows outgrew their scratch");
        }
        float * p = rows_.data() + used;
        used += static_cast<size_t>(n_floats);
        return p;
    };

    for (Window & w : windows) {
        const int64_t n = static_cast<int64_t>(w.entries.size());
        if (n == 0) {
            continue;
        }
        std::unordered_map<const ggml_tensor *, ggml_tensor *> local;
        // A matmul input from outside the chain (the layer's hidden state, broadcast over the
        // slots when it has one row per token).
        auto gathered = [&](const ggml_tensor * src) {
            auto it = local.find(src);
            if (it != local.end()) {
                return it->second;
            }
            const int64_t ne0 = src->ne[0];
            float * dst = buffer(n * ne0);
            for (int64_t j = 0; j < n; ++j) {
                const char * row = static_cast<const char *>(src->data) + (w.entries[j].k % src->ne[1]) * src->nb[1] +
                                   w.entries[j].t * src->nb[2];
                std::memcpy(dst + j * ne0, row, static_cast<size_t>(ne0) * sizeof(float));
            }
            ggml_tensor * t = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne0, 1, n);
            t->data = dst;
            local[src] = t;
            return t;
        };
        // A row input inside the chain: a chain node, or a view of part of each of its rows.
        auto row_input = [&](const ggml_tensor * src) -> ggml_tensor * {
            auto it = local.find(src);
            if (it != local.end()) {
                return it->second;
            }
            ggml_tensor * base = local.at(src->view_src);
            return ggml_view_3d(ctx, base, src->ne[0], 1, n, base->nb[1], base->nb[2], src->view_offs);
        };
        ggml_tensor * slots = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, n);
        slots->data = w.slots.data();
        ggml_tensor * experts = nullptr;
        for (const ggml_tensor * c : chain) {
            ggml_tensor * out = nullptr;
            if (c->op == GGML_OP_MUL_MAT_ID) {
                const MatrixPlacement * m = nullptr;
                layout_.find(weight_base(c->src[0])->name, &m);
                const ggml_tensor * wsrc = c->src[0];
                ggml_tensor * wt = ggml_new_tensor_3d(ctx, wsrc->type, wsrc->ne[0], wsrc->ne[1], w.n_slots);
                wt->data = pools_[pool].data() + w.first_slot * slot_bytes + m->slot_offset;
                wt->nb[2] = slot_bytes;
                wt->nb[3] = wt->nb[2] * static_cast<size_t>(wt->ne[2]);
                repack_.tag(wt, *m);
                ggml_tensor * in = local.count(c->src[1]) ? local[c->src[1]] : gathered(c->src[1]);
                out = ggml_mul_mat_id(ctx, wt, in, slots);
            } else if (c->op == GGML_OP_ADD_ID) {
                if (!experts) {
                    experts = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 1, n);
                    experts->data = w.experts.data();
                }
                out = ggml_add_id(ctx, row_input(c->src[0]), c->src[1], experts);
            } else {
                // GLU or UNARY: the node's own operation and parameters on the gathered rows.
                out = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c->ne[0], 1, n);
                out->op = c->op;
                std::memcpy(out->op_params, c->op_params, sizeof(out->op_params));
                out->src[0] = row_input(c->src[0]);
                out->src[1] = c->src[1] ? row_input(c->src[1]) : nullptr;
            }
            out->data = buffer(n * out->ne[0]);
            local[c] = out;
            w.outs.push_back(out);
            ggml_build_forward_expand(gf, out);
        }
    }
    const auto t_compute = std::chrono::steady_clock::now();
    stats_.gather_seconds += std::chrono::duration<double>(t_compute - t0).count();
    // The CPU backend keeps a work buffer as large as its largest plan: counted as scratch.
    work_bytes_ = std::max<uint64_t>(work_bytes_, ggml_graph_plan(gf, n_threads_, nullptr).work_size);
    const ggml_status st = ggml_backend_graph_compute(cpu_.get(), gf);
    ++stats_.graph_computes;
    ggml_free(ctx);
    const auto t_scatter = std::chrono::steady_clock::now();
    stats_.compute_seconds += std::chrono::duration<double>(t_scatter - t_compute).count();
    if (st != GGML_STATUS_SUCCESS) {
        throw Error("the CPU expert computation failed (ggml status " + std::to_string(static_cast<int>(st)) + ")");
    }
    // Rows of the nodes read outside the chain are staged and copied to the graph's tensors
    // once the whole chain is done: the graph allocator may have placed an output in memory
    // that an input of the chain (read again by the next group) occupied.
    for (const Window & w : windows) {
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
    stats_.scatter_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_scatter).count();
}

}  // namespace epq
