// The engine behind `epq serve`: N slots over one llama.cpp context (one sequence each, one
// unified KV cache) and a loop that runs continuous batching. Each step is one llama_decode of
// one batch that holds every generating slot's next token plus prompt chunks of the slots still
// prefilling (up to n_batch tokens), so the pager sees one graph per step and reads each expert
// the step needs once for all slots. A slot keeps its KV cache after a request; a new request
// goes to the idle slot whose cached tokens share the longest prefix with its prompt, and only
// the rest is prefilled.
//
// No llama.cpp types in this header: the HTTP layer talks to the model only through it.
#pragma once

#include "backend/pager_snapshot.h"
#include "engine/completion.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace epq {

class LlamaSession;
class Pager;

struct EngineOptions {
    int n_parallel = 1;
    uint32_t n_ctx_slot = 2048;  // tokens each slot may hold
    uint32_t n_batch = 512;
    size_t max_queue = 64;  // requests waiting for a slot; more are refused
};

// What /metrics, /props and /slots show (one consistent snapshot).
struct EngineCounters {
    uint64_t prompt_tokens_total = 0;  // prefilled (cache hits not counted)
    double prompt_seconds_total = 0.0;
    uint64_t tokens_predicted_total = 0;
    double tokens_predicted_seconds_total = 0.0;
    uint64_t n_decode_total = 0;      // llama_decode calls
    uint64_t n_busy_slots_total = 0;  // summed over decode calls
    uint64_t n_tokens_max = 0;        // most tokens one slot has held
    uint64_t cached_prompt_tokens_total = 0;
    uint64_t requests_total = 0;
    uint64_t requests_cancelled = 0;
    int requests_processing = 0;
    int requests_deferred = 0;
};

// The serve page's heat map: what the arena holds and what the pager did lately.
struct PagerView {
    std::vector<uint32_t> layers;  // the MoE layers' numbers, in order
    uint32_t n_expert = 0;
    std::vector<std::string> cells;  // per layer, one character per expert (ExpertActivity::cells)
    uint64_t resident_experts = 0;
    uint64_t batches = 0;  // batches the pager has seen when this was taken
    // What taking them has cost the engine's thread so far (it is the one that runs the model).
    uint64_t views_taken = 0;
    double view_seconds = 0.0;
};

struct SlotInfo {
    int id = 0;
    bool busy = false;
    bool prefilling = false;
    int32_t n_cached = 0;     // tokens in the slot's KV cache
    int32_t n_prompt = 0;     // current/last request's prompt
    int32_t n_generated = 0;  // current/last request's tokens so far
    uint64_t request = 0;     // current/last request's id (0: none yet)
};

struct ChatMessage {
    std::string role;
    std::string content;
};

// A request the engine refuses outright (HTTP 400/503): the server turns it into an error.
struct RequestRejected {
    int status = 400;
    std::string type;  // OpenAI error type, e.g. invalid_request_error, exceed_context_size_error
    std::string message;
    int32_t n_prompt_tokens = 0;
    int32_t n_ctx = 0;
};

class ServingEngine {
public:
    // `pager` may be null (--no-pager). Both must outlive the engine.
    ServingEngine(LlamaSession & session, Pager * pager, const EngineOptions & opts);
    ~ServingEngine();
    ServingEngine(const ServingEngine &) = delete;
    ServingEngine & operator=(const ServingEngine &) = delete;

    // Queues a request; its events arrive on the returned channel. Throws RequestRejected.
    std::shared_ptr<CompletionChannel> submit(CompletionRequest req);

    // Ends every queued and running request with an error event and stops the loop.
    void shutdown(const std::string & reason);

    // Thread-safe helpers over the model (the vocabulary and template are read-only).
    std::vector<int32_t> tokenize(const std::string & text, bool add_special, bool parse_special) const;
    std::string piece(int32_t token) const;
    std::string detokenize(const std::vector<int32_t> & tokens) const;
    // The conversation rendered with the GGUF's chat template (ChatML when it has none), ready
    // for the assistant's turn. Throws RequestRejected when llama.cpp cannot apply it.
    std::string apply_chat_template(const std::vector<ChatMessage> & messages) const;
    const std::string & chat_template() const { return chat_template_; }
    int32_t n_vocab() const;
    int32_t n_ctx_train() const;
    int32_t n_embd() const;
    uint64_t n_params() const;
    uint64_t model_size() const;
    bool add_bos() const;

    const EngineOptions & options() const { return opts_; }
    EngineCounters counters() const;
    // The pager's statistics as of the last batch; empty without a pager (--no-pager).
    std::optional<PagerSnapshot> pager_snapshot() const;
    // The latest heat map, and a request for a fresh one: the loop takes it between batches (or
    // at once when idle), so only a watcher costs anything. Empty until the first is taken.
    PagerView pager_view();
    std::vector<SlotInfo> slots() const;

private:
    struct Slot;
    struct Task;
    void loop();
    void step();  // one batch
    void admit_locked();
    void finish(Slot & s, const std::string & reason);
    void fail(Slot & s, const std::string & message);
    void read_pager_snapshot_locked();
    void read_pager_view_locked();  // when one was asked for

    LlamaSession & session_;
    Pager * pager_;
    EngineOptions opts_;
    std::string chat_template_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::unique_ptr<Task>> queue_;
    std::vector<std::unique_ptr<Slot>> slots_;
    EngineCounters counters_;
    std::optional<PagerSnapshot> pager_snapshot_;
    PagerView pager_view_;
    bool view_wanted_ = false;
    uint64_t next_id_ = 1;
    bool stopping_ = false;
    std::string stop_reason_;
    std::thread thread_;
};

}  // namespace epq
