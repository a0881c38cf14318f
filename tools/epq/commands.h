// Each subcommand registers its options on the app and runs when parsed. Handlers return the
// process exit code; epq::Error escaping one becomes "epq: error: <message>" and exit 1.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace epq::cli {

using Handler = std::function<int()>;

// The model option every command shares. A split model may be named by any of its shards: the
// option then holds the first, which llama.cpp loads the others from.
CLI::Option * add_model_option(CLI::App & sub, std::string & model, const std::string & names = "-m,--model");

Handler add_synth(CLI::App & app);
Handler add_inspect(CLI::App & app);
Handler add_run(CLI::App & app);
Handler add_bench_run(CLI::App & app);
Handler add_demo(CLI::App & app);
Handler add_chat(CLI::App & app);
Handler add_verify(CLI::App & app);
Handler add_bench(CLI::App & app);
Handler add_simulate(CLI::App & app);
Handler add_repack(CLI::App & app);
Handler add_serve(CLI::App & app);

}  // namespace epq::cli
