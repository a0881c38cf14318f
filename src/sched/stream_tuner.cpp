#include "sched/stream_tuner.h"

#include <algorithm>
#include <cstdio>

namespace epq {

namespace {

std::string share_text(double share, double seconds, double rate, int before, int after) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%d -> %d: reads took %.0f%% of the last %.1f s of decode steps (%.2f tok/s)",
                  before, after, share * 100.0, seconds, rate);
    return buf;
}

std::string rate_text(double rate, double below, int before, int after) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "%d -> %d: decode steps gave %.2f tok/s, against %.2f with %d generating", before,
                  after, rate, below, after);
    return buf;
}

}  // namespace

StreamTuner::StreamTuner(int max_streams, StreamTunerOptions o) : o_(o) {
    s_.max_streams = std::max(1, max_streams);
    s_.streams = std::clamp(o_.start_streams, 1, s_.max_streams);
    rate_.assign(static_cast<size_t>(s_.max_streams) + 1, -1.0);
}

int StreamTuner::observe(const DecodeTotals & t) {
    if (!started_) {
        started_ = true;
        at0_ = t;
        return s_.streams;
    }
    const double window = t.seconds - at0_.seconds;
    if (window < o_.window_seconds) {
        return s_.streams;
    }
    const double share = std::clamp((t.read_wait_seconds - at0_.read_wait_seconds) / window, 0.0, 1.0);
    const double rate = std::max(0.0, t.tokens - at0_.tokens) / window;
    at0_ = t;
    s_.last_share = share;
    s_.last_rate = rate;
    const int before = s_.streams;
    rate_[static_cast<size_t>(before)] = rate;
    const double below = before > 1 ? rate_[static_cast<size_t>(before - 1)] : -1.0;
    hold_left_ = std::max(0, hold_left_ - 1);
    const bool read_bound = share > o_.lower_above;
    if (before > 1 && (read_bound || rate < below)) {
        --s_.streams;
        ++s_.lowered;
        hold_left_ = hold_;
        hold_ = std::min(hold_ * 2, o_.max_hold_windows);
        s_.last_change = read_bound ? share_text(share, window, rate, before, s_.streams)
                                    : rate_text(rate, below, before, s_.streams);
    } else if (share < o_.raise_below && s_.streams < s_.max_streams && hold_left_ == 0) {
        ++s_.streams;
        ++s_.raised;
        probing_ = true;
        s_.last_change = share_text(share, window, rate, before, s_.streams);
        return s_.streams;
    }
    if (probing_ && s_.streams >= before) {
        hold_ = 1;  // the level reached by the last raise held for a window: wait less next time
    }
    probing_ = false;
    return s_.streams;
}

}  // namespace epq
