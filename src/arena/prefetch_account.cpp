#include "arena/prefetch_account.h"

#include "util/error.h"

#include <algorithm>
#include <cstdio>

namespace epq {

PrefetchMode parse_prefetch_mode(const std::string & s) {
    if (s == "off") {
        return PrefetchMode::off;
    }
    if (s == "on") {
        return PrefetchMode::on;
    }
    if (s == "auto") {
        return PrefetchMode::automatic;
    }
    throw Error("unknown prefetch mode '" + s + "': use auto, on or off");
}

const char * prefetch_mode_name(PrefetchMode m) {
    switch (m) {
        case PrefetchMode::off: return "off";
        case PrefetchMode::on: return "on";
        default: return "auto";
    }
}

namespace {
double ratio(uint64_t a, uint64_t b) {
    return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}
}  // namespace

double PredictionCounts::precision() const {
    return ratio(correct, guessed);
}
double PredictionCounts::recall() const {
    return ratio(correct, selected);
}
double PredictionCounts::useful_fraction() const {
    return ratio(useful_bytes, spec_bytes);
}

PrefetchAccount::PrefetchAccount(PrefetchMode mode, size_t n_layers, uint64_t min_evidence_bytes, double min_useful,
                                 double sure_useful)
    : mode_(mode),
      active_(mode != PrefetchMode::off),
      min_evidence_bytes_(min_evidence_bytes),
      min_useful_(min_useful),
      sure_useful_(sure_useful),
      layers_(n_layers),
      in_trial_(mode == PrefetchMode::automatic) {
    state_ = mode == PrefetchMode::off  ? "off (--prefetch off)"
             : mode == PrefetchMode::on ? "on (--prefetch on: never switched off)"
                                        : "auto: trial (decode epochs with and without prediction, not finished)";
}

bool PrefetchAccount::trial_on() const {
    // on off off on on off off on: balanced against a steady trend such as a warming arena, and
    // on first, so that the speculative reads that can settle the trial early start at once.
    static constexpr bool kOn[kTrialEpochs] = {true, false, false, true, true, false, false, true};
    return kOn[(trial_tokens_ / kEpochTokens) % kTrialEpochs];
}

bool PrefetchAccount::active() const {
    return active_ && (!in_trial_ || trial_on());
}

void PrefetchAccount::token_time(double seconds) {
    if (!in_trial_ || !active_) {
        return;
    }
    const int on = trial_on() ? 1 : 0;
    time_[on] += seconds;
    ++tokens_[on];
    if (++trial_tokens_ < kEpochTokens * kTrialEpochs) {
        return;
    }
    in_trial_ = false;
    const double ms_off = 1000.0 * time_[0] / tokens_[0], ms_on = 1000.0 * time_[1] / tokens_[1];
    active_ = ms_on < ms_off;
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s (auto: %.1f ms/token with prediction, %.1f without, over %d + %d tokens)",
                  active_ ? "on" : "off", ms_on, ms_off, tokens_[1], tokens_[0]);
    state_ = buf;
}

void PrefetchAccount::settle(size_t li, const std::vector<uint32_t> & guessed, const std::vector<uint64_t> & read_bytes,
                             const std::vector<uint32_t> & selected) {
    PredictionCounts d;
    d.predictions = 1;
    d.guessed = guessed.size();
    d.selected = selected.size();
    for (size_t i = 0; i < guessed.size(); ++i) {
        const bool hit = std::find(selected.begin(), selected.end(), guessed[i]) != selected.end();
        d.correct += hit;
        if (read_bytes[i] > 0) {
            ++d.spec_reads;
            d.spec_bytes += read_bytes[i];
            if (hit) {
                ++d.useful_reads;
                d.useful_bytes += read_bytes[i];
            } else {
                d.wasted_bytes += read_bytes[i];
            }
        }
    }
    for (PredictionCounts * c : {&total_, &layers_.at(li)}) {
        c->predictions += d.predictions;
        c->guessed += d.guessed;
        c->selected += d.selected;
        c->correct += d.correct;
        c->spec_reads += d.spec_reads;
        c->spec_bytes += d.spec_bytes;
        c->useful_reads += d.useful_reads;
        c->useful_bytes += d.useful_bytes;
        c->wasted_bytes += d.wasted_bytes;
    }
    decide();
}

void PrefetchAccount::decide() {
    if (mode_ != PrefetchMode::automatic || !active_ || total_.spec_bytes < min_evidence_bytes_ ||
        total_.spec_reads < 64) {
        return;
    }
    if (total_.useful_fraction() < min_useful_) {
        active_ = false;
        in_trial_ = false;
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "off (auto: switched off after %llu speculative reads, only %.0f%% of their bytes were used; "
                      "threshold %.0f%%)",
                      static_cast<unsigned long long>(total_.spec_reads), 100.0 * total_.useful_fraction(),
                      100.0 * min_useful_);
        state_ = buf;
    } else if (in_trial_ && total_.useful_fraction() >= sure_useful_) {
        in_trial_ = false;
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "on (auto: %.0f%% of the bytes of %llu speculative reads were used, reads the layers would "
                      "have missed; threshold %.0f%%)",
                      100.0 * total_.useful_fraction(), static_cast<unsigned long long>(total_.spec_reads),
                      100.0 * sure_useful_);
        state_ = buf;
    }
}

}  // namespace epq
