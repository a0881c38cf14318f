// The stream tuner: how many requests generate at once, from the share of decode-step time spent
// waiting on expert reads and the decode-step rate at each level. The shares and rates fed here
// are the ones epq bench --streams measured on the 30B preset under 8 GiB (see stream_tuner.h);
// the expected levels follow from the rule stated there.
#include "sched/stream_tuner.h"

#include <gtest/gtest.h>

using namespace epq;

namespace {

// Feeds one window of `seconds` of decode steps with `share` of it waiting on reads, decoding
// `rate` tokens per second; returns the level. The same rate at every level: only shares decide.
struct Feed {
    StreamTuner & t;
    StreamTuner::DecodeTotals at;
    int window(double share, double seconds = 5.0, double rate = 7.0) {
        at.seconds += seconds;
        at.read_wait_seconds += share * seconds;
        at.tokens += rate * seconds;
        return t.observe(at);
    }
};

int start(StreamTuner & t) {
    return t.observe({});
}

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
    EXPECT_EQ(start(t), 1);
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
    start(u);
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(e.window(0.32), 1) << i;
    }

    StreamTuner t(2, from(2));
    Feed f{t};
    start(t);
    EXPECT_EQ(f.window(0.65), 1);  // flat routing, two streams: reads dominate
    EXPECT_EQ(t.status().lowered, 1u);
    EXPECT_NE(t.status().last_change.find("2 -> 1: reads took 65%"), std::string::npos) << t.status().last_change;
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(f.window(0.32), 1) << i;  // one stream: a third waiting holds there
    }
    EXPECT_EQ(t.status().raised, 0u);

    StreamTuner deep(8, from(8));  // every level read-bound: one stream fewer per window, down to one
    Feed g{deep};
    start(deep);
    for (int want = 7; want >= 1; --want) {
        EXPECT_EQ(g.window(0.9), want);
    }
    EXPECT_EQ(g.window(0.9), 1);
}

TEST(StreamTuner, ALevelItLeftIsTriedAgainAfterWaitsThatDouble) {
    StreamTuner t(2, from(2));
    Feed f{t};
    start(t);
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
    start(t);
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
    t.observe({100, 10, 500});                // the totals before the tuner started do not count
    EXPECT_EQ(t.observe({104, 14, 520}), 2);  // 4 s generating, all of it waiting: not a window yet
    EXPECT_LT(t.status().last_share, 0);
    EXPECT_LT(t.status().last_rate, 0);
    EXPECT_EQ(t.observe({104, 14, 520}), 2);      // idle: the totals do not move, nothing is decided
    EXPECT_EQ(t.observe({105.5, 14.2, 533}), 1);  // 5.5 s, 4.2 s waiting, 33 tokens
    EXPECT_NEAR(t.status().last_share, 4.2 / 5.5, 1e-9);
    EXPECT_NEAR(t.status().last_rate, 33 / 5.5, 1e-9);
    EXPECT_EQ(t.observe({110, 14.2, 560}), 1);  // a new window starts at the decision: 4.5 s so far
    EXPECT_EQ(t.status().raised, 0u);
}

TEST(StreamTuner, AStreamMoreThatDecodesLessIsUndone) {
    // Realistic routing under 8 GiB on two cores: one stream waits 2% of its steps and decodes
    // 7.34 tok/s; two wait 6-13% (below a quarter: the share alone would keep them) and decode
    // 6.98 together. Each try at two is undone after its window; the next comes after 1, 2, then
    // 4 windows at one (counting the one that undid it, as for read-bound levels).
    StreamTuner t(2);
    Feed f{t};
    start(t);
    std::vector<int> levels;
    for (int i = 0; i < 12; ++i) {
        const bool two = t.status().streams == 2;
        levels.push_back(f.window(two ? 0.13 : 0.02, 5.0, two ? 6.98 : 7.34));
    }
    EXPECT_EQ(levels, (std::vector<int>{2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 2, 1}));
    EXPECT_EQ(t.status().lowered, 4u);
    EXPECT_NE(t.status().last_change.find("2 -> 1: decode steps gave 6.98 tok/s, against 7.34 with 1 generating"),
              std::string::npos)
        << t.status().last_change;
    EXPECT_NEAR(t.status().last_rate, 6.98, 1e-9);

    // The 35B preset: more streams decode more (4.4 tok/s at one, 6.9 at four): it climbs and stays.
    StreamTuner u(4);
    Feed g{u};
    start(u);
    const double rate[] = {0, 4.4, 5.6, 6.3, 6.9};
    for (int i = 0; i < 10; ++i) {
        g.window(0.05, 5.0, rate[u.status().streams]);
    }
    EXPECT_EQ(u.status().streams, 4);
    EXPECT_EQ(u.status().lowered, 0u);
    // Later windows at four that fall below the last figure at three (the workload changed) undo
    // the last stream too.
    EXPECT_EQ(g.window(0.05, 5.0, 6.0), 3);
}
