// Which resident expert the arena gives up when a miss needs a slot: the replacement policy.
//
// The arena (slot_arena.h) owns the slots, the pins and the key-to-slot map; a policy only sees
// the events that decide an order: a use of an expert, a slot becoming evictable (its last pin
// released) or no longer evictable (pinned again, or emptied), and an eviction. It answers one
// question: which evictable slot of a pool goes next. A policy keeps whatever state it needs,
// one queue or several (ARC- or 2Q-like policies keep ghost lists of evicted keys through
// on_evicted). Pure: no memory, no I/O, no llama.cpp.
//
// A new policy is one file (policy_NAME.cpp) defining a factory, and its line in the list in
// policy_registry.cpp; `epq simulate` then replays it beside the others and `--policy NAME`
// runs it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
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

struct SlotRef {
    uint32_t pool = 0;
    uint32_t slot = 0;
    bool operator==(const SlotRef & o) const { return pool == o.pool && slot == o.slot; }
};

// What a policy may know about the model and the run, beyond the events.
struct PolicyContext {
    std::vector<uint32_t> pool_slots;  // slots per pool (set by the arena)
    // The MoE layers in the order a token computes them: a policy can tell how soon a layer comes
    // round again. Empty: layer numbers are taken as that order.
    std::vector<uint32_t> layers;
    uint32_t n_expert = 0;       // per layer (0: unknown)
    uint32_t n_expert_used = 0;  // experts a token selects in a layer (0: unknown)
    double lfu_half_life = 0;    // lfu: in acquires (see lfu_half_life_acquires); 0: 8 x the slots
    // belady: where `key` is next used (a position in the replayed sequence; UINT64_MAX: never),
    // counted from the position being replayed when asked. Only the simulator knows it.
    std::function<uint64_t(const ExpertKey &)> next_use;
};

class ReplacementPolicy {
public:
    virtual ~ReplacementPolicy() = default;

    // `key` got a slot (a hit, or a miss now being filled); `uses`: how many tokens of the batch
    // selected it. Comes before the slot is next made evictable.
    virtual void on_use(const ExpertKey & key, uint32_t uses) = 0;
    // The slot holding `key` lost its last pin: it may be evicted from now on.
    virtual void add(SlotRef ref, const ExpertKey & key) = 0;
    // The slot, evictable until now, is pinned again or emptied: no longer a candidate.
    virtual void remove(SlotRef ref) = 0;
    // The evictable slot of `pool` to give up next, taken out of the candidates; nullopt when the
    // pool has none.
    virtual std::optional<uint32_t> take_victim(uint32_t pool) = 0;
    // `key` left `ref` (evicted, or its fill failed); the slot is not evictable at this point.
    virtual void on_evicted(SlotRef ref, const ExpertKey & key) {
        (void)ref;
        (void)key;
    }
};

using PolicyFactory = std::unique_ptr<ReplacementPolicy> (*)(const PolicyContext &);

struct PolicyInfo {
    const char * name;
    const char * summary;  // one line, for --help and the simulator's table
    bool needs_future;     // only the simulator can run it (belady)
    PolicyFactory make;
};

// Every policy, in the order the simulator shows them; belady last.
const std::vector<PolicyInfo> & replacement_policies();

// The policy `epq run`, `epq serve` and `epq simulate` use unless told otherwise.
constexpr const char * kDefaultPolicy = "forecast";

// The policy named `name`; throws epq::Error listing the valid names otherwise.
const PolicyInfo & find_policy(const std::string & name);

// Validates a --policy value for a run (not the simulator): throws epq::Error for an unknown name
// or one that needs the future.
std::string parse_run_policy(const std::string & name);

// "lru, lfu, ..." of the policies a run can use.
std::string run_policy_names();

// Makes the named policy; throws epq::Error when it is unknown or needs what `ctx` lacks.
std::unique_ptr<ReplacementPolicy> make_policy(const std::string & name, const PolicyContext & ctx);

}  // namespace epq
