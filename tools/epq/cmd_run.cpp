#include "commands.h"

#include "run_common.h"
#include "util/error.h"

namespace epq::cli {

Handler add_run(CLI::App & app) {
    auto * sub = app.add_subcommand("run", "generate text from a MoE GGUF model (stdout: the generated text only)");
    auto o = std::make_shared<RunOptions>();
    auto * p = sub->add_option("-p,--prompt", o->prompt, "prompt text");
    auto * f = sub->add_option("-f,--file", o->prompt_file, "read the prompt from a file");
    auto * r = sub->add_option("--replay", o->replay,
                               "drive the run with a real text: its first --replay-prompt tokens are the prompt, "
                               "the next -n are fed one at a time instead of sampled (realistic routing on any "
                               "weights; the benchmark's decode)");
    sub->add_option("--replay-prompt", o->replay_prompt, "prompt tokens taken from the --replay text")
        ->capture_default_str();
    r->excludes(p)->excludes(f);
    add_model_flags(*sub, *o);
    return [o]() {
        if (o->prompt.empty() && o->prompt_file.empty() && o->replay.empty()) {
            throw epq::Error("no prompt: pass -p TEXT, -f FILE or --replay TEXT_FILE");
        }
        return run_generation(*o);
    };
}

}  // namespace epq::cli
