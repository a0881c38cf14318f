// Prompt in, tokens out: prefill, then sample one token at a time, streaming each piece, and
// time both phases.
#pragma once

#include "engine/llama_session.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace epq {

struct SamplingOptions {
    float temp = 0.0f;  // <= 0: greedy
    int32_t top_k = 40;
    float top_p = 0.95f;
    uint32_t seed = 0xFFFFFFFF;  // LLAMA_DEFAULT_SEED: random
};

struct GenerationStats {
    int n_prompt = 0;
    int n_generated = 0;
    double prefill_seconds = 0.0;
    double decode_seconds = 0.0;
    double first_token_seconds = 0.0;  // from the start of generate() to the first sampled token
    double prefill_tps() const { return prefill_seconds > 0 ? n_prompt / prefill_seconds : 0.0; }
    double decode_tps() const { return decode_seconds > 0 ? n_generated / decode_seconds : 0.0; }
};

// Called with each generated piece of text; return false to stop.
using PieceSink = std::function<bool(const std::string & piece, llama_token token)>;
// Called before each token is chosen, with the logits it is chosen from.
using LogitsObserver = std::function<void(int step, const float * logits, int32_t n_vocab)>;

// Generates up to n_predict tokens after `prompt_tokens`; stops early at an end-of-generation
// token. With decode_last the final token is decoded too, so the context holds the whole reply
// (a chat continues from there). With `replay`, step i takes replay[i] instead of sampling (it
// stops when replay ends): decode then follows a real text, token by token. Throws epq::Error
// on decode failure.
GenerationStats generate(LlamaSession & session, const std::vector<llama_token> & prompt_tokens, int n_predict,
                         const SamplingOptions & sampling, const PieceSink & sink,
                         const LogitsObserver & observe = nullptr, bool decode_last = false,
                         const std::vector<llama_token> & replay = {});

}  // namespace epq
