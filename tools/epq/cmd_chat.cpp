#include "commands.h"

#include "engine/chat_template.h"
#include "run_common.h"
#include "util/error.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <iostream>
#include <unistd.h>

namespace epq::cli {

Handler add_chat(CLI::App & app) {
    auto * sub = app.add_subcommand(
        "chat", "interactive chat with the model's chat template (Jinja, as llama-server renders it; also: epq-chat)");
    auto o = std::make_shared<RunOptions>();
    o->n_predict = 256;
    add_model_flags(*sub, *o);
    auto system = std::make_shared<std::string>();
    sub->add_option("-s,--system", *system, "system message");
    auto tmpl = std::make_shared<std::string>();
    auto tmpl_file = std::make_shared<std::string>();
    sub->add_option("--chat-template", *tmpl, "a template by name or its Jinja text (default: the model's own)");
    sub->add_option("--chat-template-file", *tmpl_file, "the Jinja template in this file");
    return [o, system, tmpl, tmpl_file]() {
        std::string override_template = *tmpl;
        if (!tmpl_file->empty()) {
            std::ifstream in(*tmpl_file);
            if (!in) {
                throw Error("cannot read --chat-template-file " + *tmpl_file);
            }
            override_template.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        LoadedModel m = load_model(*o);
        LlamaSession & session = *m.session;
        const ChatTemplate chat_template(session.model(), override_template);
        const bool interactive = isatty(STDIN_FILENO) != 0;
        std::unique_ptr<std::ofstream> logits_file;
        if (!o->logits_out.empty()) {
            logits_file = std::make_unique<std::ofstream>(o->logits_out, std::ios::binary | std::ios::trunc);
        }
        if (interactive) {
            std::fputs("epq: chat: type a message and press Enter; Ctrl-D or /exit ends\n", stderr);
        }

        std::vector<std::pair<std::string, std::string>> msgs;
        auto add = [&](const char * role, const std::string & text) { msgs.emplace_back(role, text); };
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
            const std::string full = chat_template.render(msgs, true);
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
            prev_len = chat_template.render(msgs, false).size();
        }
        finish_report(*o, m, report);
        return 0;
    };
}

}  // namespace epq::cli
