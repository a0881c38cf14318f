#include "backend/read_ahead.h"

#include "util/error.h"

#include <algorithm>
#include <chrono>

namespace epq {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The bytes one expert of `layer` occupies in the file (what a read of it moves).
uint64_t file_bytes_of_expert(const LayerLayout & layer) {
    uint64_t n = 0;
    for (const auto & m : layer.matrices) {
        n += m.stride;
    }
    return n;
}

}  // namespace

ReadAhead::ReadAhead(PrefetchMode mode, const std::string & model_path, const ExpertIndex & index, ExpertStore & store,
                     PagerTelemetry & telemetry)
    : store_(store),
      telemetry_(telemetry),
      mode_(mode),
      account_(mode, store.layout().layers.size(), 64ull << 20, 0.3, 0.8) {
    if (mode != PrefetchMode::off) {
        predictor_ = std::make_unique<RouterPredictor>(model_path, index);
        if (!predictor_->available()) {
            account_ = PrefetchAccount(PrefetchMode::off, store.layout().layers.size());
            account_.set_state("off (" + predictor_->why() + ")");
        } else if (store.plan().holds_everything) {
            // Once read, no expert is missed: a guess would only cost its router (5.9 ms per
            // token on the 30B shape with the scalar predictor of before). Prompt ubatches still
            // read ahead while the arena fills.
            account_ = PrefetchAccount(PrefetchMode::off, store.layout().layers.size());
            account_.set_state("off (the arena holds every expert)");
        }
    }
    telemetry_.counters().prefetch_mode = mode;
}

ReadAhead::~ReadAhead() {
    drain();
}

void ReadAhead::layer_starts(size_t li, bool decode) {
    if (li != 0) {
        return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (decode && token_clock_running_) {
        account_.token_time(std::chrono::duration<double>(now - token_start_).count());
    }
    token_start_ = now;
    token_clock_running_ = decode;
}

bool ReadAhead::predicts(size_t li, bool decode) const {
    return decode && predictor_ && account_.active() && li + 1 < store_.layout().layers.size();
}

bool ReadAhead::reads_ahead(size_t li, bool decode) const {
    return !decode && mode_ != PrefetchMode::off && li + 1 < store_.layout().layers.size();
}

void ReadAhead::predict_next(size_t li, const ggml_tensor * x) {
    land_strays(false);
    const LayerLayout & next = store_.layout().layers[li + 1];
    SlotArena & arena = store_.arena();
    Pending p;
    p.li = li + 1;
    p.guessed = predictor_->predict(next.layer, static_cast<const float *>(x->data), x->ne[0]);
    telemetry_.record_guess(static_cast<uint32_t>(next.layer), p.guessed);
    const uint64_t expert_bytes = file_bytes_of_expert(next);
    for (uint32_t e : p.guessed) {
        auto a = arena.acquire({static_cast<uint32_t>(next.layer), e}, next.size_class);
        if (!a) {
            p.read_bytes.push_back(0);
            continue;
        }
        if (a->hit) {
            arena.unpin(a->ref);  // already resident: the lookup only refreshed it
            p.read_bytes.push_back(0);
            continue;
        }
        p.reads.push_back({static_cast<int32_t>(e), a->ref, store_.load(next, static_cast<int32_t>(e), a->ref, true)});
        ++telemetry_.counters().speculative_reads;
        telemetry_.counters().speculative_bytes += expert_bytes;
        p.read_bytes.push_back(expert_bytes);
    }
    p.valid = true;
    pending_ = std::move(p);
}

// Which of the next layer's experts the ubatch will select: the union of the next layer's router
// applied to each row of this layer's input (the residual stream moves little between layers),
// where the model's routers allow it. That costs a router per row (0.27 ms on the 35B shape, 2
// threads), so a ubatch of more than kPredictRows rows reads every expert it does not hold
// instead: it selects most of them. Measured on the 35B shape with realistic routing under an
// 8 GiB cap: a 64-token ubatch used only 37% of a whole next layer read ahead (all wasted reads
// are also repacked on the read threads), a 512-token one 63%.
std::vector<uint32_t> ReadAhead::prompt_wants(const LayerLayout & next, const ggml_tensor * x, int64_t k) const {
    constexpr int64_t kPredictRows = 128;
    const int64_t n_tok = x->ne[2];
    const uint32_t n_expert = store_.n_expert();
    std::vector<uint32_t> want;
    const bool predict = predictor_ && predictor_->available() && n_tok <= kPredictRows;
    if (!predict && n_tok * k >= 2 * static_cast<int64_t>(n_expert)) {
        for (uint32_t e = 0; e < n_expert; ++e) {
            want.push_back(e);
        }
    } else if (predict) {
        std::vector<char> seen(n_expert, 0);
        for (int64_t t = 0; t < n_tok; ++t) {
            const float * row = reinterpret_cast<const float *>(static_cast<const char *>(x->data) + t * x->nb[2]);
            for (uint32_t e : predictor_->predict(next.layer, row, x->ne[0])) {
                if (!seen[e]) {
                    seen[e] = 1;
                    want.push_back(e);
                }
            }
        }
    }
    return want;
}

void ReadAhead::read_ahead_for_prompt(size_t li, const ggml_tensor * x, int64_t k) {
    const LayerLayout & next = store_.layout().layers[li + 1];
    SlotArena & arena = store_.arena();
    const std::vector<uint32_t> want = prompt_wants(next, x, k);
    // At most half of the next layer's size class, so a small arena is not flushed by guesses.
    const size_t cap = store_.plan().pools[next.size_class].n_slots / 2;
    const uint64_t expert_bytes = file_bytes_of_expert(next);
    Pending p;
    p.prefill = true;
    p.li = li + 1;
    for (uint32_t e : want) {
        if (p.reads.size() >= cap) {
            break;
        }
        const ExpertKey key{static_cast<uint32_t>(next.layer), e};
        if (arena.find(key)) {
            continue;  // resident: the layer pins it itself
        }
        auto a = arena.acquire(key, next.size_class);
        if (!a) {
            break;  // every slot is pinned
        }
        p.reads.push_back({static_cast<int32_t>(e), a->ref, store_.load(next, static_cast<int32_t>(e), a->ref, true)});
        ++telemetry_.counters().speculative_reads;
        ++telemetry_.counters().readahead_reads;
        telemetry_.counters().speculative_bytes += expert_bytes;
    }
    p.valid = true;
    pending_ = std::move(p);
}

bool ReadAhead::adopt(size_t li, const std::vector<int32_t> & selected, bool decode, std::vector<ExpertUse> & adopted) {
    if (!pending_.valid || pending_.li != li || (!pending_.prefill && !decode)) {
        return false;
    }
    Pending p = std::move(pending_);
    pending_ = Pending{};
    if (p.prefill) {
        adopted = std::move(p.reads);
        return true;
    }
    account_.settle(li, p.guessed, p.read_bytes, std::vector<uint32_t>(selected.begin(), selected.end()));
    for (ExpertUse & u : p.reads) {
        if (std::find(selected.begin(), selected.end(), u.expert) != selected.end()) {
            adopted.push_back(std::move(u));
        } else {
            strays_.push_back({li, std::move(u)});
        }
    }
    land_strays(false);
    return !adopted.empty();
}

std::shared_ptr<Ticket> ReadAhead::stray_read(SlotRef ref) const {
    for (const Stray & s : strays_) {
        if (s.use.ref.pool == ref.pool && s.use.ref.slot == ref.slot) {
            return s.use.ticket;
        }
    }
    return nullptr;
}

bool ReadAhead::land_strays(bool wait) {
    std::vector<ExpertUse> landed;
    std::vector<Stray> rest;
    for (Stray & s : strays_) {
        if (!wait && !s.use.ticket->done()) {
            rest.push_back(std::move(s));
            continue;
        }
        try {
            s.use.ticket->wait();
            if (!store_.arena().is_ready(s.use.ref)) {
                store_.loaded(store_.layout().layers[s.li], s.use.ref);
            }
        } catch (const Error &) {
            // A guess nobody used failed to read: release() forgets its slot, and a layer that
            // selects the expert reads it again (and reports the error if that fails too).
        }
        landed.push_back(std::move(s.use));
    }
    strays_ = std::move(rest);
    const bool any = !landed.empty();
    store_.release(landed);
    return any;
}

void ReadAhead::settle(size_t li, const std::vector<int32_t> & selected, bool decode) {
    if (!pending_.valid) {
        return;
    }
    Pending p = std::move(pending_);
    pending_ = Pending{};
    const LayerLayout & layer = store_.layout().layers[p.li];
    const auto t0 = std::chrono::steady_clock::now();
    try {
        for (auto & u : p.reads) {
            u.ticket->wait();
            store_.loaded(layer, u.ref);
        }
    } catch (...) {
        store_.release(p.reads);
        throw;
    }
    store_.release(p.reads);
    telemetry_.counters().prefetch_wait_seconds += since(t0);
    if (decode && p.li == li) {
        account_.settle(li, p.guessed, p.read_bytes, std::vector<uint32_t>(selected.begin(), selected.end()));
    }
}

// The pager is going away: release() waits for every read still in flight.
void ReadAhead::drain() noexcept {
    for (Stray & s : strays_) {
        pending_.reads.push_back(std::move(s.use));
    }
    strays_.clear();
    store_.release(pending_.reads);
    pending_ = Pending{};
}

}  // namespace epq
