#include "run_common.h"

#include "engine/llama_log.h"
#include "engine/llama_session.h"
#include "gguf/expert_index.h"
#include "util/byte_size.h"
#include "util/error.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace epq::cli {

void add_generation_flags(CLI::App& sub, RunOptions& o) {
    sub.add_option("-n,--n-predict", o.n_predict, "number of tokens to generate")->capture_default_str();
    sub.add_option("-t,--threads", o.n_threads, "threads (default: all cores)");
    sub.add_option("-c,--ctx-size", o.n_ctx, "context size in tokens")->capture_default_str();
    sub.add_option("-b,--batch-size", o.n_batch, "prompt batch size")->capture_default_str();
    sub.add_option("--temp", o.sampling.temp, "temperature; 0 = greedy")->capture_default_str();
    sub.add_option("--top-k", o.sampling.top_k, "top-k sampling (with --temp > 0)")->capture_default_str();
    sub.add_option("--top-p", o.sampling.top_p, "top-p sampling (with --temp > 0)")->capture_default_str();
    sub.add_option("--seed", o.sampling.seed, "sampling seed (default: random)");
    sub.add_flag("--no-pager", o.no_pager, "run the file through stock llama.cpp (mmap, no repacking): the baseline");
    sub.add_flag("-v,--verbose", o.verbose, "show llama.cpp's own log");
}

int run_generation(const RunOptions& o) {
    set_llama_verbosity(o.verbose);
    std::string prompt = o.prompt;
    if (!o.prompt_file.empty()) {
        std::ifstream in(o.prompt_file, std::ios::binary);
        if (!in) {
            throw Error("cannot read prompt file " + o.prompt_file);
        }
        std::stringstream ss;
        ss << in.rdbuf();
        prompt = ss.str();
    }
    if (o.n_predict < 0) {
        throw Error("-n must be 0 or more");
    }
    if (o.n_ctx < 16) {
        throw Error("-c must be at least 16");
    }

    // Validate before llama.cpp sees the file: a corrupt or non-MoE file gets a one-line reason.
    const GgufFile file = GgufFile::open(o.model);
    if (!o.no_pager) {
        const ExpertIndex idx = ExpertIndex::build(file);
        std::fprintf(stderr,
                     "epq: %s: %s, %u layers, %u experts (top-%u), %s dense + %s experts\n"
                     "epq: the pager is not built yet: running through stock llama.cpp (mmap, no repacking)\n",
                     o.model.c_str(), idx.arch.c_str(), idx.n_layer, idx.n_expert, idx.n_expert_used,
                     format_bytes(idx.dense_bytes).c_str(), format_bytes(idx.expert_bytes).c_str());
    } else {
        std::fprintf(stderr, "epq: --no-pager: running %s through stock llama.cpp (mmap, no repacking)\n",
                     o.model.c_str());
    }

    SessionOptions so;
    so.n_threads = o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    so.n_ctx = o.n_ctx;
    so.n_batch = o.n_batch;
    LlamaSession session(o.model, so);

    const auto tokens = session.tokenize(prompt, true);
    if (tokens.empty()) {
        throw Error("the prompt is empty: pass one with -p or -f");
    }
    if (tokens.size() + static_cast<size_t>(o.n_predict) > o.n_ctx) {
        throw Error("prompt (" + std::to_string(tokens.size()) + " tokens) + -n " + std::to_string(o.n_predict) +
                    " exceeds the context of " + std::to_string(o.n_ctx) + " tokens: raise -c");
    }
    std::fputs(prompt.c_str(), stderr);
    std::fputs("\n", stderr);
    const GenerationStats st =
        generate(session, tokens, o.n_predict, o.sampling, [](const std::string& piece, llama_token) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            return true;
        });
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(
        stderr,
        "\nepq: prompt %d tokens in %.2f s (%.1f tok/s) | generated %d tokens in %.2f s (%.2f tok/s) | %d threads\n",
        st.n_prompt, st.prefill_seconds, st.prefill_tps(), st.n_generated, st.decode_seconds, st.decode_tps(),
        so.n_threads);
    return 0;
}

}  // namespace epq::cli
