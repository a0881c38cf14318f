// Read-ahead: expert reads started before a layer asks for them, so that the disk works while
// the CPU computes. In decode, the next layer's router applied to this layer's input predicts
// what it will select (RouterPredictor), and PrefetchAccount settles each guess against the real
// selection and switches prediction off where it does not pay. In a prompt ubatch, the next
// layer's experts that are not resident are read while this layer computes. Either way the next
// layer takes over the reads of the experts it selects as they are, in flight or landed; in
// decode, the reads of guesses it did not select land on their own, and nothing waits for them
// unless their slots are needed.
#pragma once

#include "arena/prefetch_account.h"
#include "backend/expert_store.h"
#include "backend/pager_telemetry.h"
#include "backend/router_predictor.h"

#include "ggml.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace epq {

class ReadAhead {
public:
    ReadAhead(PrefetchMode mode, const std::string & model_path, const ExpertIndex & index, ExpertStore & store,
              PagerTelemetry & telemetry);
    // Unpins what is still read ahead (the store waits for the reads in flight).
    ~ReadAhead();
    ReadAhead(const ReadAhead &) = delete;
    ReadAhead & operator=(const ReadAhead &) = delete;

    // Layer `li` starts a batch (its first chain): at layer 0 a decode token boundary, whose
    // whole-token times the auto prefetch trial compares.
    void layer_starts(size_t li, bool decode);
    // Whether to guess layer `li` + 1's experts during this decode step of layer `li`.
    bool predicts(size_t li, bool decode) const;
    // Whether to read ahead for layer `li` + 1 during this prompt ubatch of layer `li`.
    bool reads_ahead(size_t li, bool decode) const;
    // Decode: guesses layer `li` + 1's experts from this layer's input `x` and reads them.
    void predict_next(size_t li, const ggml_tensor * x);
    // Prompt ubatches: while layer `li` computes, reads the next layer's experts that are not
    // resident, as far as unpinned slots allow. `k`: experts each token selects.
    void read_ahead_for_prompt(size_t li, const ggml_tensor * x, int64_t k);
    // Moves the reads started ahead for layer `li` into `adopted`, in flight or landed: for a
    // prompt ubatch all of them, in decode those of the experts in `selected` (the guess is
    // scored against them; the other reads land on their own). False when none are adopted.
    bool adopt(size_t li, const std::vector<int32_t> & selected, bool decode, std::vector<ExpertUse> & adopted);
    // Lands the reads of the last guess and, in decode, scores it against `selected` (layer `li`).
    void settle(size_t li, const std::vector<int32_t> & selected, bool decode);
    // Guessed reads that no layer selected: those landed are kept resident and unpinned; with
    // `wait`, those in flight are waited for first. True when a slot was unpinned.
    bool land_strays(bool wait);
    // The read still landing in slot `ref` for a guess no layer selected yet, or null.
    std::shared_ptr<Ticket> stray_read(SlotRef ref) const;

    // For the statistics.
    const PrefetchAccount & account() const { return account_; }

private:
    // The guess for the next layer and its speculative reads, settled when that layer runs.
    struct Pending {
        bool valid = false;
        bool prefill = false;  // read ahead for a prompt ubatch: adopted by the next layer, not settled
        size_t li = 0;
        std::vector<uint32_t> guessed;
        std::vector<uint64_t> read_bytes;
        std::vector<ExpertUse> reads;
    };
    // A guessed read its layer did not select, still pinned while it lands.
    struct Stray {
        size_t li = 0;
        ExpertUse use;
    };
    std::vector<uint32_t> prompt_wants(const LayerLayout & next, const ggml_tensor * x, int64_t k) const;
    void drain() noexcept;

    ExpertStore & store_;
    PagerTelemetry & telemetry_;
    PrefetchMode mode_;
    std::unique_ptr<RouterPredictor> predictor_;
    PrefetchAccount account_;
    Pending pending_;
    std::vector<Stray> strays_;
    std::chrono::steady_clock::time_point token_start_;
    bool token_clock_running_ = false;
};

}  // namespace epq
