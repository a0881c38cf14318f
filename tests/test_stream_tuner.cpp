// The stream tuner: how many requests generate at once, from the share of decode-step time spent
// waiting on expert reads. The shares fed here are the ones epq bench --streams measured on the
// 30B preset under 8 GiB (see stream_tuner.h); the expected levels follow from the rule stated there.
#include "sched/stream_tuner.h"

#include <gtest/gtest.h>

using namespace epq;

namespace {

// Feeds one window of `seconds` generating with `share` of it waiting on reads; returns the level.
struct Feed {
    StreamTuner & t;
    double busy = 0, wait = 0;
    int window(double share, double seconds = 5.0) {
        busy += seconds;
        wait += share * seconds;
        return t.observe(busy, wait);
    }
};

// Starting at the arena's figure instead of one (StreamTunerOptions::start_streams).
StreamTunerOptions from(int streams) {
    StreamTunerOptions o;
    o.start_streams = streams;
    return o;
}

}  // namespace

TEST(StreamTuner, StartsAtOneAndRisesToWhatTheArenaFitsWhileStepsAreCompute) {
    StreamTuner t(4);
    Feed f{t};
    EXPECT_EQ(t.observe(0, 0), 1);
    EXPECT_EQ(f.window(0.09), 2);  // 35B preset: 9% waiting at one stream
    EXPECT_EQ(f.window(0.01), 3);
    EXPECT_EQ(f.window(0.00), 4);
    for (double share : {0.04, 0.20, 0.45, 0.1}) {  // at the arena's figure; noisier windows hold it
        EXPECT_EQ(f.window(share), 4) << share;
    }
    EXPECT_EQ(t.status().raised, 3u);
    EXPECT_EQ(t.status().lowered, 0u);
    EXPECT_NEAR(t.status().last_share, 0.1, 1e-9);
    EXPECT_EQ(StreamTuner(4, from(9)).status().streams, 4);
}

TEST(StreamTuner, ReadBoundStepsSettleOnFewerStreams) {
    StreamTuner u(2);  // flat routing from the start: one stream waits a third of the time, and stays one
    Feed e{u};
    u.observe(0, 0);
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(e.window(0.32), 1) << i;
    }

    StreamTuner t(2, from(2));
    Feed f{t};
    t.observe(0, 0);
    EXPECT_EQ(f.window(0.65), 1);  // flat routing, two streams: reads dominate
    EXPECT_EQ(t.status().lowered, 1u);
    EXPECT_NE(t.status().last_change.find("2 -> 1: reads took 65%"), std::string::npos) << t.status().last_change;
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(f.window(0.32), 1) << i;  // one stream: a third waiting holds there
    }
    EXPECT_EQ(t.status().raised, 0u);

    StreamTuner deep(8, from(8));  // every level read-bound: one stream fewer per window, down to one
    Feed g{deep};
    deep.observe(0, 0);
    for (int want = 7; want >= 1; --want) {
        EXPECT_EQ(g.window(0.9), want);
    }
    EXPECT_EQ(g.window(0.9), 1);
}

TEST(StreamTuner, ALevelItLeftIsTriedAgainAfterWaitsThatDouble) {
    StreamTuner t(2, from(2));
    Feed f{t};
    t.observe(0, 0);
    // A workload whose one stream waits little but whose two streams wait most: the tuner tries
    // two again after 1, then 2, then 4 windows at one.
    std::vector<int> levels;
    for (int i = 0; i < 14; ++i) {
        const int now = t.status().streams;
        levels.push_back(f.window(now == 2 ? 0.7 : 0.1));
    }
    EXPECT_EQ(levels, (std::vector<int>{1, 2, 1, 1, 2, 1, 1, 1, 1, 2, 1, 1, 1, 1}));
    EXPECT_EQ(t.status().lowered, 4u);
    EXPECT_EQ(t.status().raised, 3u);
}

TEST(StreamTuner, ARaiseThatHoldsResetsTheWait) {
    StreamTuner t(3, from(3));
    Feed f{t};
    t.observe(0, 0);
    EXPECT_EQ(f.window(0.8), 2);  // lowered: wait 1 window
    EXPECT_EQ(f.window(0.1), 3);  // raised
    EXPECT_EQ(f.window(0.8), 2);  // lowered again: wait 2 windows
    EXPECT_EQ(f.window(0.1), 2);
    EXPECT_EQ(f.window(0.1), 3);
    EXPECT_EQ(f.window(0.3), 3);  // that level held a window: the wait goes back to 1
    EXPECT_EQ(f.window(0.8), 2);
    EXPECT_EQ(f.window(0.1), 3);
}

TEST(StreamTuner, DecidesOnlyOnWholeWindowsOfGeneration) {
    StreamTuner t(2, from(2));
    t.observe(100, 10);                // the totals before the tuner started do not count
    EXPECT_EQ(t.observe(104, 14), 2);  // 4 s generating, all of it waiting: not a window yet
    EXPECT_LT(t.status().last_share, 0);
    EXPECT_EQ(t.observe(104, 14), 2);      // idle: the busy total does not move, nothing is decided
    EXPECT_EQ(t.observe(105.5, 14.2), 1);  // 5.5 s, 4.2 s waiting
    EXPECT_NEAR(t.status().last_share, 4.2 / 5.5, 1e-9);
    EXPECT_EQ(t.observe(110, 14.2), 1);  // a new window starts at the decision: 4.5 s so far
    EXPECT_EQ(t.status().raised, 0u);
}
