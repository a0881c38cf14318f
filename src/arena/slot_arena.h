// The arena's bookkeeping: which expert occupies which slot, which slots are pinned, and which
// slot to give up next. Pure policy: no memory, no I/O, no llama.cpp.
//
// Slots come in pools, one per expert size class. A miss takes a slot from its own class's
// pool, or borrows a slot of a larger class when every slot of its own is pinned, so an arena
// that can hold `k` experts of the largest size can always run the model. Within a pool, a slot
// that holds nothing is reused first; otherwise the eviction policy picks the unpinned victim.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace epq {

enum class EvictionPolicy {
    lru,  // the least recently used slot
    // The slot whose expert was used least often lately (ties: least recently used). Each use
    // counts 1 and decays with a half-life (kLfuHalfLifeTokens decode tokens by default), so
    // popularity from long ago fades; counts survive eviction, so an expert that keeps coming
    // back is kept.
    lfu,
    // The slot whose expert is next used farthest in the future (Belady's optimal replacement).
    // It needs the future, so only the simulator can use it: see SlotArena::set_next_use.
    belady,
};

// The half-life of an lfu use count, in decode tokens. Chosen with `epq simulate` on decode
// traces of Qwen3-30B-A3B-shaped routing (1,000 tokens): 34 tokens (a decay of 0.98 per token)
// gave the most hits at arenas of 5-25% of the expert bytes, against 0.95 or 0.99 per token and
// against the halving every 8 x slots acquires that lfu used before (5%: 0.84x belady vs 0.77x).
constexpr double kLfuHalfLifeTokens = 34.0;

// kLfuHalfLifeTokens in acquires: a decode token acquires top-k experts in each MoE layer.
double lfu_half_life_acquires(uint64_t moe_layers, uint32_t k);

// "lru", "lfu" or "belady" (simulator only); throws epq::Error naming the valid ones otherwise.
EvictionPolicy parse_policy(const std::string & name);
const char * policy_name(EvictionPolicy p);

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
    // lfu_half_life: in acquires (see lfu_half_life_acquires); 0: 8 x the arena's slots.
    explicit SlotArena(std::vector<PoolSpec> pools, EvictionPolicy policy = EvictionPolicy::lru,
                       double lfu_half_life = 0);

    // belady: where `key` is next used (a position in the replayed sequence; UINT64_MAX: never),
    // counted from the position being replayed when asked. It is asked when a slot becomes
    // evictable (its last unpin) rather than at every eviction: a resident key's next use cannot
    // change while it sits unpinned, because using it pins it again. That keeps an eviction
    // O(log slots) instead of a scan of the pool.
    using NextUse = std::function<uint64_t(const ExpertKey &)>;
    void set_next_use(NextUse oracle);

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
    EvictionPolicy policy() const { return policy_; }

private:
    // The eviction order of a pool's unpinned, occupied slots: the smallest goes first.
    struct Rank {
        uint64_t primary = 0;  // lru: 0; lfu: the bits of its UseScore; belady: UINT64_MAX - next use
        uint64_t tick = 0;     // when the slot was last unpinned, so ties go least recently used
        uint32_t slot = 0;
        bool operator<(const Rank & o) const {
            if (primary != o.primary) {
                return primary < o.primary;
            }
            return tick != o.tick ? tick < o.tick : slot < o.slot;
        }
    };
    enum class Queue { none, empty, ranked };  // none: pinned
    struct Slot {
        std::optional<ExpertKey> key;
        bool ready = false;
        uint32_t pins = 0;
        Queue queue = Queue::none;
        Rank rank;
    };
    struct Pool {
        std::vector<Slot> slots;
        std::vector<uint32_t> empty;  // unpinned slots that hold nothing, reused last-in first-out
        std::set<Rank> ranked;        // unpinned slots that hold an expert, in eviction order
        HomeSlot home;                // set_home
    };
    // lfu: a key's decayed use count c at acquire clock t, kept as log2(c) + t / half-life.
    // Every count decays at the same rate, so this order never changes while a slot waits:
    // ranks stay valid without re-sorting. It is >= 0, so its bits order as the value does.
    using UseScore = double;

    Slot & slot(SlotRef r) { return pools_[r.pool].slots[r.slot]; }
    const Slot & slot(SlotRef r) const { return pools_[r.pool].slots[r.slot]; }
    void pin(SlotRef r);
    void detach(SlotRef r);   // takes the slot out of its pool's queues
    void enqueue(SlotRef r);  // puts an unpinned slot into its pool's queues
    uint64_t primary_rank(const ExpertKey & key);
    void count_use(const ExpertKey & key, uint32_t uses);
    void rerank();  // recomputes every queued slot's rank after the next uses changed
    std::optional<SlotRef> take_victim(uint32_t pool);
    std::optional<SlotRef> take_home(uint32_t pool, const ExpertKey & key);

    std::vector<PoolSpec> specs_;
    std::vector<Pool> pools_;
    std::unordered_map<ExpertKey, SlotRef, ExpertKeyHash> where_;
    ArenaCounters counters_;
    EvictionPolicy policy_ = EvictionPolicy::lru;
    uint64_t tick_ = 0;
    std::unordered_map<ExpertKey, UseScore, ExpertKeyHash> uses_;
    uint64_t acquires_ = 0;  // the lfu clock
    double half_life_ = 1;   // in acquires
    NextUse next_use_;
};

}  // namespace epq
