// Arena policy: budget planning over size classes, eviction policies (lru, lfu, belady), pinning,
// borrowing.
#include "arena/slot_arena.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <set>

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

// A pool with a home for each key places every miss there while it is free, whatever order the
// misses come in; a key without a home, or whose home is taken, gets any free slot.
TEST(SlotArena, HomeSlotsPlaceExpertsInExpertOrder) {
    SlotArena a({{100, 8}});
    a.set_home(0, [](const ExpertKey & k) -> std::optional<uint32_t> {
        if (k.layer > 1) {
            return std::nullopt;
        }
        return k.layer * 4 + k.expert;
    });
    for (const uint32_t e : {3u, 0u, 2u}) {
        for (const uint32_t layer : {1u, 0u}) {
            auto x = a.acquire({layer, e}, 0);
            ASSERT_TRUE(x && !x->hit);
            EXPECT_EQ(x->ref.slot, layer * 4 + e) << "layer " << layer << " expert " << e;
            a.loaded(x->ref);
            a.unpin(x->ref);
        }
    }
    auto stray = a.acquire({7, 0}, 0);  // no home: any free slot
    ASSERT_TRUE(stray && !stray->hit);
    a.loaded(stray->ref);
    a.unpin(stray->ref);
    std::set<uint32_t> used = {3, 0, 2, 7, 4, 6};
    EXPECT_EQ(used.count(stray->ref.slot), 0u) << "a homeless key evicted a resident expert";
    auto y = a.acquire({0, 1}, 0);
    ASSERT_TRUE(y && !y->hit);
    EXPECT_NE(y->ref.slot, stray->ref.slot);
    EXPECT_EQ(a.counters().evictions, 0u);
    EXPECT_THROW(a.set_home(1, nullptr), Error);
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

namespace {

PolicyContext lfu_ctx(double half_life) {
    PolicyContext ctx;
    ctx.lfu_half_life = half_life;
    return ctx;
}

template <class Fn>
std::string error_message(Fn fn) {
    try {
        fn();
    } catch (const Error & e) {
        return e.what();
    }
    return "";
}

// Acquires `key` in class 0, marks it loaded and unpins it: one use of one expert.
bool use(SlotArena & a, uint32_t expert) {
    auto x = a.acquire({0, expert}, 0);
    if (!x) {
        ADD_FAILURE() << "no slot for expert " << expert;
        return false;
    }
    if (!x->hit) {
        a.loaded(x->ref);
    }
    a.unpin(x->ref);
    return x->hit;
}

}  // namespace

TEST(ReplacementPolicy, NamesAreFoundAndUnknownNamesListTheValidOnes) {
    for (const PolicyInfo & p : replacement_policies()) {
        EXPECT_EQ(&find_policy(p.name), &p);
        if (p.needs_future) {
            EXPECT_THROW(parse_run_policy(p.name), Error) << p.name;
        } else {
            EXPECT_EQ(parse_run_policy(p.name), p.name);
        }
    }
    EXPECT_EQ(parse_run_policy(kDefaultPolicy), kDefaultPolicy);
    EXPECT_NE(error_message([] { parse_run_policy("belady"); }).find("simulate"), std::string::npos);
    try {
        find_policy("fifo");
        FAIL() << "no error";
    } catch (const Error & e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("'fifo'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("lru"), std::string::npos) << msg;
        EXPECT_NE(msg.find("lfu"), std::string::npos) << msg;
    }
}

TEST(SlotArena, LfuKeepsAFrequentExpertThatLruEvicts) {
    // Two slots; A A A B C A. lru: C evicts A (least recently used), so the last A misses:
    // misses A B C A = 4, hits 2. lfu: C evicts B (1 use against A's 3), the last A hits:
    // misses A B C = 3, hits 3.
    const std::vector<uint32_t> seq = {1, 1, 1, 2, 3, 1};
    SlotArena lru({{100, 2}}, "lru");
    SlotArena lfu({{100, 2}}, "lfu");
    for (uint32_t e : seq) {
        use(lru, e);
        use(lfu, e);
    }
    EXPECT_EQ(lru.counters().misses, 4u);
    EXPECT_EQ(lru.counters().hits, 2u);
    EXPECT_EQ(lfu.counters().misses, 3u);
    EXPECT_EQ(lfu.counters().hits, 3u);
    EXPECT_TRUE(lfu.find({0, 1}));
    EXPECT_FALSE(lfu.find({0, 2}));
}

TEST(SlotArena, LfuCountsSurviveEvictionAndEqualCountsGoLeastRecentlyUsed) {
    // Two slots, counts that barely decay in this run. A A A (A=3), B B (B=2), C evicts B
    // (2 < 3). B comes back and evicts C (1): its count goes on from 2 to 3. D: A and B both
    // count 3, but B's uses are more recent (decay leaves them a little more), so A goes. Had
    // B's count restarted at 1 after its eviction, D would have evicted B.
    SlotArena a({{100, 2}}, "lfu", lfu_ctx(1e9));
    for (uint32_t e : {1, 1, 1, 2, 2, 3, 2, 4}) {
        use(a, e);
    }
    EXPECT_TRUE(a.find({0, 2}));
    EXPECT_TRUE(a.find({0, 4}));
    EXPECT_FALSE(a.find({0, 1}));
    EXPECT_FALSE(a.find({0, 3}));
    EXPECT_EQ(a.counters().misses, 5u);  // A B C B D
    EXPECT_EQ(a.counters().hits, 3u);
}

TEST(SlotArena, LfuCountsDecaySoOldPopularityFades) {
    // Two slots, a half-life of 4 acquires. A x10 (acquires 1-10), then B x9 (11-19), then C
    // (20). At C, A's count has decayed to sum(2^(-d/4), d = 10..19) ~ 0.9 and B's to
    // sum(2^(-d/4), d = 1..9) ~ 4.2, so C evicts A. Without decay (a half-life far beyond the
    // run) A's 10 beats B's 9 and C evicts B.
    auto run = [](double half_life) {
        SlotArena a({{100, 2}}, "lfu", lfu_ctx(half_life));
        for (int i = 0; i < 10; ++i) {
            use(a, 1);
        }
        for (int i = 0; i < 9; ++i) {
            use(a, 2);
        }
        use(a, 3);
        EXPECT_EQ(a.counters().misses, 3u);
        EXPECT_EQ(a.counters().hits, 17u);
        return a.find({0, 1}).has_value();
    };
    EXPECT_FALSE(run(4)) << "A's old count did not fade";
    EXPECT_TRUE(run(1e9)) << "without decay the more frequent A should stay";
}

TEST(SlotArena, ABatchMovesTheLfuClockByItsTokens) {
    // Two slots, a half-life of 8 acquires. The last request decoded with A twice. A new
    // request's prompt is one batch in which 12 tokens select B; then C comes. Were the batch one
    // acquire on the clock, B (1 use, now) would rank below A (2 uses, ~1.9 decayed), and C would
    // evict B, the expert the new request keeps coming back to. Moved 12 acquires on, A's count
    // decays to ~0.7, and C evicts A.
    for (uint32_t tokens : {1u, 12u}) {
        SCOPED_TRACE(tokens);
        SlotArena a({{100, 2}}, "lfu", lfu_ctx(8));
        use(a, 1);
        use(a, 1);
        auto b = a.acquire({0, 2}, 0, tokens);
        ASSERT_TRUE(b && !b->hit);
        a.loaded(b->ref);
        a.unpin(b->ref);
        use(a, 3);
        EXPECT_EQ(a.find({0, 2}).has_value(), tokens == 12);
        EXPECT_EQ(a.find({0, 1}).has_value(), tokens == 1);
    }
}

TEST(SlotArena, LfuHalfLifeIsCountedInDecodeTokens) {
    // A decode token acquires k experts in each MoE layer.
    EXPECT_DOUBLE_EQ(lfu_half_life_acquires(48, 8), kLfuHalfLifeTokens * 48 * 8);
    EXPECT_DOUBLE_EQ(lfu_half_life_acquires(0, 8), kLfuHalfLifeTokens);
}

TEST(SlotArena, BeladyOnTheTextbookSequenceMissesNineTimes) {
    // The textbook reference string with 3 frames (optimal: 9 faults, lru: 12). By hand, the
    // optimal evicts the resident page used farthest ahead (position of next use in brackets):
    //   pos  0-2  7 0 1      miss x3          [7 0 1]
    //   pos  3    2: 7(17) 0(4) 1(13)         evict 7  [2 0 1]
    //   pos  4    0 hit
    //   pos  5    3: 2(8) 0(6) 1(13)          evict 1  [2 0 3]
    //   pos  6    0 hit
    //   pos  7    4: 2(8) 0(10) 3(9)          evict 0  [2 4 3]
    //   pos  8-9  2 3 hit
    //   pos 10    0: 2(12) 4(never) 3(11)     evict 4  [2 0 3]
    //   pos 11-12 3 2 hit
    //   pos 13    1: 2(14) 0(15) 3(never)     evict 3  [2 0 1]
    //   pos 14-16 2 0 1 hit
    //   pos 17    7: 2(never) 0(18) 1(19)     evict 2  [7 0 1]
    //   pos 18-19 0 1 hit
    // misses: 7 0 1 2 3 4 0 1 7 = 9, hits 11.
    const std::vector<uint32_t> seq = {7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1};
    size_t now = 0;
    PolicyContext future;
    future.next_use = [&](const ExpertKey & k) -> uint64_t {
        for (size_t j = now + 1; j < seq.size(); ++j) {
            if (seq[j] == k.expert) {
                return j;
            }
        }
        return UINT64_MAX;
    };
    SlotArena opt({{100, 3}}, "belady", future);
    SlotArena lru({{100, 3}}, "lru");
    for (now = 0; now < seq.size(); ++now) {
        use(opt, seq[now]);
        use(lru, seq[now]);
    }
    EXPECT_EQ(opt.counters().misses, 9u);
    EXPECT_EQ(opt.counters().hits, 11u);
    EXPECT_EQ(lru.counters().misses, 12u);
    for (uint32_t e : {7, 0, 1}) {
        EXPECT_TRUE(opt.find({0, e})) << e;
    }
}

TEST(SlotArena, BeladyWithoutAnOracleSaysSo) {
    try {
        SlotArena a({{100, 2}}, "belady");
        FAIL() << "no error";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("simulate"), std::string::npos) << e.what();
    }
}

TEST(SlotArena, EveryPolicyBorrowsLargerSlotsWhenItsOwnArePinned) {
    PolicyContext ctx;
    ctx.next_use = [](const ExpertKey &) { return UINT64_MAX; };
    for (const PolicyInfo & p : replacement_policies()) {
        SCOPED_TRACE(p.name);
        SlotArena a({{100, 1}, {200, 2}}, p.name, ctx);
        auto s1 = a.acquire({0, 1}, 0);
        auto s2 = a.acquire({0, 2}, 0);
        ASSERT_TRUE(s1 && s2);
        EXPECT_EQ(s1->ref.pool, 0u);
        EXPECT_EQ(s2->ref.pool, 1u);
        EXPECT_EQ(a.counters().borrowed, 1u);
        auto l1 = a.acquire({1, 1}, 1);
        ASSERT_TRUE(l1);
        EXPECT_FALSE(a.acquire({1, 2}, 1));
        // Unpinned again, the borrowed slot is the large class's to evict.
        a.unpin(s2->ref);
        auto l2 = a.acquire({1, 2}, 1);
        ASSERT_TRUE(l2);
        EXPECT_EQ(l2->ref, s2->ref);
        EXPECT_FALSE(a.find({0, 2}));
    }
}

namespace {

// One use of `expert` of `layer` (class 0): acquired, loaded if it missed, unpinned.
void use_at(SlotArena & a, uint32_t layer, uint32_t expert) {
    auto x = a.acquire({layer, expert}, 0);
    ASSERT_TRUE(x) << "no slot for " << layer << "/" << expert;
    if (!x->hit) {
        a.loaded(x->ref);
    }
    a.unpin(x->ref);
}

}  // namespace

TEST(SlotArena, ForecastKeepsTheExpertOfTheLayerAboutToComeRound) {
    // 48 MoE layers, two slots. Token 1 uses y at layer 1; token 2 uses x at layer 0, then z at
    // layer 0 needs a slot. y is the least recently and the least often used (its one use has
    // decayed a token longer), so lru and lfu give it up. But layer 1 comes next, one layer away,
    // while layer 0 comes round again only after 48: forecast gives up x.
    PolicyContext ctx;
    for (uint32_t l = 0; l < 48; ++l) {
        ctx.layers.push_back(l);
    }
    for (const char * p : {"lru", "lfu", "forecast"}) {
        SCOPED_TRACE(p);
        SlotArena a({{100, 2}}, p, ctx);
        use_at(a, 1, 7);  // y
        use_at(a, 0, 3);  // x
        use_at(a, 0, 5);  // z
        const bool forecast = std::string(p) == "forecast";
        EXPECT_EQ(a.find({1, 7}).has_value(), forecast);
        EXPECT_EQ(a.find({0, 3}).has_value(), !forecast);
        EXPECT_TRUE(a.find({0, 5}));
    }
}

TEST(SlotArena, TwoQueueKeepsAnExpertUsedAgainThroughAScanOfOneOffs) {
    // Four slots (A1in holds a quarter: 1). A is used, pushed out by one-off experts 1-4 (its key
    // is remembered), and used again: it joins the main queue. A scan of five more one-offs then
    // passes through A1in and leaves A resident; lru loses it to the scan.
    for (const char * p : {"2q", "lru"}) {
        SCOPED_TRACE(p);
        SlotArena a({{100, 4}}, p);
        use_at(a, 0, 100);
        for (uint32_t e = 1; e <= 4; ++e) {
            use_at(a, 0, e);
        }
        EXPECT_FALSE(a.find({0, 100}));
        use_at(a, 0, 100);
        for (uint32_t e = 5; e <= 9; ++e) {
            use_at(a, 0, e);
        }
        EXPECT_EQ(a.find({0, 100}).has_value(), std::string(p) == "2q");
    }
}
