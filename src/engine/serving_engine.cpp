#include "engine/serving_engine.h"

#include "backend/pager.h"
#include "backend/pager_device.h"
#include "engine/llama_session.h"
#include "engine/text_stream.h"
#include "util/error.h"

#include "llama.h"

#include <algorithm>
#include <cmath>

namespace epq {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

CompletionEvent error_event(const std::string & message, int status) {
    CompletionEvent ev;
    ev.kind = CompletionEvent::Kind::error;
    ev.error = message;
    ev.status = status;
    return ev;
}

struct BatchDeleter {
    void operator()(llama_batch * b) const {
        llama_batch_free(*b);
        delete b;
    }
};

// Keeps the first `keep` tokens of a slot's cache and drops the rest; returns how many were kept.
// A recurrent state cannot be rolled back to an earlier position: there the slot starts over.
// (Sliding-window caches are full-size, see LlamaSession, so every kept key is still there.)
size_t reuse_prefix(llama_memory_t mem, int seq, size_t n_cached, size_t keep) {
    if (keep < n_cached && !llama_memory_seq_rm(mem, seq, static_cast<llama_pos>(keep), -1)) {
        llama_memory_seq_rm(mem, seq, -1, -1);
        keep = 0;
    }
    return keep;
}

}  // namespace

struct ServingEngine::Task {
    uint64_t id = 0;
    CompletionRequest req;
    std::shared_ptr<CompletionChannel> channel;
};

struct ServingEngine::Slot {
    int id = 0;
    std::vector<int32_t> cache;  // tokens whose keys and values are in sequence `id`
    std::unique_ptr<Task> task;  // null when idle
    size_t next_prompt = 0;      // first prompt token not yet decoded
    int32_t n_cached = 0;        // prompt tokens reused from the cache
    int32_t pending = -1;        // sampled, decoded at the next step
    int32_t n_generated = 0;
    int32_t batch_index = -1;  // row of this slot's logits in the current batch
    SamplerChain sampler;
    std::unique_ptr<TextStream> text;
    Clock::time_point t_start, t_first;
    uint64_t last_used = 0;
    SlotInfo info;  // published under the engine mutex
    bool prefilling() const { return task && next_prompt < task->req.prompt.size(); }
};

ServingEngine::ServingEngine(LlamaSession & session, Pager * pager, const EngineOptions & opts)
    : session_(session), pager_(pager), opts_(opts) {
    if (const char * t = llama_model_chat_template(session_.model(), nullptr)) {
        chat_template_ = t;
    }
    for (int i = 0; i < opts_.n_parallel; ++i) {
        auto s = std::make_unique<Slot>();
        s->id = i;
        s->info.id = i;
        slots_.push_back(std::move(s));
    }
    read_pager_snapshot_locked();
    thread_ = std::thread([this] { loop(); });
}

ServingEngine::~ServingEngine() {
    shutdown("the server is shutting down");
    if (thread_.joinable()) {
        thread_.join();
    }
}

std::shared_ptr<CompletionChannel> ServingEngine::submit(CompletionRequest req) {
    if (req.prompt.empty()) {
        throw RequestRejected{400, "invalid_request_error", "the prompt is empty"};
    }
    const int32_t n_vocab_ = n_vocab();
    for (int32_t t : req.prompt) {
        if (t < 0 || t >= n_vocab_) {
            throw RequestRejected{400, "invalid_request_error",
                                  "token id " + std::to_string(t) + " is out of the vocabulary (0.." +
                                      std::to_string(n_vocab_ - 1) + ")"};
        }
    }
    const auto n_ctx = static_cast<int32_t>(opts_.n_ctx_slot);
    if (static_cast<int32_t>(req.prompt.size()) >= n_ctx) {
        RequestRejected r{400, "exceed_context_size_error",
                          "the request (" + std::to_string(req.prompt.size()) +
                              " prompt tokens) exceeds the available context size (" + std::to_string(n_ctx) +
                              " tokens per slot): shorten it or start the server with a larger -c"};
        r.n_prompt_tokens = static_cast<int32_t>(req.prompt.size());
        r.n_ctx = n_ctx;
        throw r;
    }
    auto task = std::make_unique<Task>();
    task->req = std::move(req);
    task->channel = std::make_shared<CompletionChannel>();
    auto channel = task->channel;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) {
            throw RequestRejected{503, "unavailable_error", "the server is shutting down"};
        }
        if (queue_.size() >= opts_.max_queue) {
            throw RequestRejected{503, "unavailable_error",
                                  "the server is busy: " + std::to_string(queue_.size()) +
                                      " requests are waiting for a slot (--queue); retry later"};
        }
        task->id = next_id_++;
        ++counters_.requests_total;
        queue_.push_back(std::move(task));
        counters_.requests_deferred = static_cast<int>(queue_.size());
    }
    cv_.notify_one();
    return channel;
}

void ServingEngine::shutdown(const std::string & reason) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_) {
            return;
        }
        stopping_ = true;
        stop_reason_ = reason;
    }
    cv_.notify_all();
}

std::vector<int32_t> ServingEngine::tokenize(const std::string & text, bool add_special, bool parse_special) const {
    const llama_vocab * vocab = session_.vocab();
    std::vector<int32_t> out(text.size() + 8);
    int32_t n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                               static_cast<int32_t>(out.size()), add_special, parse_special);
    if (n < 0) {
        out.resize(static_cast<size_t>(-n));
        n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), out.data(),
                           static_cast<int32_t>(out.size()), add_special, parse_special);
    }
    if (n < 0) {
        throw RequestRejected{400, "invalid_request_error", "the text cannot be tokenized"};
    }
    out.resize(static_cast<size_t>(n));
    return out;
}

std::string ServingEngine::piece(int32_t token) const {
    if (token < 0 || token >= n_vocab()) {
        throw RequestRejected{400, "invalid_request_error", "token id " + std::to_string(token) + " is out of range"};
    }
    return session_.piece(token);
}

std::string ServingEngine::detokenize(const std::vector<int32_t> & tokens) const {
    std::string out;
    for (int32_t t : tokens) {
        out += piece(t);
    }
    return out;
}

std::string ServingEngine::apply_chat_template(const std::vector<ChatMessage> & messages) const {
    std::vector<llama_chat_message> msgs;
    msgs.reserve(messages.size());
    for (const auto & m : messages) {
        msgs.push_back({m.role.c_str(), m.content.c_str()});
    }
    const char * tmpl = chat_template_.empty() ? "chatml" : chat_template_.c_str();
    size_t cap = 1024;
    for (const auto & m : messages) {
        cap += m.role.size() + m.content.size() + 64;
    }
    std::vector<char> buf(cap);
    int32_t n =
        llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), true, buf.data(), static_cast<int32_t>(buf.size()));
    if (n > static_cast<int32_t>(buf.size())) {
        buf.resize(static_cast<size_t>(n));
        n = llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), true, buf.data(),
                                      static_cast<int32_t>(buf.size()));
    }
    if (n < 0) {
        throw RequestRejected{500, "server_error",
                              "llama.cpp's template engine does not support this model's chat template: use "
                              "/v1/completions with a prompt you format yourself"};
    }
    return std::string(buf.data(), static_cast<size_t>(n));
}

int32_t ServingEngine::n_vocab() const {
    return session_.n_vocab();
}
int32_t ServingEngine::n_ctx_train() const {
    return llama_model_n_ctx_train(session_.model());
}
int32_t ServingEngine::n_embd() const {
    return llama_model_n_embd(session_.model());
}
uint64_t ServingEngine::n_params() const {
    return llama_model_n_params(session_.model());
}
uint64_t ServingEngine::model_size() const {
    return llama_model_size(session_.model());
}
bool ServingEngine::add_bos() const {
    return llama_vocab_get_add_bos(session_.vocab());
}

EngineCounters ServingEngine::counters() const {
    std::lock_guard<std::mutex> lk(mu_);
    return counters_;
}

std::optional<PagerSnapshot> ServingEngine::pager_snapshot() const {
    std::lock_guard<std::mutex> lk(mu_);
    return pager_snapshot_;
}

// The pager's statistics are written by the thread that decodes: they are read here, on that
// thread between steps, and published under the engine's lock.
void ServingEngine::read_pager_snapshot_locked() {
    if (!pager_) {
        return;
    }
    pager_snapshot_ = pager_->stats();
    read_pager_view_locked();
}

void ServingEngine::read_pager_view_locked() {
    if (!pager_ || !view_wanted_) {
        return;
    }
    view_wanted_ = false;
    const auto t0 = Clock::now();
    PagerView & v = pager_view_;
    if (v.layers.empty()) {
        for (const auto & l : pager_->layout().layers) {
            v.layers.push_back(static_cast<uint32_t>(l.layer));
        }
    }
    v.cells = pager_->activity_cells();
    v.n_expert = v.cells.empty() ? 0 : static_cast<uint32_t>(v.cells.front().size());
    v.resident_experts = pager_->resident_experts();
    v.batches = pager_->activity_batches();
    ++v.views_taken;
    v.view_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

PagerView ServingEngine::pager_view() {
    std::lock_guard<std::mutex> lk(mu_);
    if (pager_ && !view_wanted_) {
        view_wanted_ = true;
        cv_.notify_all();
    }
    return pager_view_;
}

std::vector<SlotInfo> ServingEngine::slots() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<SlotInfo> out;
    for (const auto & s : slots_) {
        out.push_back(s->info);
    }
    return out;
}

void ServingEngine::loop() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            auto busy = [&] {
                return std::any_of(slots_.begin(), slots_.end(), [](const auto & s) { return s->task != nullptr; });
            };
            cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || view_wanted_ || busy(); });
            if (stopping_) {
                // Every request still waiting or running ends with an error event.
                for (auto & t : queue_) {
                    t->channel->push(error_event(stop_reason_, 503));
                }
                queue_.clear();
                for (auto & s : slots_) {
                    if (s->task) {
                        s->task->channel->push(error_event(stop_reason_, 503));
                        s->task.reset();
                        s->info.busy = false;
                    }
                }
                counters_.requests_processing = 0;
                counters_.requests_deferred = 0;
                return;
            }
            admit_locked();
            if (!busy()) {
                read_pager_view_locked();  // woken only for the heat map
                continue;
            }
        }
        step();
    }
}

// Idle slots take queued requests, each the slot whose cache shares the longest prefix with its
// prompt (ties: the least recently used), so a returning conversation finds its own history.
void ServingEngine::admit_locked() {
    llama_memory_t mem = llama_get_memory(session_.ctx());
    while (!queue_.empty()) {
        std::unique_ptr<Task> & task = queue_.front();
        if (task->channel->cancelled()) {
            ++counters_.requests_cancelled;
            queue_.pop_front();
            continue;
        }
        Slot * best = nullptr;
        size_t best_lcp = 0;
        for (auto & s : slots_) {
            if (s->task) {
                continue;
            }
            const auto & p = task->req.prompt;
            size_t lcp = 0;
            while (task->req.cache_prompt && lcp < s->cache.size() && lcp < p.size() && s->cache[lcp] == p[lcp]) {
                ++lcp;
            }
            if (!best || lcp > best_lcp || (lcp == best_lcp && s->last_used < best->last_used)) {
                best = s.get();
                best_lcp = lcp;
            }
        }
        if (!best) {
            break;
        }
        Slot & s = *best;
        // The last prompt token is always decoded again: its logits choose the first token.
        const size_t keep = reuse_prefix(mem, s.id, s.cache.size(), std::min(best_lcp, task->req.prompt.size() - 1));
        s.cache.resize(keep);
        s.task = std::move(task);
        queue_.pop_front();
        s.next_prompt = keep;
        s.n_cached = static_cast<int32_t>(keep);
        s.pending = -1;
        s.n_generated = 0;
        s.sampler = make_sampler_chain(s.task->req.sampling, session_.vocab());
        s.text = std::make_unique<TextStream>(s.task->req.stop);
        s.t_start = Clock::now();
        s.last_used = s.task->id;
        s.info.busy = true;
        s.info.prefilling = true;
        s.info.n_prompt = static_cast<int32_t>(s.task->req.prompt.size());
        s.info.n_generated = 0;
        s.info.request = s.task->id;
        s.info.n_cached = static_cast<int32_t>(keep);
        counters_.cached_prompt_tokens_total += keep;
    }
    counters_.requests_deferred = static_cast<int>(queue_.size());
    counters_.requests_processing = static_cast<int>(
        std::count_if(slots_.begin(), slots_.end(), [](const auto & s) { return s->task != nullptr; }));
}

void ServingEngine::step() {
    llama_context * ctx = session_.ctx();
    // Requests whose client went away free their slot before the batch is built.
    for (auto & s : slots_) {
        if (s->task && s->task->channel->cancelled()) {
            std::lock_guard<std::mutex> lk(mu_);
            ++counters_.requests_cancelled;
            s->task.reset();
            s->info.busy = false;
            s->info.prefilling = false;
        }
    }
    const int n_cap = static_cast<int>(std::max<uint32_t>(opts_.n_batch, static_cast<uint32_t>(opts_.n_parallel)));
    std::unique_ptr<llama_batch, BatchDeleter> holder(new llama_batch(llama_batch_init(n_cap, 0, 1)));
    llama_batch & batch = *holder;
    auto add = [&](Slot & s, int32_t token, bool logits) {
        const int i = batch.n_tokens++;
        batch.token[i] = token;
        batch.pos[i] = static_cast<llama_pos>(s.cache.size());
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = s.id;
        batch.logits[i] = logits ? 1 : 0;
        s.cache.push_back(token);
        if (logits) {
            s.batch_index = i;
        }
    };
    // Generating slots first: one token each, so a long prompt never holds a stream back by
    // more than this step.
    int busy = 0;
    for (auto & s : slots_) {
        s->batch_index = -1;
        if (s->task && !s->prefilling() && s->pending >= 0) {
            add(*s, s->pending, true);
            s->pending = -1;
            ++busy;
        }
    }
    uint64_t n_prompt_step = 0;
    for (auto & s : slots_) {
        if (!s->prefilling() || batch.n_tokens >= static_cast<int>(opts_.n_batch)) {
            continue;
        }
        const auto & p = s->task->req.prompt;
        const size_t room = static_cast<size_t>(static_cast<int>(opts_.n_batch) - batch.n_tokens);
        const size_t n = std::min(room, p.size() - s->next_prompt);
        for (size_t k = 0; k < n; ++k) {
            const size_t at = s->next_prompt + k;
            add(*s, p[at], at + 1 == p.size());
        }
        s->next_prompt += n;
        n_prompt_step += n;
        ++busy;
    }
    if (batch.n_tokens == 0) {
        return;
    }

    const auto t0 = Clock::now();
    const int32_t rc = llama_decode(ctx, batch);
    const auto t1 = Clock::now();
    std::string changed;  // the model file changed under the batch: its logits are not to be used
    if (rc == 0 && pager_) {
        try {
            pager_->check_model_file();
        } catch (const Error & e) {
            changed = e.what();
        }
    }
    if (rc != 0 || !changed.empty()) {
        const std::string why = !changed.empty() ? changed
                                : pager_ && !pager_last_error().empty()
                                    ? pager_last_error()
                                    : "llama_decode failed (code " + std::to_string(rc) + ")";
        for (auto & s : slots_) {
            if (s->task) {
                fail(*s, why);
            }
        }
        return;
    }
    const double step_s = std::chrono::duration<double>(t1 - t0).count();

    const llama_vocab * vocab = session_.vocab();
    const int32_t n_vocab_ = n_vocab();
    uint64_t n_sampled = 0;
    for (auto & sp : slots_) {
        Slot & s = *sp;
        if (!s.task || s.batch_index < 0) {
            continue;
        }
        const CompletionRequest & req = s.task->req;
        const float * logits = llama_get_logits_ith(ctx, s.batch_index);
        const llama_token tok = llama_sampler_sample(s.sampler.get(), ctx, s.batch_index);
        ++s.n_generated;
        ++n_sampled;
        if (s.n_generated == 1) {
            s.t_first = Clock::now();
        }
        CompletionEvent ev;
        if (req.logprobs || req.n_probs > 0) {
            // log-softmax of the raw logits, as llama-server reports by default.
            float max_l = -INFINITY;
            for (int32_t i = 0; i < n_vocab_; ++i) {
                max_l = std::max(max_l, logits[i]);
            }
            double sum = 0.0;
            for (int32_t i = 0; i < n_vocab_; ++i) {
                sum += std::exp(static_cast<double>(logits[i] - max_l));
            }
            const float log_z = max_l + static_cast<float>(std::log(sum));
            TokenLogprob lp{tok, session_.piece(tok), logits[tok] - log_z, {}};
            if (req.n_probs > 0) {
                std::vector<int32_t> ids(static_cast<size_t>(n_vocab_));
                for (int32_t i = 0; i < n_vocab_; ++i) {
                    ids[static_cast<size_t>(i)] = i;
                }
                const size_t k = std::min<size_t>(static_cast<size_t>(req.n_probs), ids.size());
                std::partial_sort(ids.begin(), ids.begin() + static_cast<long>(k), ids.end(),
                                  [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
                for (size_t j = 0; j < k; ++j) {
                    lp.top.push_back({ids[j], session_.piece(ids[j]), logits[ids[j]] - log_z});
                }
            }
            ev.logprobs.push_back(std::move(lp));
        }
        const bool eog = !req.ignore_eos && llama_vocab_is_eog(vocab, tok);
        if (!eog) {
            ev.text = s.text->push(session_.piece(tok));
        }
        const bool limit = req.n_predict >= 0 && s.n_generated >= req.n_predict;
        // The sampled token still has to be decoded: the slot needs room for it.
        const bool full = s.cache.size() + 1 >= opts_.n_ctx_slot;
        if (!ev.text.empty() || !ev.logprobs.empty()) {
            s.task->channel->push(std::move(ev));
        }
        if (eog || s.text->stopped()) {
            finish(s, "stop");
        } else if (limit || full) {
            finish(s, "length");
        } else {
            s.pending = tok;
        }
    }

    std::lock_guard<std::mutex> lk(mu_);
    ++counters_.n_decode_total;
    counters_.n_busy_slots_total += static_cast<uint64_t>(busy);
    counters_.prompt_tokens_total += n_prompt_step;
    counters_.tokens_predicted_total += n_sampled;
    // A step's time goes to prompt processing when it holds prompt tokens, else to generation.
    if (n_prompt_step > 0) {
        counters_.prompt_seconds_total += step_s;
    } else {
        counters_.tokens_predicted_seconds_total += step_s;
    }
    for (auto & s : slots_) {
        s->info.n_cached = static_cast<int32_t>(s->cache.size());
        counters_.n_tokens_max = std::max<uint64_t>(counters_.n_tokens_max, s->cache.size());
        if (s->task) {
            s->info.prefilling = s->prefilling();
            s->info.n_generated = s->n_generated;
        }
    }
    counters_.requests_processing = static_cast<int>(
        std::count_if(slots_.begin(), slots_.end(), [](const auto & s) { return s->task != nullptr; }));
    read_pager_snapshot_locked();
}

void ServingEngine::finish(Slot & s, const std::string & reason) {
    const std::string rest = s.text->finish();
    if (!rest.empty()) {
        CompletionEvent tail;
        tail.text = rest;
        s.task->channel->push(std::move(tail));
    }
    CompletionEvent done;
    done.kind = CompletionEvent::Kind::done;
    done.finish_reason = reason;
    done.slot = s.id;
    const auto now = Clock::now();
    done.usage.n_prompt = static_cast<int32_t>(s.task->req.prompt.size());
    done.usage.n_cached = s.n_cached;
    done.usage.n_generated = s.n_generated;
    done.usage.prompt_ms = ms_between(s.t_start, s.t_first);
    done.usage.predicted_ms = ms_between(s.t_first, now);
    s.task->channel->push(std::move(done));
    std::lock_guard<std::mutex> lk(mu_);
    s.info.busy = false;
    s.info.prefilling = false;
    s.info.n_generated = s.n_generated;
    s.task.reset();
}

void ServingEngine::fail(Slot & s, const std::string & message) {
    // The sequence may hold a half-decoded batch: forget it.
    llama_memory_seq_rm(llama_get_memory(session_.ctx()), s.id, -1, -1);
    s.cache.clear();
    s.task->channel->push(error_event(message, 500));
    std::lock_guard<std::mutex> lk(mu_);
    s.info.busy = false;
    s.info.prefilling = false;
    s.task.reset();
}

}  // namespace epq
