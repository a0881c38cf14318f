// A request's sampling settings and the llama.cpp sampler chain they make: llama-server's
// defaults and its order (penalties, top-k, typical, top-p, min-p, temperature, then a seeded
// draw), built from the public llama_sampler API, so the same logits and seed pick the same
// token as stock tools do. Temperature <= 0 keeps only the largest logit: greedy.
#pragma once

#include <cstdint>
#include <memory>

struct llama_sampler;
struct llama_vocab;

namespace epq {

struct SamplingParams {
    float temp = 0.8f;
    int32_t top_k = 40;
    float top_p = 0.95f;
    float min_p = 0.05f;
    float typical_p = 1.0f;
    int32_t repeat_last_n = 64;
    float repeat_penalty = 1.0f;
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    uint32_t seed = 0xFFFFFFFF;  // LLAMA_DEFAULT_SEED: a random seed
};

struct SamplerDeleter {
    void operator()(llama_sampler * s) const;
};
using SamplerChain = std::unique_ptr<llama_sampler, SamplerDeleter>;

SamplerChain make_sampler_chain(const SamplingParams & p, const llama_vocab * vocab);

}  // namespace epq
