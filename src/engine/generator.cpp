#include "engine/generator.h"

#include "engine/sampling_params.h"

#include <chrono>
#include <memory>

namespace epq {

namespace {

// epq run's few sampling flags as llama-server's chain (the samplers they leave out are off),
// so `epq run` and `epq serve` pick the same token from the same logits and seed.
SamplerChain make_sampler(const SamplingOptions & s, const llama_vocab * vocab) {
    SamplingParams p;
    p.temp = s.temp;
    p.top_k = s.top_k;
    p.top_p = s.top_p;
    p.min_p = 0.0f;
    p.seed = s.seed;
    return make_sampler_chain(p, vocab);
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
    auto sampler = make_sampler(sampling, session.vocab());

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
