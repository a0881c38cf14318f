// Evictable slots ordered by a rank, per pool: the queue of the single-queue policies (lru, lfu,
// belady). The smallest (primary, tick, slot) goes first; tick is when the slot became
// evictable, so ties go least recently used.
#pragma once

#include "arena/replacement_policy.h"

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

namespace epq {

class RankedSlots {
public:
    explicit RankedSlots(const std::vector<uint32_t> & pool_slots);

    void add(SlotRef ref, uint64_t primary);
    void remove(SlotRef ref);
    std::optional<uint32_t> take_first(uint32_t pool);

private:
    struct Rank {
        uint64_t primary = 0;
        uint64_t tick = 0;
        uint32_t slot = 0;
        bool operator<(const Rank & o) const {
            if (primary != o.primary) {
                return primary < o.primary;
            }
            return tick != o.tick ? tick < o.tick : slot < o.slot;
        }
    };
    struct Pool {
        std::set<Rank> queue;
        std::vector<std::optional<Rank>> of_slot;
    };
    std::vector<Pool> pools_;
    uint64_t tick_ = 0;
};

}  // namespace epq
