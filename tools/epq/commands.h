// Each subcommand registers its options on the app and runs when parsed. Handlers return the
// process exit code; epq::Error escaping one becomes "epq: error: <message>" and exit 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace epq::cli {

using Handler = std::function<int()>;

Handler add_synth(CLI::App & app);
Handler add_inspect(CLI::App & app);
Handler add_run(CLI::App & app);
Handler add_demo(CLI::App & app);
Handler add_chat(CLI::App & app);
Handler add_verify(CLI::App & app);
Handler add_bench(CLI::App & app);
Handler add_simulate(CLI::App & app);
Handler add_serve(CLI::App & app);

}  // namespace epq::cli
