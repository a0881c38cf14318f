// lfu: the slot whose expert was used least often lately goes first (ties: least recently used).
// Each use counts 1 and decays with a half-life (kLfuHalfLifeTokens decode tokens by default), so
// popularity from long ago fades; counts survive eviction, so an expert that keeps coming back
// is kept.
#include "arena/policy_factories.h"
#include "arena/ranked_slots.h"
#include "arena/slot_arena.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

namespace epq {

namespace {

class LfuPolicy final : public ReplacementPolicy {
public:
    explicit LfuPolicy(const PolicyContext & ctx) : queue_(ctx.pool_slots) {
        uint64_t slots = 0;
        for (uint32_t n : ctx.pool_slots) {
            slots += n;
        }
        half_life_ = ctx.lfu_half_life > 0 ? ctx.lfu_half_life : static_cast<double>(std::max<uint64_t>(1, 8 * slots));
    }

    // A batch moves the clock by its tokens (see SlotArena::acquire); the use counts one.
    void on_use(const ExpertKey & key, uint32_t uses) override {
        acquires_ += std::max<uint32_t>(1, uses);
        const double now = static_cast<double>(acquires_) / half_life_;
        auto it = score_.find(key);
        // The count decayed to now, plus this use.
        const double count = (it == score_.end() ? 0.0 : std::exp2(it->second - now)) + 1.0;
        score_[key] = std::log2(count) + now;
    }
    void add(SlotRef ref, const ExpertKey & key) override {
        auto it = score_.find(key);
        const double score = it == score_.end() ? 0.0 : it->second;
        uint64_t bits = 0;
        std::memcpy(&bits, &score, sizeof bits);
        queue_.add(ref, bits);
    }
    void remove(SlotRef ref) override { queue_.remove(ref); }
    std::optional<uint32_t> take_victim(uint32_t pool) override { return queue_.take_first(pool); }

private:
    RankedSlots queue_;
    // A key's decayed use count c at acquire clock t, kept as log2(c) + t / half-life. Every count
    // decays at the same rate, so this order never changes while a slot waits: ranks stay valid
    // without re-sorting. It is >= 0, so its bits order as the value does.
    std::unordered_map<ExpertKey, double, ExpertKeyHash> score_;
    uint64_t acquires_ = 0;
    double half_life_ = 1;
};

}  // namespace

std::unique_ptr<ReplacementPolicy> make_lfu_policy(const PolicyContext & ctx) {
    return std::make_unique<LfuPolicy>(ctx);
}

}  // namespace epq
