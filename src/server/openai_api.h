// OpenAI's request and response shapes for /v1/chat/completions and /v1/completions, as
// llama-server reads and writes them: request JSON -> an engine request, engine events ->
// response JSON and stream chunks. Field types are checked: a wrong type is a 400, an unknown
// field is ignored (clients send fields a server may not know).
#pragma once

#include "engine/serving_engine.h"
#include "server/api_error.h"

#include <nlohmann/json.hpp>

#include <string>

namespace epq::server {

enum class Endpoint { chat, completion };

struct ParsedRequest {
    Endpoint endpoint = Endpoint::chat;
    CompletionRequest req;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    std::string model;           // echoed back
};

// A chat request's messages (role, text content). Throws ApiError (400).
std::vector<ChatMessage> parse_messages(const nlohmann::json & body);

// Throws ApiError (400) for malformed requests; uses the engine to template and tokenize.
ParsedRequest parse_chat_request(const nlohmann::json & body, const ServingEngine & engine,
                                 const std::string & model_name);
ParsedRequest parse_completion_request(const nlohmann::json & body, const ServingEngine & engine,
                                       const std::string & model_name);

// Builds one response id's JSON: the whole answer, or the chunks of a stream.
class ResponseBuilder {
public:
    ResponseBuilder(const ParsedRequest & p, std::string id, int64_t created);

    nlohmann::json first_chunk() const;  // chat: the role; completions: nothing (null)
    nlohmann::json text_chunk(const std::string & text, const std::vector<TokenLogprob> & lps) const;
    nlohmann::json final_chunk(const std::string & finish_reason) const;
    nlohmann::json usage_chunk(const CompletionUsage & u) const;
    nlohmann::json whole(const std::string & text, const std::vector<TokenLogprob> & lps,
                         const std::string & finish_reason, const CompletionUsage & u) const;

    static nlohmann::json usage(const CompletionUsage & u);

private:
    nlohmann::json envelope(bool chunk) const;
    nlohmann::json logprobs(const std::vector<TokenLogprob> & lps, size_t text_offset) const;
    const ParsedRequest & p_;
    std::string id_;
    int64_t created_;
};

}  // namespace epq::server
