// lru: the slot whose expert was used least recently goes first.
#include "arena/policy_factories.h"
#include "arena/ranked_slots.h"

namespace epq {

namespace {

class LruPolicy final : public ReplacementPolicy {
public:
    explicit LruPolicy(const PolicyContext & ctx) : queue_(ctx.pool_slots) {}
    void on_use(const ExpertKey &, uint32_t) override {}
    // Every rank is equal, so the queue orders by when the slot was released.
    void add(SlotRef ref, const ExpertKey &) override { queue_.add(ref, 0); }
    void remove(SlotRef ref) override { queue_.remove(ref); }
    std::optional<uint32_t> take_victim(uint32_t pool) override { return queue_.take_first(pool); }

private:
    RankedSlots queue_;
};

}  // namespace

std::unique_ptr<ReplacementPolicy> make_lru_policy(const PolicyContext & ctx) {
    return std::make_unique<LruPolicy>(ctx);
}

}  // namespace epq
