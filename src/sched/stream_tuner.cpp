#include "sched/stream_tuner.h"

#include <algorithm>
#include <cstdio>

namespace epq {

namespace {

std::string window_text(double share, double seconds, int before, int after) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%d -> %d: reads took %.0f%% of the last %.1f s of decode steps", before, after,
                  share * 100.0, seconds);
    return buf;
}

}  // namespace

StreamTuner::StreamTuner(int max_streams, StreamTunerOptions o) : o_(o) {
    s_.max_streams = std::max(1, max_streams);
    s_.streams = std::clamp(o_.start_streams, 1, s_.max_streams);
}

int StreamTuner::observe(double decode_seconds, double read_wait_seconds) {
    if (!started_) {
        started_ = true;
        decode0_ = decode_seconds;
        wait0_ = read_wait_seconds;
        return s_.streams;
    }
    const double window = decode_seconds - decode0_;
    if (window < o_.window_seconds) {
        return s_.streams;
    }
    const double share = std::clamp((read_wait_seconds - wait0_) / window, 0.0, 1.0);
    decode0_ = decode_seconds;
    wait0_ = read_wait_seconds;
    s_.last_share = share;
    hold_left_ = std::max(0, hold_left_ - 1);
    const int before = s_.streams;
    if (share > o_.lower_above && s_.streams > 1) {
        --s_.streams;
        ++s_.lowered;
        hold_left_ = hold_;
        hold_ = std::min(hold_ * 2, o_.max_hold_windows);
        s_.last_change = window_text(share, window, before, s_.streams);
    } else if (share < o_.raise_below && s_.streams < s_.max_streams && hold_left_ == 0) {
        ++s_.streams;
        ++s_.raised;
        probing_ = true;
        s_.last_change = window_text(share, window, before, s_.streams);
        return s_.streams;
    }
    if (probing_ && s_.streams >= before) {
        hold_ = 1;  // the level reached by the last raise held for a window: wait less next time
    }
    probing_ = false;
    return s_.streams;
}

}  // namespace epq
