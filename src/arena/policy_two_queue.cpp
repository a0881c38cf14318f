// 2q (Johnson and Shasha's 2Q): an expert seen once waits in a first-in first-out queue (A1in);
// one that comes back after leaving it, remembered by a ghost list of recently evicted keys
// (A1out), joins the main queue (Am), kept least recently used first. A1in is evicted while it
// holds more than a quarter of its pool, so one-off experts (a prompt's, a stray token's) pass
// through without pushing out those that keep being used.
#include "arena/policy_factories.h"
#include "arena/ranked_slots.h"

#include <deque>
#include <unordered_map>
#include <unordered_set>

namespace epq {

namespace {

class TwoQueuePolicy final : public ReplacementPolicy {
public:
    explicit TwoQueuePolicy(const PolicyContext & ctx)
        : in_(ctx.pool_slots), main_(ctx.pool_slots), pools_(ctx.pool_slots.size()) {
        for (size_t p = 0; p < pools_.size(); ++p) {
            pools_[p].in_limit = ctx.pool_slots[p] / 4;
            pools_[p].ghost_limit = ctx.pool_slots[p] / 2;
        }
    }

    void on_use(const ExpertKey & key, uint32_t) override {
        if (queue_of_.count(key)) {
            return;  // resident: A1in stays first-in first-out, Am is ordered at add()
        }
        // A miss: back from the ghost list means it is used again, so it joins the main queue.
        queue_of_[key] = ghosts_.erase(key) ? Queue::main : Queue::in;
    }

    void add(SlotRef ref, const ExpertKey & key) override {
        Pool & p = pools_.at(ref.pool);
        const Queue q = queue_of_.at(key);
        if (q == Queue::main) {
            main_.add(ref, 0);
            return;
        }
        // First in, first out: ranked by when it entered A1in, not by its latest release.
        auto [it, fresh] = entered_.emplace(key, 0);
        if (fresh) {
            it->second = ++entries_;
            ++p.in_count;
        }
        in_.add(ref, it->second);
    }

    void remove(SlotRef ref) override {
        in_.remove(ref);
        main_.remove(ref);
    }

    std::optional<uint32_t> take_victim(uint32_t pool) override {
        Pool & p = pools_.at(pool);
        std::optional<uint32_t> slot;
        if (p.in_count > p.in_limit) {
            slot = in_.take_first(pool);
        }
        if (!slot) {
            slot = main_.take_first(pool);
        }
        if (!slot) {
            slot = in_.take_first(pool);
        }
        return slot;
    }

    void on_evicted(SlotRef ref, const ExpertKey & key) override {
        Pool & p = pools_.at(ref.pool);
        const auto it = queue_of_.find(key);
        if (it != queue_of_.end() && it->second == Queue::in) {
            --p.in_count;
            entered_.erase(key);
            ghosts_.insert(key);
            p.ghost_order.push_back(key);
            while (p.ghost_order.size() > p.ghost_limit) {
                ghosts_.erase(p.ghost_order.front());
                p.ghost_order.pop_front();
            }
        }
        queue_of_.erase(key);
    }

private:
    enum class Queue { in, main };
    struct Pool {
        uint64_t in_limit = 0;
        uint64_t ghost_limit = 0;
        uint64_t in_count = 0;  // resident keys in A1in, pinned or not
        std::deque<ExpertKey> ghost_order;
    };
    RankedSlots in_, main_;
    std::vector<Pool> pools_;
    std::unordered_map<ExpertKey, Queue, ExpertKeyHash> queue_of_;  // resident keys
    std::unordered_map<ExpertKey, uint64_t, ExpertKeyHash> entered_;
    std::unordered_set<ExpertKey, ExpertKeyHash> ghosts_;
    uint64_t entries_ = 0;
};

}  // namespace

std::unique_ptr<ReplacementPolicy> make_two_queue_policy(const PolicyContext & ctx) {
    return std::make_unique<TwoQueuePolicy>(ctx);
}

}  // namespace epq
