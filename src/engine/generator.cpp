#include "engine/generator.h"

#include <chrono>
#include <memory>

namespace epq {

namespace {

using SamplerPtr = std::unique_ptr<llama_sampler, void (*)(llama_sampler *)>;

SamplerPtr make_sampler(const SamplingOptions & s) {
    SamplerPtr chain(llama_sampler_chain_init(llama_sampler_chain_default_params()), llama_sampler_free);
    if (s.temp <= 0.0f) {
        llama_sampler_chain_add(chain.get(), llama_sampler_init_greedy());
    } else {
        llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(s.top_k));
        llama_sampler_chain_add(chain.get(), llama_sampler_init_top_p(s.top_p, 1));
        llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(s.temp));
        llama_sampler_chain_add(chain.get(), llama_sampler_init_dist(s.seed));
    }
    return chain;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

GenerationStats generate(LlamaSession & session, const std::vector<llama_token> & prompt_tokens, int n_predict,
                         const SamplingOptions & sampling, const PieceSink & sink, const LogitsObserver & observe,
                         bool decode_last, const std::vector<llama_token> & replay) {
    GenerationStats st;
    st.n_prompt = static_cast<int>(prompt_tokens.size());
    auto sampler = make_sampler(sampling);

    const auto start = std::chrono::steady_clock::now();
    auto t0 = start;
    session.decode(prompt_tokens);
    st.prefill_seconds = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_predict; ++i) {
        if (!replay.empty() && static_cast<size_t>(i) >= replay.size()) {
            break;
        }
        if (observe) {
            observe(i, session.logits(), session.n_vocab());
        }
        const llama_token tok =
            replay.empty() ? llama_sampler_sample(sampler.get(), session.ctx(), -1) : replay[static_cast<size_t>(i)];
        if (i == 0) {
            st.first_token_seconds = seconds_since(start);
        }
        if (replay.empty() && llama_vocab_is_eog(session.vocab(), tok)) {
            break;
        }
        ++st.n_generated;
        if (!sink(session.piece(tok), tok)) {
            break;
        }
        if (i + 1 < n_predict || decode_last) {
            session.decode({tok});
        }
    }
    st.decode_seconds = seconds_since(t0);
    return st;
}

}  // namespace epq
