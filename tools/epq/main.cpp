// epq: run Mixture-of-Experts GGUF models larger than RAM. This file only dispatches to the
// subcommands; each lives in its own cmd_*.cpp over the epq library.
#include "commands.h"

#include "server/serve.h"
#include "util/error.h"

#include <csignal>
#include <cstdio>
#include <unistd.h>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace {

// Dense weights are memory-mapped: if the model file is truncated while running, touching a
// page past its new end raises SIGBUS. Say what happened instead of dying with "Bus error".
void on_sigbus(int) {
    static const char msg[] =
        "epq: error: the model file was truncated or rewritten while running (bus error reading its mapping); "
        "restore the file and run again\n";
    const ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(1);
}

}  // namespace

int main(int argc, char ** argv) {
    struct sigaction sa {};
    sa.sa_handler = on_sigbus;
    sigaction(SIGBUS, &sa, nullptr);

    // epq serve is llama.cpp's server, whose own parser takes every flag after `serve`.
    if (argc >= 2 && std::string(argv[1]) == "serve") {
        argv[1] = argv[0];
        return epq::server::serve_main(argc - 1, argv + 1);
    }

    CLI::App app{"epq - run Mixture-of-Experts GGUF models larger than RAM on stock llama.cpp"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "show help for every subcommand");

    std::map<CLI::App *, epq::cli::Handler> handlers;
    auto add = [&](epq::cli::Handler (*fn)(CLI::App &)) {
        const size_t before = app.get_subcommands({}).size();
        epq::cli::Handler h = fn(app);
        handlers[app.get_subcommands({}).at(before)] = std::move(h);
    };
    add(epq::cli::add_run);
    add(epq::cli::add_chat);
    add(epq::cli::add_demo);
    add(epq::cli::add_synth);
    add(epq::cli::add_inspect);
    add(epq::cli::add_verify);
    add(epq::cli::add_simulate);
    add(epq::cli::add_repack);
    add(epq::cli::add_bench);
    add(epq::cli::add_bench_run);
    add(epq::cli::add_serve);

    // Called as epq-chat: the chat subcommand.
    std::vector<std::string> args(argv + 1, argv + argc);
    const std::string self = argv[0];
    if (self.size() >= 8 && self.compare(self.size() - 8, 8, "epq-chat") == 0) {
        args.insert(args.begin(), "chat");
    }
    // llama.cpp's multi-letter short flags, which CLI11 cannot name: -np N is --parallel N, -nr
    // is --no-repack, -ngl N is --n-gpu-layers N, -ts is --tensor-split.
    for (auto & a : args) {
        if (a == "-np") {
            a = "--parallel";
        } else if (a == "-nr") {
            a = "--no-repack";
        } else if (a == "-ngl") {
            a = "--n-gpu-layers";
        } else if (a == "-ts") {
            a = "--tensor-split";
        }
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments in reverse order

    try {
        app.parse(args);
    } catch (const CLI::ParseError & e) {
        return app.exit(e);
    }
    for (auto & [sub, handler] : handlers) {
        if (sub->parsed()) {
            try {
                return handler();
            } catch (const epq::Error & e) {
                std::fprintf(stderr, "epq: error: %s\n", e.what());
                return 1;
            } catch (const std::exception & e) {
                std::fprintf(stderr, "epq: internal error: %s\n", e.what());
                return 2;
            }
        }
    }
    return 0;
}
