#include "sim/cache_sim.h"

#include "util/error.h"

#include <algorithm>
#include <cstdint>

namespace epq {

namespace {

// The trace flattened into the order the pager would acquire experts in. Keys are dense ids,
// (index of the layer in the header) x n_expert + expert, so lookups are array indexing.
struct Replay {
    std::vector<uint32_t> keys;
    std::vector<size_t> group_end;  // one past the last access of each (step, layer) group
    std::vector<uint64_t> next;     // per access: where its key is used next (UINT64_MAX: never)
};

constexpr uint32_t kNoLayer = UINT32_MAX;

std::vector<uint32_t> layer_indices(const TraceHeader & h) {
    std::vector<uint32_t> idx;  // by layer number: its index in h.layers
    for (size_t i = 0; i < h.layers.size(); ++i) {
        const uint32_t layer = h.layers[i].first;
        if (layer >= idx.size()) {
            idx.resize(size_t{layer} + 1, kNoLayer);
        }
        idx[layer] = static_cast<uint32_t>(i);
    }
    return idx;
}

void check(const TraceHeader & h) {
    if (h.n_expert == 0 || h.n_expert_used == 0 || h.classes.empty() || h.layers.empty()) {
        throw Error("the trace header has no experts, size classes or layers; record the trace again");
    }
    for (size_t c = 1; c < h.classes.size(); ++c) {
        if (h.classes[c].slot_bytes <= h.classes[c - 1].slot_bytes) {
            throw Error("the trace header's size classes are not in ascending slot_bytes; record the trace again");
        }
    }
    if (static_cast<uint64_t>(h.layers.size()) * h.n_expert > UINT32_MAX) {
        throw Error("the trace has more experts than the simulator can number; trace fewer layers");
    }
    for (const auto & l : h.layers) {
        if (l.second >= h.classes.size()) {
            throw Error("the trace header gives layer " + std::to_string(l.first) + " a size class it lacks");
        }
    }
}

Replay flatten(const Trace & t, const std::vector<uint32_t> & layer_idx) {
    const TraceHeader & h = t.header;
    Replay r;
    // Within one batch (a run of records with the same step), each layer's records form one
    // group, in the order the layers first appear; a group lists each expert once.
    struct Group {
        uint32_t layer = 0;
        std::vector<uint32_t> experts;
    };
    std::vector<Group> groups;
    std::vector<size_t> group_of(h.layers.size(), SIZE_MAX);
    std::vector<char> seen;  // per group: n_expert flags
    auto close_batch = [&]() {
        for (const Group & g : groups) {
            for (uint32_t e : g.experts) {
                r.keys.push_back(g.layer * h.n_expert + e);
            }
            r.group_end.push_back(r.keys.size());
        }
        groups.clear();
        seen.clear();
        std::fill(group_of.begin(), group_of.end(), SIZE_MAX);
    };
    for (size_t i = 0; i < t.records.size(); ++i) {
        const TraceRecord & rec = t.records[i];
        if (i > 0 && rec.step != t.records[i - 1].step) {
            close_batch();
        }
        if (rec.layer >= layer_idx.size() || layer_idx[rec.layer] == kNoLayer) {
            throw Error("trace record " + std::to_string(i) + " names layer " + std::to_string(rec.layer) +
                        ", which the header does not list; record the trace again");
        }
        const uint32_t li = layer_idx[rec.layer];
        if (group_of[li] == SIZE_MAX) {
            group_of[li] = groups.size();
            groups.push_back({li, {}});
            seen.resize(seen.size() + h.n_expert, 0);
        }
        const size_t g = group_of[li];
        for (uint32_t e : rec.experts) {
            if (e >= h.n_expert) {
                throw Error("trace record " + std::to_string(i) + " names expert " + std::to_string(e) + " of " +
                            std::to_string(h.n_expert) + "; record the trace again");
            }
            char & s = seen[g * h.n_expert + e];
            if (!s) {
                s = 1;
                groups[g].experts.push_back(e);
            }
        }
    }
    close_batch();

    r.next.assign(r.keys.size(), UINT64_MAX);
    std::vector<uint64_t> later(h.layers.size() * size_t{h.n_expert}, UINT64_MAX);
    for (size_t i = r.keys.size(); i-- > 0;) {
        r.next[i] = later[r.keys[i]];
        later[r.keys[i]] = i;
    }
    return r;
}

}  // namespace

SimResult simulate(const Trace & t, uint64_t arena_bytes, EvictionPolicy p) {
    const TraceHeader & h = t.header;
    check(h);
    const ArenaPlan plan = plan_arena(arena_bytes, h.classes, h.n_expert_used);
    const std::vector<uint32_t> layer_idx = layer_indices(h);
    const Replay r = flatten(t, layer_idx);

    SlotArena arena(plan.pools, p, lfu_half_life_acquires(h.layers.size(), h.n_expert_used));
    // Where each key is used next, as of its latest use: exactly "the next use after now" for
    // every key not in use, which is all the oracle is asked about.
    std::vector<uint64_t> next_of(h.layers.size() * size_t{h.n_expert}, UINT64_MAX);
    auto dense = [&](const ExpertKey & k) { return size_t{layer_idx[k.layer]} * h.n_expert + k.expert; };
    if (p == EvictionPolicy::belady) {
        arena.set_next_use([&](const ExpertKey & k) { return next_of[dense(k)]; });
    }

    SimResult res;
    res.policy = policy_name(p);
    res.arena_bytes = arena_bytes;
    std::vector<SlotRef> pinned;
    auto unpin_all = [&]() {
        for (const SlotRef & ref : pinned) {
            arena.unpin(ref);
        }
        pinned.clear();
    };
    size_t begin = 0;
    for (size_t end : r.group_end) {
        for (size_t i = begin; i < end; ++i) {
            const uint32_t li = r.keys[i] / h.n_expert;
            const ExpertKey key{h.layers[li].first, r.keys[i] % h.n_expert};
            const uint32_t cls = h.layers[li].second;
            auto a = arena.acquire(key, cls);
            if (!a && !pinned.empty()) {
                // The arena is full of this group's experts: finish this chunk, go on with the rest.
                unpin_all();
                a = arena.acquire(key, cls);
            }
            if (!a) {
                throw Error("internal: the simulated arena cannot pin a single expert");
            }
            next_of[r.keys[i]] = r.next[i];
            if (!a->hit) {
                arena.loaded(a->ref);
                res.bytes_missed += h.classes[cls].slot_bytes;
            }
            pinned.push_back(a->ref);
        }
        unpin_all();
        begin = end;
    }
    res.accesses = r.keys.size();
    res.hits = arena.counters().hits;
    res.misses = arena.counters().misses;
    res.hit_rate = res.accesses ? static_cast<double>(res.hits) / static_cast<double>(res.accesses) : 0.0;
    return res;
}

std::vector<SimResult> simulate_all(const Trace & t, const std::vector<uint64_t> & arena_sizes) {
    std::vector<SimResult> out;
    for (uint64_t bytes : arena_sizes) {
        for (EvictionPolicy p : {EvictionPolicy::lru, EvictionPolicy::lfu, EvictionPolicy::belady}) {
            out.push_back(simulate(t, bytes, p));
        }
    }
    return out;
}

uint64_t count_steps(const Trace & t) {
    uint64_t n = 0;
    for (size_t i = 0; i < t.records.size(); ++i) {
        n += i == 0 || t.records[i].step != t.records[i - 1].step;
    }
    return n;
}

}  // namespace epq
