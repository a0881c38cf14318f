// The arena's bookkeeping: which expert occupies which slot, which slots are pinned, and which
// slot to give up next. Pure policy: no memory, no I/O, no llama.cpp.
//
// Slots come in pools, one per expert size class. A miss takes a slot from its own class's
// pool, or borrows a slot of a larger class when every slot of its own is pinned, so an arena
// that can hold `k` experts of the largest size can always run the model. Within a pool, a slot
// that holds nothing is reused first; otherwise the eviction policy picks the unpinned victim.
#pragma once

#include "arena/replacement_policy.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace epq {

// The half-life of an lfu use count, in decode tokens. Chosen with `epq simulate` on decode
// traces of Qwen3-30B-A3B-shaped routing (1,000 tokens): 34 tokens (a decay of 0.98 per token)
// gave the most hits at arenas of 5-25% of the expert bytes, against 0.95 or 0.99 per token and
// against the halving every 8 x slots acquires that lfu used before (5%: 0.84x belady vs 0.77x).
constexpr double kLfuHalfLifeTokens = 34.0;

// kLfuHalfLifeTokens in acquires: a decode token acquires top-k experts in each MoE layer.
double lfu_half_life_acquires(uint64_t moe_layers, uint32_t k);

struct PoolSpec {
    uint64_t slot_bytes = 0;
    uint32_t n_slots = 0;
};

// What the arena must serve: one entry per expert size class.
struct SizeClassDemand {
    uint64_t slot_bytes = 0;     // bytes one expert of this class occupies in a slot
    uint64_t total_experts = 0;  // experts of this class in the whole model (layers x n_expert)
};

struct ArenaPlan {
    std::vector<PoolSpec> pools;  // ascending slot_bytes, one per class
    uint64_t bytes = 0;           // what the pools use of the budget
    uint64_t min_bytes = 0;       // the smallest budget that can run the model
    bool holds_everything = false;
};

// Splits `budget` over the size classes in proportion to their share of the model's expert
// bytes, after giving the largest class the `k` slots a single layer needs. Throws epq::Error
// when the budget is below the minimum (k experts of the largest class).
ArenaPlan plan_arena(uint64_t budget, const std::vector<SizeClassDemand> & classes, uint32_t k);

struct ArenaCounters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    uint64_t borrowed = 0;  // misses served by a slot of a larger class
};

class SlotArena {
public:
    // `policy`: a name from replacement_policies(); `ctx` tells it what it may know of the model
    // (its pool_slots are filled in here). Throws epq::Error for an unknown name, or belady
    // without ctx.next_use.
    explicit SlotArena(std::vector<PoolSpec> pools, const std::string & policy = "lru", PolicyContext ctx = {});

    // A pool that can hold every expert of its class gives each one a fixed home: a miss takes
    // the key's home slot while it is free. With homes in expert order, layer by layer, every
    // resident layer's experts sit at one stride from a base slot, the layout of the model's own
    // expert tensors, so a whole layer can be computed as stock computes it (one MUL_MAT_ID).
    using HomeSlot = std::function<std::optional<uint32_t>(const ExpertKey &)>;
    void set_home(uint32_t pool, HomeSlot home);

    struct Acquired {
        SlotRef ref;
        bool hit = false;  // false: the caller must fill the slot, then call loaded() or failed()
    };

    // Pins the slot holding `key` (size class `cls`), or assigns one to it. Returns nullopt only
    // when every slot that could hold it is pinned. `uses`: how many tokens of the batch selected
    // it. lfu's clock moves that many acquires on, so a prompt's batch ages every count as much as
    // decoding as many tokens would: the counts the previous request left fade behind a new
    // request's prompt instead of outliving it (on a 6-request trace of the 30B preset, lfu's hit
    // rate at 12% of the expert bytes rose from 60% to 72%). The use itself still counts one, as
    // a decode step's does: counting every token too gained nothing more there, lost 1 point on a
    // single request, and would let a prompt push out another stream's working set.
    std::optional<Acquired> acquire(const ExpertKey & key, uint32_t cls, uint32_t uses = 1);
    void loaded(SlotRef ref);  // the slot's bytes are now valid
    void failed(SlotRef ref);  // the fill failed: forget the key
    void unpin(SlotRef ref);

    // Where `key` lives, if resident (not pinned by this call).
    std::optional<SlotRef> find(const ExpertKey & key) const;
    bool is_ready(SlotRef ref) const;
    uint32_t pin_count(SlotRef ref) const;

    const std::vector<PoolSpec> & pools() const { return specs_; }
    const ArenaCounters & counters() const { return counters_; }
    const std::string & policy() const { return policy_name_; }

private:
    enum class Queue { none, empty, evictable };  // none: pinned
    struct Slot {
        std::optional<ExpertKey> key;
        bool ready = false;
        uint32_t pins = 0;
        Queue queue = Queue::none;
    };
    struct Pool {
        std::vector<Slot> slots;
        std::vector<uint32_t> empty;  // unpinned slots that hold nothing, reused last-in first-out
        HomeSlot home;                // set_home
    };

    Slot & slot(SlotRef r) { return pools_[r.pool].slots[r.slot]; }
    const Slot & slot(SlotRef r) const { return pools_[r.pool].slots[r.slot]; }
    void pin(SlotRef r);
    void detach(SlotRef r);   // takes the slot out of the empty list or the policy's candidates
    void enqueue(SlotRef r);  // hands an unpinned slot to the empty list or the policy
    std::optional<SlotRef> take_victim(uint32_t pool);
    std::optional<SlotRef> take_home(uint32_t pool, const ExpertKey & key);

    std::vector<PoolSpec> specs_;
    std::vector<Pool> pools_;
    std::unordered_map<ExpertKey, SlotRef, ExpertKeyHash> where_;
    ArenaCounters counters_;
    std::string policy_name_;
    std::unique_ptr<ReplacementPolicy> policy_;
};

}  // namespace epq
