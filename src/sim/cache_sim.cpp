#include "sim/cache_sim.h"

#include "util/error.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace epq {

namespace {

// The trace flattened into the order the pager would acquire experts in. Keys are dense ids,
// (index of the layer in the header) x n_expert + expert, so lookups are array indexing.
struct Replay {
    std::vector<uint32_t> keys;
    std::vector<uint32_t> uses;     // per access: the tokens of its batch that selected it
    std::vector<size_t> group_end;  // one past the last access of each (step, layer) group
    // Per group: the guess of the next group's experts made during it (same step, the next
    // layer), as keys; empty when there was none.
    std::vector<std::vector<uint32_t>> guess_after;
    std::vector<uint64_t> next;  // per access: where its key is used next (UINT64_MAX: never)
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
        std::vector<uint32_t> uses;  // per expert of `experts`
    };
    std::vector<Group> groups;
    std::vector<size_t> group_of(h.layers.size(), SIZE_MAX);
    std::vector<uint32_t> seen;  // per group and expert: its position in the group's experts, + 1
    // Guesses by (step, layer index).
    std::map<std::pair<uint64_t, uint32_t>, const TraceGuess *> guess_of;
    for (const TraceGuess & g : t.guesses) {
        if (g.layer < layer_idx.size() && layer_idx[g.layer] != kNoLayer) {
            guess_of[{g.step, layer_idx[g.layer]}] = &g;
        }
    }
    uint64_t step = 0;
    auto close_batch = [&]() {
        for (size_t gi = 0; gi < groups.size(); ++gi) {
            const Group & g = groups[gi];
            for (size_t i = 0; i < g.experts.size(); ++i) {
                r.keys.push_back(g.layer * h.n_expert + g.experts[i]);
                r.uses.push_back(g.uses[i]);
            }
            r.group_end.push_back(r.keys.size());
            std::vector<uint32_t> guess;
            if (gi + 1 < groups.size()) {
                const auto it = guess_of.find({step, groups[gi + 1].layer});
                if (it != guess_of.end()) {
                    for (uint32_t e : it->second->experts) {
                        guess.push_back(groups[gi + 1].layer * h.n_expert + e);
                    }
                }
            }
            r.guess_after.push_back(std::move(guess));
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
        step = rec.step;
        if (rec.layer >= layer_idx.size() || layer_idx[rec.layer] == kNoLayer) {
            throw Error("trace record " + std::to_string(i) + " names layer " + std::to_string(rec.layer) +
                        ", which the header does not list; record the trace again");
        }
        const uint32_t li = layer_idx[rec.layer];
        if (group_of[li] == SIZE_MAX) {
            group_of[li] = groups.size();
            groups.push_back({li, {}, {}});
            seen.resize(seen.size() + h.n_expert, 0);
        }
        const size_t g = group_of[li];
        for (uint32_t e : rec.experts) {
            if (e >= h.n_expert) {
                throw Error("trace record " + std::to_string(i) + " names expert " + std::to_string(e) + " of " +
                            std::to_string(h.n_expert) + "; record the trace again");
            }
            uint32_t & s = seen[g * h.n_expert + e];
            if (!s) {
                groups[g].experts.push_back(e);
                groups[g].uses.push_back(0);
                s = static_cast<uint32_t>(groups[g].experts.size());
            }
            ++groups[g].uses[s - 1];
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

SimResult simulate(const Trace & t, uint64_t arena_bytes, const std::string & policy) {
    SimOptions o;
    o.policy = policy;
    return simulate(t, arena_bytes, o);
}

SimResult simulate(const Trace & t, uint64_t arena_bytes, const SimOptions & o) {
    const TraceHeader & h = t.header;
    check(h);
    const bool future = find_policy(o.policy).needs_future;
    if (future && o.prefetch) {
        throw Error("internal: " + o.policy + " replays the trace without guesses");
    }
    const ArenaPlan plan = plan_arena(arena_bytes, h.classes, h.n_expert_used);
    const std::vector<uint32_t> layer_idx = layer_indices(h);
    const Replay r = flatten(t, layer_idx);

    // Where each key is used next, as of its latest use: exactly "the next use after now" for
    // every key not in use, which is all the oracle is asked about.
    std::vector<uint64_t> next_of(h.layers.size() * size_t{h.n_expert}, UINT64_MAX);
    auto dense = [&](const ExpertKey & k) { return size_t{layer_idx[k.layer]} * h.n_expert + k.expert; };
    PolicyContext ctx;
    for (const auto & l : h.layers) {
        ctx.layers.push_back(l.first);
    }
    ctx.n_expert = h.n_expert;
    ctx.n_expert_used = h.n_expert_used;
    ctx.lfu_half_life = lfu_half_life_acquires(h.layers.size(), h.n_expert_used);
    if (future) {
        ctx.next_use = [&](const ExpertKey & k) { return next_of[dense(k)]; };
    }
    SlotArena arena(plan.pools, o.policy, ctx);

    SimResult res;
    res.policy = o.policy + (o.prefetch ? "+prefetch" : "");
    res.arena_bytes = arena_bytes;
    auto key_of = [&](uint32_t dense_key) {
        const uint32_t li = dense_key / h.n_expert;
        return std::make_pair(ExpertKey{h.layers[li].first, dense_key % h.n_expert}, h.layers[li].second);
    };
    std::vector<SlotRef> pinned, guess_pins;
    std::vector<char> speculated(h.layers.size() * size_t{h.n_expert}, 0);  // read by a guess, not yet used
    auto unpin = [&](std::vector<SlotRef> & refs) {
        for (const SlotRef & ref : refs) {
            arena.unpin(ref);
        }
        refs.clear();
    };
    // A guessed expert: pinned until the guessed layer's own experts are pinned; read if missing.
    auto guess = [&](uint32_t k) {
        const auto [key, cls] = key_of(k);
        auto a = arena.acquire(key, cls);
        if (!a) {
            return;  // every slot is pinned: the run skips the guess too
        }
        if (!a->hit) {
            arena.loaded(a->ref);
            ++res.speculative_reads;
            res.speculative_bytes += h.classes[cls].slot_bytes;
            speculated[k] = 1;
        }
        guess_pins.push_back(a->ref);
    };
    size_t begin = 0;
    for (size_t g = 0; g < r.group_end.size(); ++g) {
        const size_t end = r.group_end[g];
        unpin(guess_pins);  // the run settles the guess for this layer before pinning its experts
        for (size_t i = begin; i < end; ++i) {
            const auto [key, cls] = key_of(r.keys[i]);
            auto a = arena.acquire(key, cls, r.uses[i]);
            if (!a && !(pinned.empty() && guess_pins.empty())) {
                // The arena is full of pins: finish this chunk, go on with the rest.
                unpin(pinned);
                unpin(guess_pins);
                a = arena.acquire(key, cls, r.uses[i]);
            }
            if (!a) {
                throw Error("internal: the simulated arena cannot pin a single expert");
            }
            next_of[r.keys[i]] = r.next[i];
            if (a->hit) {
                ++res.hits;
                res.speculative_used += speculated[r.keys[i]];
            } else {
                arena.loaded(a->ref);
                ++res.misses;
                res.bytes_missed += h.classes[cls].slot_bytes;
            }
            speculated[r.keys[i]] = 0;
            pinned.push_back(a->ref);
        }
        if (o.prefetch) {
            for (uint32_t k : r.guess_after[g]) {
                guess(k);
            }
        }
        unpin(pinned);
        begin = end;
    }
    unpin(guess_pins);
    res.accesses = r.keys.size();
    res.hit_rate = res.accesses ? static_cast<double>(res.hits) / static_cast<double>(res.accesses) : 0.0;
    return res;
}

std::vector<SimResult> simulate_all(const Trace & t, const std::vector<uint64_t> & arena_sizes) {
    std::vector<SimResult> out;
    for (uint64_t bytes : arena_sizes) {
        for (const PolicyInfo & p : replacement_policies()) {
            out.push_back(simulate(t, bytes, p.name));
        }
        if (!t.guesses.empty()) {
            SimOptions o;
            o.prefetch = true;
            out.push_back(simulate(t, bytes, o));
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
