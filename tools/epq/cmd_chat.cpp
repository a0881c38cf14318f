#include "commands.h"

#include "run_common.h"
#include "util/error.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <unistd.h>

namespace epq::cli {

namespace {

// The conversation rendered by the model's chat template (ChatML when it has none).
std::string render(const llama_model * model, const std::vector<llama_chat_message> & msgs, bool add_assistant) {
    const char * tmpl = llama_model_chat_template(model, nullptr);
    if (!tmpl) {
        tmpl = "chatml";
    }
    std::vector<char> buf(4096);
    int32_t n = llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), add_assistant, buf.data(),
                                          static_cast<int32_t>(buf.size()));
    if (n > static_cast<int32_t>(buf.size())) {
        buf.resize(static_cast<size_t>(n));
        n = llama_chat_apply_template(tmpl, msgs.data(), msgs.size(), add_assistant, buf.data(),
                                      static_cast<int32_t>(buf.size()));
    }
    if (n < 0) {
        throw Error("the model's chat template is not supported by llama.cpp's template engine");
    }
    return std::string(buf.data(), static_cast<size_t>(n));
}

}  // namespace

Handler add_chat(CLI::App & app) {
    auto * sub = app.add_subcommand("chat", "interactive chat with the model's chat template (also: epq-chat)");
    auto o = std::make_shared<RunOptions>();
    o->n_predict = 256;
    add_model_flags(*sub, *o);
    auto system = std::make_shared<std::string>();
    sub->add_option("-s,--system", *system, "system message");
    return [o, system]() {
        LoadedModel m = load_model(*o);
        LlamaSession & session = *m.session;
        const bool interactive = isatty(STDIN_FILENO) != 0;
        std::unique_ptr<std::ofstream> logits_file;
        if (!o->logits_out.empty()) {
            logits_file = std::make_unique<std::ofstream>(o->logits_out, std::ios::binary | std::ios::trunc);
        }
        if (interactive) {
            std::fputs("epq: chat: type a message and press Enter; Ctrl-D or /exit ends\n", stderr);
        }

        // llama_chat_message points at strings: keep them alive in a list that never moves them.
        std::vector<std::unique_ptr<std::string>> texts;
        std::vector<llama_chat_message> msgs;
        auto add = [&](const char * role, const std::string & text) {
            texts.push_back(std::make_unique<std::string>(text));
            msgs.push_back({role, texts.back()->c_str()});
        };
        if (!system->empty()) {
            add("system", *system);
        }
        size_t prev_len = 0;
        RunReport report;
        std::string line;
        for (;;) {
            if (interactive) {
                std::fputs("\n> ", stderr);
            }
            if (!std::getline(std::cin, line) || line == "/exit") {
                break;
            }
            if (line.empty()) {
                continue;
            }
            add("user", line);
            const std::string full = render(session.model(), msgs, true);
            const std::string fresh = full.substr(prev_len);
            const bool first = llama_memory_seq_pos_max(llama_get_memory(session.ctx()), 0) < 0;
            const auto tokens = session.tokenize(fresh, first);
            std::string reply;
            const GenerationStats st = generate(
                session, tokens, o->n_predict, o->sampling,
                [&](const std::string & piece, llama_token) {
                    reply += piece;
                    std::fwrite(piece.data(), 1, piece.size(), stdout);
                    std::fflush(stdout);
                    return true;
                },
                [&](int, const float * logits, int32_t n_vocab) {
                    if (logits_file) {
                        logits_file->write(reinterpret_cast<const char *>(logits),
                                           static_cast<std::streamsize>(n_vocab) * 4);
                    }
                },
                /*decode_last=*/true);
            std::fputs("\n", stdout);
            std::fflush(stdout);
            if (report.gen.n_prompt == 0) {
                report.ttft_seconds = m.load_seconds + st.first_token_seconds;
            }
            report.gen.n_prompt += st.n_prompt;
            report.gen.n_generated += st.n_generated;
            report.gen.prefill_seconds += st.prefill_seconds;
            report.gen.decode_seconds += st.decode_seconds;
            add("assistant", reply);
            prev_len = render(session.model(), msgs, false).size();
        }
        finish_report(*o, m, report);
        return 0;
    };
}

}  // namespace epq::cli
