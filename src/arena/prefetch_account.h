// Bookkeeping for speculative expert reads: how well a predictor guessed, what its reads cost,
// and whether it should keep running. Pure policy: no I/O, no llama.cpp.
//
// A predictor guesses the experts a layer will select before the layer runs; the guesses that
// are not resident are read early. When the layer runs, its real selection settles the guess:
// precision = right guesses / guesses, recall = right guesses / selected. Speculative bytes
// read for experts the layer did not select are wasted: they cost disk time and arena space.
// Whether it pays depends on the machine (is the disk idle while the CPU computes?) and the
// model (how predictable is routing?), so auto mode measures it: the first decode tokens run
// in epochs with prediction on and off, in the order on-off-off-on (balanced against the
// arena warming up), and prediction stays on only if its epochs were faster per token. It
// also turns off early once enough evidence shows that less than `min_useful` of its
// speculative bytes were used, and ends the trial on once at least `sure_useful` were: those
// reads are misses the layers would have read anyway, only started a layer earlier.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace epq {

enum class PrefetchMode { off, on, automatic };

// "off", "on" or "auto"; throws epq::Error otherwise.
PrefetchMode parse_prefetch_mode(const std::string & s);
const char * prefetch_mode_name(PrefetchMode m);

struct PredictionCounts {
    uint64_t predictions = 0;  // settled guesses (one per layer and token)
    uint64_t guessed = 0;      // experts guessed
    uint64_t selected = 0;     // experts the layers selected
    uint64_t correct = 0;      // guessed and selected
    uint64_t spec_reads = 0;   // guessed experts read early (the others were resident already)
    uint64_t spec_bytes = 0;
    uint64_t useful_reads = 0;  // read early and then selected
    uint64_t useful_bytes = 0;
    uint64_t wasted_bytes = 0;  // read early, not selected
    double precision() const;
    double recall() const;
    double useful_fraction() const;  // useful_bytes / spec_bytes
};

class PrefetchAccount {
public:
    PrefetchAccount(PrefetchMode mode, size_t n_layers, uint64_t min_evidence_bytes = 0, double min_useful = 0.5,
                    double sure_useful = 1.01);  // above 1: the trial never ends on early

    // Whether the next guess should be made (in a trial: whether this epoch is an "on" one).
    bool active() const;
    // Why the predictor is on or off, for the statistics.
    const std::string & state() const { return state_; }
    void set_state(std::string s) { state_ = std::move(s); }

    // One settled guess for layer `li`: the guessed experts, which of them were read early
    // (`read_bytes[i]` > 0) and the experts the layer really selected.
    void settle(size_t li, const std::vector<uint32_t> & guessed, const std::vector<uint64_t> & read_bytes,
                const std::vector<uint32_t> & selected);

    const PredictionCounts & total() const { return total_; }
    const std::vector<PredictionCounts> & per_layer() const { return layers_; }

    // One decode token took `seconds` (wall, the whole model). Drives the auto trial.
    void token_time(double seconds);
    static constexpr int kEpochTokens = 16;
    static constexpr int kTrialEpochs = 8;

private:
    void decide();
    bool trial_on() const;

    PrefetchMode mode_;
    bool active_;
    std::string state_;
    uint64_t min_evidence_bytes_;
    double min_useful_;
    double sure_useful_;
    PredictionCounts total_;
    std::vector<PredictionCounts> layers_;
    bool in_trial_ = false;
    int trial_tokens_ = 0;
    double time_[2] = {0, 0};  // off, on
    int tokens_[2] = {0, 0};
};

}  // namespace epq
