#include "arena/ranked_slots.h"

#include "util/error.h"

namespace epq {

RankedSlots::RankedSlots(const std::vector<uint32_t> & pool_slots) : pools_(pool_slots.size()) {
    for (size_t p = 0; p < pool_slots.size(); ++p) {
        pools_[p].of_slot.resize(pool_slots[p]);
    }
}

void RankedSlots::add(SlotRef ref, uint64_t primary) {
    Pool & p = pools_.at(ref.pool);
    std::optional<Rank> & r = p.of_slot.at(ref.slot);
    if (r) {
        throw Error("internal: a slot was made evictable twice");
    }
    r = Rank{primary, ++tick_, ref.slot};
    p.queue.insert(*r);
}

void RankedSlots::remove(SlotRef ref) {
    Pool & p = pools_.at(ref.pool);
    std::optional<Rank> & r = p.of_slot.at(ref.slot);
    if (r) {
        p.queue.erase(*r);
        r.reset();
    }
}

std::optional<uint32_t> RankedSlots::take_first(uint32_t pool) {
    Pool & p = pools_.at(pool);
    if (p.queue.empty()) {
        return std::nullopt;
    }
    const uint32_t slot = p.queue.begin()->slot;
    p.queue.erase(p.queue.begin());
    p.of_slot[slot].reset();
    return slot;
}

}  // namespace epq
