#include "engine/sampling_params.h"

#include "llama.h"

#include <cmath>
#include <vector>

namespace epq {

void SamplerDeleter::operator()(llama_sampler * s) const {
    llama_sampler_free(s);
}

SamplerChain make_sampler_chain(const SamplingParams & p, const llama_vocab * vocab) {
    SamplerChain chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
    llama_sampler * c = chain.get();
    // Tokens the vocabulary says never to emit, as common_sampler_init masks them.
    int32_t n_suppress = 0;
    const llama_token * suppress = llama_vocab_get_suppress_tokens(vocab, &n_suppress);
    if (n_suppress > 0) {
        std::vector<llama_logit_bias> bias;
        for (int32_t i = 0; i < n_suppress; ++i) {
            bias.push_back({suppress[i], -INFINITY});
        }
        llama_sampler_chain_add(c, llama_sampler_init_logit_bias(llama_vocab_n_tokens(vocab),
                                                                 static_cast<int32_t>(bias.size()), bias.data()));
    }
    llama_sampler_chain_add(c, llama_sampler_init_penalties(llama_vocab_n_tokens(vocab), p.repeat_last_n,
                                                            p.repeat_penalty, p.frequency_penalty, p.presence_penalty));
    llama_sampler_chain_add(c, llama_sampler_init_top_k(p.top_k));
    llama_sampler_chain_add(c, llama_sampler_init_typical(p.typical_p, 0));
    llama_sampler_chain_add(c, llama_sampler_init_top_p(p.top_p, 0));
    llama_sampler_chain_add(c, llama_sampler_init_min_p(p.min_p, 0));
    llama_sampler_chain_add(c, llama_sampler_init_temp_ext(p.temp, 0.0f, 1.0f));
    llama_sampler_chain_add(c, llama_sampler_init_dist(p.seed));
    return chain;
}

}  // namespace epq
