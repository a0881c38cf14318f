#include "arena/slot_arena.h"

#include "util/byte_size.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace epq {

ArenaPlan plan_arena(uint64_t budget, const std::vector<SizeClassDemand> & classes_in, uint32_t k) {
    if (classes_in.empty() || k == 0) {
        throw Error("internal: arena plan without size classes");
    }
    std::vector<SizeClassDemand> classes = classes_in;
    std::sort(classes.begin(), classes.end(),
              [](const SizeClassDemand & a, const SizeClassDemand & b) { return a.slot_bytes < b.slot_bytes; });
    const size_t m = classes.size();
    const uint64_t largest = classes.back().slot_bytes;

    ArenaPlan plan;
    plan.min_bytes = static_cast<uint64_t>(k) * largest;
    if (budget < plan.min_bytes) {
        throw Error("arena of " + format_bytes(budget) + " is below the minimum of " + format_bytes(plan.min_bytes) +
                    " (" + std::to_string(plan.min_bytes) + " B: the " + std::to_string(k) +
                    " experts a token selects in one layer, at the largest expert size of " + std::to_string(largest) +
                    " B); give --arena at least that");
    }

    std::vector<uint64_t> cap(m);
    for (size_t i = 0; i < m; ++i) {
        cap[i] = classes[i].total_experts;
    }

    // Spreads the budget over the classes in proportion to the expert bytes each still wants
    // room for; classes that fill up hand their share to the others.
    auto distribute = [&](std::vector<uint64_t> & slots, uint64_t & used) {
        for (int round = 0; round < 8; ++round) {
            uint64_t want_bytes = 0;
            for (size_t i = 0; i < m; ++i) {
                if (slots[i] < cap[i]) {
                    want_bytes += (cap[i] - slots[i]) * classes[i].slot_bytes;
                }
            }
            const uint64_t left = budget - used;
            if (want_bytes == 0 || left < classes.front().slot_bytes) {
                return;
            }
            bool grew = false;
            for (size_t i = 0; i < m; ++i) {
                if (slots[i] >= cap[i]) {
                    continue;
                }
                const double share =
                    static_cast<double>((cap[i] - slots[i]) * classes[i].slot_bytes) / static_cast<double>(want_bytes);
                uint64_t add = static_cast<uint64_t>(static_cast<double>(left) * share) / classes[i].slot_bytes;
                add = std::min(add, cap[i] - slots[i]);
                if (add > 0) {
                    slots[i] += add;
                    used += add * classes[i].slot_bytes;
                    grew = true;
                }
            }
            if (!grew) {
                // Rounding left room for single slots: hand them out smallest class first.
                for (size_t i = 0; i < m; ++i) {
                    while (slots[i] < cap[i] && budget - used >= classes[i].slot_bytes) {
                        ++slots[i];
                        used += classes[i].slot_bytes;
                    }
                }
                return;
            }
        }
    };

    std::vector<uint64_t> slots(m, 0);
    uint64_t used = 0;
    distribute(slots, used);
    const uint64_t need_largest = std::min<uint64_t>(k, cap[m - 1]);
    if (slots[m - 1] < need_largest) {
        // One layer of the largest class must fit: reserve that first, share the rest.
        std::fill(slots.begin(), slots.end(), 0);
        slots[m - 1] = need_largest;
        used = need_largest * largest;
        distribute(slots, used);
    }

    plan.holds_everything = true;
    for (size_t i = 0; i < m; ++i) {
        plan.pools.push_back({classes[i].slot_bytes, static_cast<uint32_t>(slots[i])});
        plan.holds_everything = plan.holds_everything && slots[i] >= cap[i];
    }
    plan.bytes = used;
    return plan;
}

double lfu_half_life_acquires(uint64_t moe_layers, uint32_t k) {
    return kLfuHalfLifeTokens * static_cast<double>(std::max<uint64_t>(1, moe_layers * k));
}

SlotArena::SlotArena(std::vector<PoolSpec> pools, const std::string & policy, PolicyContext ctx)
    : specs_(std::move(pools)), pools_(specs_.size()), policy_name_(policy) {
    ctx.pool_slots.clear();
    for (size_t p = 0; p < specs_.size(); ++p) {
        auto & pool = pools_[p];
        pool.slots.resize(specs_[p].n_slots);
        // Last in, first out: slot 0 is handed out first.
        for (uint32_t s = specs_[p].n_slots; s-- > 0;) {
            pool.empty.push_back(s);
            pool.slots[s].queue = Queue::empty;
        }
        ctx.pool_slots.push_back(specs_[p].n_slots);
    }
    policy_ = make_policy(policy, ctx);
}

void SlotArena::set_home(uint32_t pool, HomeSlot home) {
    if (pool >= pools_.size()) {
        throw Error("internal: home slots for a pool the arena does not have");
    }
    pools_[pool].home = std::move(home);
}

// The key's home slot, if it has one and it is free (empty and unpinned).
std::optional<SlotRef> SlotArena::take_home(uint32_t pool, const ExpertKey & key) {
    const Pool & p = pools_[pool];
    if (!p.home) {
        return std::nullopt;
    }
    const std::optional<uint32_t> h = p.home(key);
    if (!h || *h >= p.slots.size() || p.slots[*h].queue != Queue::empty) {
        return std::nullopt;
    }
    const SlotRef ref{pool, *h};
    detach(ref);
    return ref;
}

void SlotArena::detach(SlotRef r) {
    Slot & s = slot(r);
    auto & pool = pools_[r.pool];
    if (s.queue == Queue::evictable) {
        policy_->remove(r);
    } else if (s.queue == Queue::empty) {
        pool.empty.erase(std::find(pool.empty.begin(), pool.empty.end(), r.slot));
    }
    s.queue = Queue::none;
}

void SlotArena::enqueue(SlotRef r) {
    Slot & s = slot(r);
    auto & pool = pools_[r.pool];
    if (s.key) {
        policy_->add(r, *s.key);
        s.queue = Queue::evictable;
    } else {
        // A slot that holds nothing is the first to reuse.
        pool.empty.push_back(r.slot);
        s.queue = Queue::empty;
    }
}

void SlotArena::pin(SlotRef r) {
    detach(r);
    ++slot(r).pins;
}

std::optional<SlotRef> SlotArena::take_victim(uint32_t pool) {
    auto & p = pools_[pool];
    SlotRef ref{pool, 0};
    if (!p.empty.empty()) {
        ref.slot = p.empty.back();
        detach(ref);
    } else if (const std::optional<uint32_t> victim = policy_->take_victim(pool)) {
        ref.slot = *victim;
        slot(ref).queue = Queue::none;  // the policy has let go of it already
    } else {
        return std::nullopt;
    }
    Slot & s = slot(ref);
    if (s.key) {
        where_.erase(*s.key);
        policy_->on_evicted(ref, *s.key);
        ++counters_.evictions;
    }
    s.key.reset();
    s.ready = false;
    return ref;
}

std::optional<SlotArena::Acquired> SlotArena::acquire(const ExpertKey & key, uint32_t cls, uint32_t uses) {
    std::optional<Acquired> got;
    auto it = where_.find(key);
    if (it != where_.end()) {
        pin(it->second);
        ++counters_.hits;
        got = Acquired{it->second, true};
    } else {
        for (uint32_t p = cls; p < pools_.size() && !got; ++p) {
            auto victim = p == cls ? take_home(p, key) : std::nullopt;
            if (!victim) {
                victim = take_victim(p);
            }
            if (!victim) {
                continue;
            }
            Slot & s = slot(*victim);
            s.key = key;
            s.ready = false;
            where_[key] = *victim;
            pin(*victim);
            ++counters_.misses;
            if (p != cls) {
                ++counters_.borrowed;
            }
            got = Acquired{*victim, false};
        }
    }
    // Only uses that got a slot count: a refused acquire is retried by the caller.
    if (got) {
        policy_->on_use(key, uses);
    }
    return got;
}

void SlotArena::loaded(SlotRef ref) {
    slot(ref).ready = true;
}

void SlotArena::failed(SlotRef ref) {
    Slot & s = slot(ref);
    const bool queued = s.queue != Queue::none;
    if (queued) {
        detach(ref);
    }
    if (s.key) {
        where_.erase(*s.key);
        policy_->on_evicted(ref, *s.key);
    }
    s.key.reset();
    s.ready = false;
    if (queued) {
        enqueue(ref);
    }
}

void SlotArena::unpin(SlotRef ref) {
    Slot & s = slot(ref);
    if (s.pins == 0) {
        throw Error("internal: unpin of an unpinned arena slot");
    }
    if (--s.pins == 0) {
        enqueue(ref);
    }
}

std::optional<SlotRef> SlotArena::find(const ExpertKey & key) const {
    auto it = where_.find(key);
    if (it == where_.end()) {
        return std::nullopt;
    }
    return it->second;
}

bool SlotArena::is_ready(SlotRef ref) const {
    return slot(ref).ready;
}
uint32_t SlotArena::pin_count(SlotRef ref) const {
    return slot(ref).pins;
}

}  // namespace epq
