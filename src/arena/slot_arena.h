// The arena's bookkeeping: which expert occupies which slot, which slots are pinned, and which
// slot to give up next. Pure policy: no memory, no I/O, no llama.cpp.
//
// Slots come in pools, one per expert size class. A miss takes a slot from its own class's
// pool, or borrows a slot of a larger class when every slot of its own is pinned, so an arena
// that can hold `k` experts of the largest size can always run the model. Within a pool, the
// least recently used unpinned slot is evicted.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace epq {

struct ExpertKey {
    uint32_t layer = 0;
    uint32_t expert = 0;
    bool operator==(const ExpertKey & o) const { return layer == o.layer && expert == o.expert; }
};

struct ExpertKeyHash {
    size_t operator()(const ExpertKey & k) const { return (static_cast<size_t>(k.layer) << 32) ^ k.expert; }
};

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

struct SlotRef {
    uint32_t pool = 0;
    uint32_t slot = 0;
    bool operator==(const SlotRef & o) const { return pool == o.pool && slot == o.slot; }
};

struct ArenaCounters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    uint64_t borrowed = 0;  // misses served by a slot of a larger class
};

class SlotArena {
public:
    explicit SlotArena(std::vector<PoolSpec> pools);

    struct Acquired {
        SlotRef ref;
        bool hit = false;  // false: the caller must fill the slot, then call loaded() or failed()
    };

    // Pins the slot holding `key` (size class `cls`), or assigns one to it. Returns nullopt only
    // when every slot that could hold it is pinned.
    std::optional<Acquired> acquire(const ExpertKey & key, uint32_t cls);
    void loaded(SlotRef ref);  // the slot's bytes are now valid
    void failed(SlotRef ref);  // the fill failed: forget the key
    void unpin(SlotRef ref);

    // Where `key` lives, if resident (not pinned by this call).
    std::optional<SlotRef> find(const ExpertKey & key) const;
    bool is_ready(SlotRef ref) const;
    uint32_t pin_count(SlotRef ref) const;

    const std::vector<PoolSpec> & pools() const { return specs_; }
    const ArenaCounters & counters() const { return counters_; }

private:
    struct Slot {
        std::optional<ExpertKey> key;
        bool ready = false;
        uint32_t pins = 0;
        std::list<uint32_t>::iterator lru_pos;
        bool in_lru = false;
    };
    struct Pool {
        std::vector<Slot> slots;
        std::list<uint32_t> lru;  // unpinned slots, least recently used first
    };

    Slot & slot(SlotRef r) { return pools_[r.pool].slots[r.slot]; }
    const Slot & slot(SlotRef r) const { return pools_[r.pool].slots[r.slot]; }
    void pin(SlotRef r);
    std::optional<SlotRef> take_victim(uint32_t pool);

    std::vector<PoolSpec> specs_;
    std::vector<Pool> pools_;
    std::unordered_map<ExpertKey, SlotRef, ExpertKeyHash> where_;
    ArenaCounters counters_;
};

}  // namespace epq
