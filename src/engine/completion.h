// One completion as the serving engine sees it: the request (tokens in, limits, sampling,
// stop strings), the events it sends back, and the channel between the HTTP thread that
// waits for them and the engine thread that produces them. No llama.cpp types: the server
// layer builds requests and reads events without touching llama.cpp.
#pragma once

#include "engine/sampling_params.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace epq {

struct CompletionRequest {
    std::vector<int32_t> prompt;
    int32_t n_predict = -1;  // -1: until an end-of-generation token or the slot's context is full
    SamplingParams sampling;
    std::vector<std::string> stop;
    int32_t n_probs = 0;  // top alternatives per token, with logprobs
    bool logprobs = false;
    bool ignore_eos = false;
    // Reuse the longest prefix a slot already holds (llama-server's cache_prompt). Off, the
    // whole prompt is prefilled: the result then does not depend on earlier requests, whose
    // cached keys were computed in batches of other sizes (same math, other rounding).
    bool cache_prompt = true;
};

struct TopLogprob {
    int32_t token = 0;
    std::string piece;
    float logprob = 0.0f;
};

struct TokenLogprob {
    int32_t token = 0;
    std::string piece;
    float logprob = 0.0f;
    std::vector<TopLogprob> top;
};

struct CompletionUsage {
    int32_t n_prompt = 0;     // prompt tokens, cached ones included
    int32_t n_cached = 0;     // of which reused from the slot's cache
    int32_t n_generated = 0;  // tokens sampled (an end-of-generation token included)
    double prompt_ms = 0.0;   // admission to the first sampled token
    double predicted_ms = 0.0;
};

struct CompletionEvent {
    enum class Kind { text, done, error };
    Kind kind = Kind::text;
    std::string text;                    // text: newly released text
    std::vector<TokenLogprob> logprobs;  // text: the tokens behind it (when requested)
    std::string finish_reason;           // done: "stop" or "length"
    CompletionUsage usage;               // done
    int slot = -1;                       // done: the slot that served it
    std::string error;                   // error: message
    int status = 500;                    // error: HTTP status it maps to
};

// Engine -> one waiting HTTP thread. The waiter cancels when its client goes away; the engine
// sees that at its next step and frees the slot.
class CompletionChannel {
public:
    void push(CompletionEvent ev) {
        {
            std::lock_guard<std::mutex> lk(mu_);
            events_.push_back(std::move(ev));
        }
        cv_.notify_one();
    }
    // Waits up to `timeout` for an event; false if none came.
    bool pop(CompletionEvent & out, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lk(mu_);
        if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) {
            return false;
        }
        out = std::move(events_.front());
        events_.pop_front();
        return true;
    }
    void cancel() { cancelled_ = true; }
    bool cancelled() const { return cancelled_; }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<CompletionEvent> events_;
    std::atomic<bool> cancelled_{false};
};

}  // namespace epq
