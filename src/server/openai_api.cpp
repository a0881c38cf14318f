#include "server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

namespace epq::server {

using json = nlohmann::json;

namespace {

// A field that is absent or null reads as "not given"; a present one must have the right type.
const json * field(const json & body, const char * name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) {
        return nullptr;
    }
    return &*it;
}

template <typename T>
bool read_number(const json & body, const char * name, T & out) {
    const json * v = field(body, name);
    if (!v) {
        return false;
    }
    if constexpr (std::is_integral_v<T>) {
        if (!v->is_number_integer()) {
            throw bad_request(std::string("'") + name + "' must be an integer");
        }
        const auto x = v->get<int64_t>();
        if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            x > static_cast<int64_t>(std::numeric_limits<T>::max())) {
            throw bad_request(std::string("'") + name + "' is out of range");
        }
        out = static_cast<T>(x);
    } else {
        if (!v->is_number()) {
            throw bad_request(std::string("'") + name + "' must be a number");
        }
        out = v->get<T>();
        if (!std::isfinite(out)) {
            throw bad_request(std::string("'") + name + "' must be finite");
        }
    }
    return true;
}

bool read_bool(const json & body, const char * name, bool & out) {
    const json * v = field(body, name);
    if (!v) {
        return false;
    }
    if (!v->is_boolean()) {
        throw bad_request(std::string("'") + name + "' must be true or false");
    }
    out = v->get<bool>();
    return true;
}

// The fields both endpoints share: sampling, limits, stop strings, streaming.
void read_common(const json & body, ParsedRequest & p) {
    if (!body.is_object()) {
        throw bad_request("the request body must be a JSON object");
    }
    SamplingParams & s = p.req.sampling;
    read_number(body, "temperature", s.temp);
    read_number(body, "top_k", s.top_k);
    read_number(body, "top_p", s.top_p);
    read_number(body, "min_p", s.min_p);
    read_number(body, "typical_p", s.typical_p);
    read_number(body, "repeat_penalty", s.repeat_penalty);
    read_number(body, "repeat_last_n", s.repeat_last_n);
    read_number(body, "presence_penalty", s.presence_penalty);
    read_number(body, "frequency_penalty", s.frequency_penalty);
    int64_t seed = -1;
    if (read_number(body, "seed", seed)) {
        s.seed = seed < 0 ? 0xFFFFFFFFu : static_cast<uint32_t>(seed & 0xFFFFFFFF);
    }
    if (s.top_p < 0.0f || s.top_p > 1.0f) {
        throw bad_request("'top_p' must be between 0 and 1");
    }
    if (s.repeat_penalty <= 0.0f) {
        throw bad_request("'repeat_penalty' must be positive");
    }
    // max_tokens (OpenAI), max_completion_tokens (its newer name), n_predict (llama.cpp).
    for (const char * name : {"n_predict", "max_tokens", "max_completion_tokens"}) {
        int32_t n = -1;
        if (read_number(body, name, n)) {
            if (n < -1) {
                throw bad_request(std::string("'") + name + "' must be -1 (no limit) or more");
            }
            p.req.n_predict = n;
        }
    }
    int32_t n_choices = 1;
    if (read_number(body, "n", n_choices) && n_choices != 1) {
        throw bad_request("'n' must be 1: this server returns one choice per request");
    }
    if (const json * stop = field(body, "stop")) {
        if (stop->is_string()) {
            p.req.stop.push_back(stop->get<std::string>());
        } else if (stop->is_array()) {
            for (const auto & x : *stop) {
                if (!x.is_string()) {
                    throw bad_request("'stop' must be a string or a list of strings");
                }
                p.req.stop.push_back(x.get<std::string>());
            }
        } else {
            throw bad_request("'stop' must be a string or a list of strings");
        }
    }
    read_bool(body, "ignore_eos", p.req.ignore_eos);
    read_bool(body, "cache_prompt", p.req.cache_prompt);
    read_bool(body, "stream", p.stream);
    if (const json * so = field(body, "stream_options")) {
        if (!so->is_object()) {
            throw bad_request("'stream_options' must be an object");
        }
        read_bool(*so, "include_usage", p.include_usage);
    }
    int32_t n_probs = 0;
    if (read_number(body, "n_probs", n_probs)) {
        p.req.n_probs = n_probs;
        p.req.logprobs = n_probs > 0;
    }
    if (const json * m = field(body, "model")) {
        if (!m->is_string()) {
            throw bad_request("'model' must be a string");
        }
    }
}

void check_probs(ParsedRequest & p) {
    if (p.req.n_probs < 0 || p.req.n_probs > 20) {
        throw bad_request("the number of top logprobs must be 0..20");
    }
}

// Message content: a string, or OpenAI's list of parts of which only text is accepted.
std::string message_text(const json & content) {
    if (content.is_null()) {
        return {};
    }
    if (content.is_string()) {
        return content.get<std::string>();
    }
    if (!content.is_array()) {
        throw bad_request("a message's 'content' must be a string or a list of content parts");
    }
    std::string out;
    for (const auto & part : content) {
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            throw bad_request("each content part must be an object with a 'type'");
        }
        if (part["type"] != "text") {
            throw bad_request("content parts of type '" + part["type"].get<std::string>() +
                              "' are not supported: this model takes text only");
        }
        if (!part.contains("text") || !part["text"].is_string()) {
            throw bad_request("a text content part needs a string 'text'");
        }
        out += part["text"].get<std::string>();
    }
    return out;
}

std::vector<int> bytes_of(const std::string & s) {
    std::vector<int> b;
    for (unsigned char c : s) {
        b.push_back(c);
    }
    return b;
}

json usage_json(const CompletionUsage & u) {
    return {{"prompt_tokens", u.n_prompt},
            {"completion_tokens", u.n_generated},
            {"total_tokens", u.n_prompt + u.n_generated},
            {"prompt_tokens_details", {{"cached_tokens", u.n_cached}}}};
}

}  // namespace

std::vector<ChatMessage> parse_messages(const json & body) {
    if (!body.is_object()) {
        throw bad_request("the request body must be a JSON object");
    }
    const json * messages = field(body, "messages");
    if (!messages) {
        throw bad_request("'messages' is required");
    }
    if (!messages->is_array() || messages->empty()) {
        throw bad_request("'messages' must be a non-empty list");
    }
    std::vector<ChatMessage> msgs;
    for (const auto & m : *messages) {
        if (!m.is_object()) {
            throw bad_request("each message must be an object");
        }
        const json * role = field(m, "role");
        if (!role || !role->is_string()) {
            throw bad_request("each message needs a string 'role'");
        }
        const auto it = m.find("content");
        msgs.push_back({role->get<std::string>(), message_text(it == m.end() ? json() : *it)});
    }
    return msgs;
}

ParsedRequest parse_chat_request(const json & body, const ServingEngine & engine, const std::string & model_name) {
    ParsedRequest p;
    p.endpoint = Endpoint::chat;
    p.model = model_name;
    read_common(body, p);
    bool logprobs = false;
    read_bool(body, "logprobs", logprobs);
    int32_t top = 0;
    read_number(body, "top_logprobs", top);
    if (top > 0 && !logprobs) {
        throw bad_request("'top_logprobs' needs 'logprobs': true");
    }
    if (logprobs) {
        p.req.logprobs = true;
        p.req.n_probs = top;
    }
    check_probs(p);
    const std::vector<ChatMessage> msgs = parse_messages(body);
    std::string prompt;
    try {
        prompt = engine.apply_chat_template(msgs);
        p.req.prompt = engine.tokenize(prompt, true, true);
    } catch (const RequestRejected & r) {
        throw ApiError{r.status, r.type, r.message, json::object()};
    }
    return p;
}

ParsedRequest parse_completion_request(const json & body, const ServingEngine & engine,
                                       const std::string & model_name) {
    ParsedRequest p;
    p.endpoint = Endpoint::completion;
    p.model = model_name;
    read_common(body, p);
    // Completions' `logprobs` is the number of alternatives (llama-server also reads n_probs).
    if (const json * lp = field(body, "logprobs")) {
        if (lp->is_boolean()) {
            p.req.logprobs = lp->get<bool>();
        } else if (lp->is_number_integer()) {
            p.req.n_probs = lp->get<int32_t>();
            p.req.logprobs = true;
        } else {
            throw bad_request("'logprobs' must be an integer");
        }
    }
    check_probs(p);
    const json * prompt = field(body, "prompt");
    if (!prompt) {
        throw bad_request("'prompt' is required");
    }
    // A string, a list of token ids, or a list holding one of those.
    const json * one = prompt;
    if (prompt->is_array() && !prompt->empty() && (prompt->at(0).is_string() || prompt->at(0).is_array())) {
        if (prompt->size() != 1) {
            throw bad_request("'prompt' holds several prompts: send one per request");
        }
        one = &prompt->at(0);
    }
    try {
        if (one->is_string()) {
            p.req.prompt = engine.tokenize(one->get<std::string>(), true, true);
        } else if (one->is_array()) {
            for (const auto & t : *one) {
                if (!t.is_number_integer()) {
                    throw bad_request("'prompt' must be a string or a list of token ids");
                }
                const auto id = t.get<int64_t>();
                if (id < 0 || id >= engine.n_vocab()) {
                    throw bad_request("token id " + std::to_string(id) + " is out of the vocabulary");
                }
                p.req.prompt.push_back(static_cast<int32_t>(id));
            }
        } else {
            throw bad_request("'prompt' must be a string or a list of token ids");
        }
    } catch (const RequestRejected & r) {
        throw ApiError{r.status, r.type, r.message, json::object()};
    }
    if (p.req.prompt.empty()) {
        throw bad_request("'prompt' is empty");
    }
    return p;
}

ResponseBuilder::ResponseBuilder(const ParsedRequest & p, std::string id, int64_t created)
    : p_(p), id_(std::move(id)), created_(created) {}

json ResponseBuilder::usage(const CompletionUsage & u) {
    return usage_json(u);
}

json ResponseBuilder::envelope(bool chunk) const {
    const bool chat = p_.endpoint == Endpoint::chat;
    return {{"id", id_},
            {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
            {"created", created_},
            {"model", p_.model},
            {"system_fingerprint", "epq"}};
}

json ResponseBuilder::logprobs(const std::vector<TokenLogprob> & lps, size_t text_offset) const {
    if (!p_.req.logprobs) {
        return nullptr;
    }
    if (p_.endpoint == Endpoint::chat) {
        json content = json::array();
        for (const auto & lp : lps) {
            json top = json::array();
            for (const auto & t : lp.top) {
                top.push_back({{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}});
            }
            content.push_back(
                {{"token", lp.piece}, {"logprob", lp.logprob}, {"bytes", bytes_of(lp.piece)}, {"top_logprobs", top}});
        }
        return {{"content", content}};
    }
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    size_t off = text_offset;
    for (const auto & lp : lps) {
        tokens.push_back(lp.piece);
        token_logprobs.push_back(lp.logprob);
        json alts = json::object();
        for (const auto & t : lp.top) {
            alts[t.piece] = t.logprob;
        }
        top.push_back(alts);
        offsets.push_back(off);
        off += lp.piece.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json ResponseBuilder::first_chunk() const {
    if (p_.endpoint != Endpoint::chat) {
        return nullptr;
    }
    json c = envelope(true);
    c["choices"] = json::array({{{"index", 0},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    if (p_.include_usage) {
        c["usage"] = nullptr;
    }
    return c;
}

json ResponseBuilder::text_chunk(const std::string & text, const std::vector<TokenLogprob> & lps) const {
    json c = envelope(true);
    if (p_.endpoint == Endpoint::chat) {
        c["choices"] = json::array({{{"index", 0},
                                     {"delta", {{"content", text}}},
                                     {"logprobs", logprobs(lps, 0)},
                                     {"finish_reason", nullptr}}});
    } else {
        c["choices"] =
            json::array({{{"index", 0}, {"text", text}, {"logprobs", logprobs(lps, 0)}, {"finish_reason", nullptr}}});
    }
    if (p_.include_usage) {
        c["usage"] = nullptr;
    }
    return c;
}

json ResponseBuilder::final_chunk(const std::string & finish_reason) const {
    json c = envelope(true);
    if (p_.endpoint == Endpoint::chat) {
        c["choices"] = json::array(
            {{{"index", 0}, {"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}});
    } else {
        c["choices"] =
            json::array({{{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason}}});
    }
    if (p_.include_usage) {
        c["usage"] = nullptr;
    }
    return c;
}

json ResponseBuilder::usage_chunk(const CompletionUsage & u) const {
    json c = envelope(true);
    c["choices"] = json::array();
    c["usage"] = usage_json(u);
    return c;
}

json ResponseBuilder::whole(const std::string & text, const std::vector<TokenLogprob> & lps,
                            const std::string & finish_reason, const CompletionUsage & u) const {
    json r = envelope(false);
    if (p_.endpoint == Endpoint::chat) {
        r["choices"] = json::array({{{"index", 0},
                                     {"message", {{"role", "assistant"}, {"content", text}}},
                                     {"logprobs", logprobs(lps, 0)},
                                     {"finish_reason", finish_reason}}});
    } else {
        r["choices"] = json::array(
            {{{"index", 0}, {"text", text}, {"logprobs", logprobs(lps, 0)}, {"finish_reason", finish_reason}}});
    }
    r["usage"] = usage_json(u);
    r["timings"] = {{"prompt_n", u.n_prompt - u.n_cached},
                    {"cache_n", u.n_cached},
                    {"prompt_ms", u.prompt_ms},
                    {"predicted_n", u.n_generated},
                    {"predicted_ms", u.predicted_ms}};
    return r;
}

}  // namespace epq::server
