#include "commands.h"

#include "run_common.h"
#include "util/error.h"

namespace epq::cli {

namespace {

CLI::App * add_run_like(CLI::App & app, const std::string & name, const std::string & description, RunOptions & o) {
    auto * sub = app.add_subcommand(name, description);
    auto * p = sub->add_option("-p,--prompt", o.prompt, "prompt text");
    auto * f = sub->add_option("-f,--file", o.prompt_file, "read the prompt from a file");
    auto * r = sub->add_option("--replay", o.replay,
                               "drive the run with a real text: its first --replay-prompt tokens are the prompt, "
                               "the next -n are fed one at a time instead of sampled (realistic routing on any "
                               "weights; the benchmark's decode)");
    sub->add_option("--replay-prompt", o.replay_prompt, "prompt tokens taken from the --replay text")
        ->capture_default_str();
    r->excludes(p)->excludes(f);
    add_model_flags(*sub, o);
    return sub;
}

Handler run_handler(std::shared_ptr<RunOptions> o) {
    return [o]() {
        if (o->prompt.empty() && o->prompt_file.empty() && o->replay.empty()) {
            throw epq::Error("no prompt: pass -p TEXT, -f FILE or --replay TEXT_FILE");
        }
        return run_generation(*o);
    };
}

}  // namespace

Handler add_run(CLI::App & app) {
    auto o = std::make_shared<RunOptions>();
    add_run_like(app, "run", "generate text from a MoE GGUF model (stdout: the generated text only)", *o);
    return run_handler(o);
}

// `epq bench --routing`'s child run: `epq run` whose pager takes every expert choice from a
// recorded routing trace (arena/routing_script.h). Timing only, so it is not listed in the help
// and `epq run` itself has no such flag.
Handler add_bench_run(CLI::App & app) {
    auto o = std::make_shared<RunOptions>();
    auto * sub = add_run_like(
        app, "bench-run", "epq bench --routing's timing run: experts chosen by a recorded trace, not the router", *o);
    sub->group("");
    sub->add_option("--routing", o->routing_trace, "the routing trace whose expert choices the pager follows")
        ->required();
    return run_handler(o);
}

}  // namespace epq::cli
