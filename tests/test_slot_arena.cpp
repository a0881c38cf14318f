// Arena policy: budget planning over size classes, LRU eviction, pinning, borrowing.
#include "arena/slot_arena.h"
#include "util/error.h"

#include <gtest/gtest.h>

using namespace epq;

TEST(ArenaPlan, BelowMinimumNamesTheMinimum) {
    const std::vector<SizeClassDemand> classes = {{1000, 400}, {1200, 400}};
    try {
        plan_arena(4 * 1200 - 1, classes, 4);
        FAIL() << "no error";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("below the minimum"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("4800 B"), std::string::npos) << e.what();
    }
    const ArenaPlan p = plan_arena(4 * 1200, classes, 4);
    ASSERT_EQ(p.pools.size(), 2u);
    EXPECT_EQ(p.pools[1].n_slots, 4u);
    EXPECT_EQ(p.min_bytes, 4800u);
    EXPECT_LE(p.bytes, 4800u);
}

TEST(ArenaPlan, SplitsInProportionAndNeverExceedsBudget) {
    const std::vector<SizeClassDemand> classes = {{1000, 1000}, {2000, 1000}};
    const uint64_t budget = 300000;
    const ArenaPlan p = plan_arena(budget, classes, 8);
    ASSERT_EQ(p.pools.size(), 2u);
    EXPECT_LE(p.bytes, budget);
    EXPECT_GT(p.bytes, budget - 2000);  // rounding leaves less than one slot unused
    // Expert bytes are 1:2, so the larger class gets about twice the bytes.
    const double small = double(p.pools[0].n_slots) * 1000, large = double(p.pools[1].n_slots) * 2000;
    EXPECT_NEAR(large / small, 2.0, 0.1);
    EXPECT_FALSE(p.holds_everything);
}

TEST(ArenaPlan, LargeBudgetHoldsEverythingAndNoMore) {
    const std::vector<SizeClassDemand> classes = {{1000, 10}, {2000, 30}};
    const ArenaPlan p = plan_arena(1u << 30, classes, 4);
    EXPECT_TRUE(p.holds_everything);
    EXPECT_EQ(p.pools[0].n_slots, 10u);
    EXPECT_EQ(p.pools[1].n_slots, 30u);
    EXPECT_EQ(p.bytes, 10u * 1000 + 30u * 2000);
}

TEST(SlotArena, HitMissAndLruEviction) {
    SlotArena a({{100, 2}});
    auto x = a.acquire({0, 1}, 0);
    ASSERT_TRUE(x && !x->hit);
    a.loaded(x->ref);
    a.unpin(x->ref);
    auto y = a.acquire({0, 2}, 0);
    ASSERT_TRUE(y && !y->hit);
    a.loaded(y->ref);
    a.unpin(y->ref);
    auto x2 = a.acquire({0, 1}, 0);  // touch 1: now 2 is least recently used
    ASSERT_TRUE(x2 && x2->hit);
    EXPECT_EQ(x2->ref, x->ref);
    a.unpin(x2->ref);
    auto z = a.acquire({0, 3}, 0);
    ASSERT_TRUE(z && !z->hit);
    EXPECT_EQ(z->ref, y->ref) << "evicted the wrong slot";
    a.loaded(z->ref);
    a.unpin(z->ref);
    EXPECT_FALSE(a.find({0, 2}));
    EXPECT_TRUE(a.find({0, 1}));
    EXPECT_EQ(a.counters().hits, 1u);
    EXPECT_EQ(a.counters().misses, 3u);
    EXPECT_EQ(a.counters().evictions, 1u);
}

TEST(SlotArena, PinnedSlotsAreNeverEvicted) {
    SlotArena a({{100, 2}});
    auto x = a.acquire({0, 1}, 0);
    auto y = a.acquire({0, 2}, 0);
    ASSERT_TRUE(x && y);
    EXPECT_FALSE(a.acquire({0, 3}, 0)) << "handed out a pinned slot";
    a.unpin(y->ref);
    auto z = a.acquire({0, 3}, 0);
    ASSERT_TRUE(z);
    EXPECT_EQ(z->ref, y->ref);
    EXPECT_TRUE(a.find({0, 1}));
    EXPECT_EQ(a.pin_count(x->ref), 1u);
}

TEST(SlotArena, SmallExpertsBorrowLargerSlotsNeverTheReverse) {
    SlotArena a({{100, 1}, {200, 2}});
    auto s1 = a.acquire({0, 1}, 0);  // own pool
    auto s2 = a.acquire({0, 2}, 0);  // own pool full and pinned: borrows a large slot
    ASSERT_TRUE(s1 && s2);
    EXPECT_EQ(s1->ref.pool, 0u);
    EXPECT_EQ(s2->ref.pool, 1u);
    EXPECT_EQ(a.counters().borrowed, 1u);
    auto l1 = a.acquire({1, 1}, 1);
    ASSERT_TRUE(l1);
    EXPECT_EQ(l1->ref.pool, 1u);
    EXPECT_FALSE(a.acquire({1, 2}, 1)) << "a large expert must not take a small slot";
}

TEST(SlotArena, FailedFillForgetsTheKey) {
    SlotArena a({{100, 1}});
    auto x = a.acquire({3, 4}, 0);
    ASSERT_TRUE(x);
    a.failed(x->ref);
    a.unpin(x->ref);
    EXPECT_FALSE(a.find({3, 4}));
    auto again = a.acquire({3, 4}, 0);
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->hit);
    EXPECT_FALSE(a.is_ready(again->ref));
    a.unpin(again->ref);
    EXPECT_THROW(a.unpin(again->ref), Error) << "double unpin went unnoticed";
}
