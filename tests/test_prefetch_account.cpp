// The speculative-read bookkeeping: counts worked out by hand, and the auto mode's decisions;
// the activity record behind the serve page's heat map.
#include "arena/expert_activity.h"
#include "arena/prefetch_account.h"
#include "util/error.h"

#include <gtest/gtest.h>

using namespace epq;

TEST(PrefetchAccount, SettleCountsPrecisionRecallAndBytesByHand) {
    PrefetchAccount a(PrefetchMode::on, 3);
    // Layer 1: guessed {1,2,3,4}; 2 and 4 were read early (100 B each), 1 and 3 were resident.
    // Selected {2,3,5,6}: correct = {2,3} -> 2; useful read = 2 (100 B); wasted = 4 (100 B).
    a.settle(1, {1, 2, 3, 4}, {0, 100, 0, 100}, {2, 3, 5, 6});
    // Layer 2: guessed {7,8}, both read (50 B each), selected {7,8}: all correct and useful.
    a.settle(2, {7, 8}, {50, 50}, {7, 8});
    const PredictionCounts & t = a.total();
    EXPECT_EQ(t.predictions, 2u);
    EXPECT_EQ(t.guessed, 6u);
    EXPECT_EQ(t.selected, 6u);
    EXPECT_EQ(t.correct, 4u);
    EXPECT_EQ(t.spec_reads, 4u);
    EXPECT_EQ(t.spec_bytes, 300u);
    EXPECT_EQ(t.useful_reads, 3u);
    EXPECT_EQ(t.useful_bytes, 200u);
    EXPECT_EQ(t.wasted_bytes, 100u);
    EXPECT_DOUBLE_EQ(t.precision(), 4.0 / 6.0);
    EXPECT_DOUBLE_EQ(t.recall(), 4.0 / 6.0);
    EXPECT_DOUBLE_EQ(t.useful_fraction(), 2.0 / 3.0);
    const auto & l = a.per_layer();
    ASSERT_EQ(l.size(), 3u);
    EXPECT_EQ(l[0].predictions, 0u);
    EXPECT_EQ(l[1].correct, 2u);
    EXPECT_EQ(l[1].wasted_bytes, 100u);
    EXPECT_EQ(l[2].useful_bytes, 100u);
    EXPECT_TRUE(a.active());
}

TEST(PrefetchAccount, OffIsNeverActive) {
    PrefetchAccount a(PrefetchMode::off, 1);
    EXPECT_FALSE(a.active());
    EXPECT_NE(a.state().find("off"), std::string::npos);
}

TEST(PrefetchAccount, OnStaysOnEvenWhenEverythingIsWasted) {
    PrefetchAccount a(PrefetchMode::on, 1);
    for (int i = 0; i < 500; ++i) {
        a.settle(0, {1}, {1000}, {2});
        a.token_time(1.0);
    }
    EXPECT_TRUE(a.active());
}

TEST(PrefetchAccount, AutoSwitchesOffWhenSpeculativeBytesAreMostlyWasted) {
    PrefetchAccount a(PrefetchMode::automatic, 1, /*min_evidence_bytes=*/1000, /*min_useful=*/0.5);
    // Epoch 0 of the trial is an "on" epoch: guesses are made at once.
    ASSERT_TRUE(a.active());
    // 1 useful read in 4 (25% < 50%), 64 reads of 100 B: enough evidence.
    for (int i = 0; i < 16; ++i) {
        a.settle(0, {1, 2, 3, 4}, {100, 100, 100, 100}, {1, 9, 10, 11});
    }
    EXPECT_FALSE(a.active());
    EXPECT_NE(a.state().find("25%"), std::string::npos) << a.state();
}

TEST(PrefetchAccount, AutoEndsItsTrialOnWhenSpeculativeBytesAreMostlyUsed) {
    PrefetchAccount a(PrefetchMode::automatic, 1, /*min_evidence_bytes=*/1000, /*min_useful=*/0.3,
                      /*sure_useful=*/0.8);
    ASSERT_TRUE(a.active());
    // 3 useful reads in 4 (75% < 80%) over 64 reads: the trial goes on, into its "off" epochs.
    for (int i = 0; i < 16; ++i) {
        a.settle(0, {1, 2, 3, 4}, {100, 100, 100, 100}, {1, 2, 3, 11});
    }
    EXPECT_NE(a.state().find("trial"), std::string::npos) << a.state();
    for (int i = 0; i < PrefetchAccount::kEpochTokens; ++i) {
        a.token_time(0.01);
    }
    EXPECT_FALSE(a.active()) << "the trial's second epoch is an off one";
    // Then all four used: after 3 such, 60 of 76 reads (79%); after 4, 64 of 80 (80%): on for
    // good, whatever the tokens take.
    PrefetchAccount b(PrefetchMode::automatic, 1, 1000, 0.3, 0.8);
    for (int i = 0; i < 16; ++i) {
        b.settle(0, {1, 2, 3, 4}, {100, 100, 100, 100}, {1, 2, 3, 11});
    }
    for (int i = 0; i < 3; ++i) {
        b.settle(0, {1, 2, 3, 4}, {100, 100, 100, 100}, {1, 2, 3, 4});
    }
    EXPECT_NE(b.state().find("trial"), std::string::npos) << b.state();
    b.settle(0, {1, 2, 3, 4}, {100, 100, 100, 100}, {1, 2, 3, 4});
    EXPECT_TRUE(b.active());
    EXPECT_EQ(b.state().rfind("on (auto: 80% of the bytes of 80 speculative reads were used", 0), 0u) << b.state();
    for (int i = 0; i < 8 * PrefetchAccount::kEpochTokens; ++i) {
        b.token_time(i % 2 ? 0.5 : 0.01);
        ASSERT_TRUE(b.active()) << "token " << i;
    }
}

namespace {
// Runs the whole auto trial with the given per-token times for "on" and "off" epochs.
PrefetchAccount trial(double on_seconds, double off_seconds) {
    PrefetchAccount a(PrefetchMode::automatic, 1);
    int on_epochs = 0, off_epochs = 0;
    for (int e = 0; e < PrefetchAccount::kTrialEpochs; ++e) {
        for (int i = 0; i < PrefetchAccount::kEpochTokens; ++i) {
            const bool on = a.active();
            if (i == 0) {
                ++(on ? on_epochs : off_epochs);
            }
            a.token_time(on ? on_seconds : off_seconds);
        }
    }
    EXPECT_EQ(on_epochs, PrefetchAccount::kTrialEpochs / 2);
    EXPECT_EQ(off_epochs, PrefetchAccount::kTrialEpochs / 2);
    return a;
}
}  // namespace

TEST(PrefetchAccount, AutoKeepsPredictionWhenItsTokensWereFaster) {
    const PrefetchAccount a = trial(0.010, 0.012);
    EXPECT_TRUE(a.active());
    EXPECT_EQ(a.state().rfind("on (auto: 10.0 ms/token with prediction, 12.0 without", 0), 0u) << a.state();
}

TEST(PrefetchAccount, AutoDropsPredictionWhenItsTokensWereSlower) {
    const PrefetchAccount a = trial(0.020, 0.014);
    EXPECT_FALSE(a.active());
    EXPECT_EQ(a.state().rfind("off (auto: 20.0 ms/token with prediction, 14.0 without", 0), 0u) << a.state();
}

TEST(PrefetchAccount, ModesParseAndBadOnesAreNamed) {
    EXPECT_EQ(parse_prefetch_mode("auto"), PrefetchMode::automatic);
    EXPECT_EQ(parse_prefetch_mode("on"), PrefetchMode::on);
    EXPECT_EQ(parse_prefetch_mode("off"), PrefetchMode::off);
    try {
        parse_prefetch_mode("sometimes");
        FAIL() << "accepted a bad mode";
    } catch (const Error & e) {
        EXPECT_NE(std::string(e.what()).find("sometimes"), std::string::npos);
    }
}

TEST(ExpertActivity, CellsShowResidencyRecentUseAndFreshReads) {
    // 2 layers x 4 experts. Batch 1: layer 0 reads and uses 0 and 1. Batch 2: layer 0 uses 1
    // again (a hit); layer 1 reads 2. Batches 3-4: nothing. Resident: (0,0), (0,1), (1,2), (1,3).
    ExpertActivity a(2, 4);
    a.next_batch();
    a.read(0, 0), a.used(0, 0), a.read(0, 1), a.used(0, 1);
    a.next_batch();
    a.used(0, 1), a.read(1, 2), a.used(1, 2);
    auto resident = [](size_t l, uint32_t e) { return (l == 0 && e < 2) || (l == 1 && e >= 2); };
    // Now (batch 2), reads within the last 2 batches show as just read.
    EXPECT_EQ(a.cells(resident, 16, 2), (std::vector<std::string>{"3300", "0031"}));
    a.next_batch();
    a.next_batch();
    // Batch 4: no fresh reads; used within the last 2 batches: none; within 4: all but (1,3).
    EXPECT_EQ(a.cells(resident, 2, 2), (std::vector<std::string>{"1100", "0011"}));
    EXPECT_EQ(a.cells(resident, 4, 2), (std::vector<std::string>{"2200", "0021"}));
    EXPECT_EQ(a.batches(), 4u);
    // An expert read lately but evicted since still shows as just read.
    EXPECT_EQ(a.cells([](size_t, uint32_t) { return false; }, 16, 3), (std::vector<std::string>{"0000", "0030"}));
}
