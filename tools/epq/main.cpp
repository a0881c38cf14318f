// epq: run Mixture-of-Experts GGUF models larger than RAM. This file only dispatches to the
// subcommands; each lives in its own cmd_*.cpp over the epq library.
#include "commands.h"

#include "util/error.h"

#include <cstdio>
#include <map>

int main(int argc, char ** argv) {
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
    add(epq::cli::add_demo);
    add(epq::cli::add_synth);
    add(epq::cli::add_inspect);

    try {
        app.parse(argc, argv);
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
