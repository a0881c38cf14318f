// belady: the slot whose expert is next used farthest in the future (Belady's optimal
// replacement). It needs the future, so only the simulator can run it.
#include "arena/policy_factories.h"
#include "arena/ranked_slots.h"

#include "util/error.h"

namespace epq {

namespace {

class BeladyPolicy final : public ReplacementPolicy {
public:
    explicit BeladyPolicy(const PolicyContext & ctx) : queue_(ctx.pool_slots), next_use_(ctx.next_use) {}
    void on_use(const ExpertKey &, uint32_t) override {}
    // Ranked when the slot becomes evictable, not at every eviction: a resident key's next use
    // cannot change while it sits unpinned, because using it pins it again. That keeps an
    // eviction O(log slots) instead of a scan of the pool.
    void add(SlotRef ref, const ExpertKey & key) override { queue_.add(ref, UINT64_MAX - next_use_(key)); }
    void remove(SlotRef ref) override { queue_.remove(ref); }
    std::optional<uint32_t> take_victim(uint32_t pool) override { return queue_.take_first(pool); }

private:
    RankedSlots queue_;
    std::function<uint64_t(const ExpertKey &)> next_use_;
};

}  // namespace

std::unique_ptr<ReplacementPolicy> make_belady_policy(const PolicyContext & ctx) {
    if (!ctx.next_use) {
        throw Error("the belady eviction policy needs to know future expert use, which only epq simulate has; use " +
                    run_policy_names());
    }
    return std::make_unique<BeladyPolicy>(ctx);
}

}  // namespace epq
