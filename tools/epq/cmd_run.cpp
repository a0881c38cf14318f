#include "commands.h"

#include "run_common.h"
#include "util/error.h"

namespace epq::cli {

Handler add_run(CLI::App & app) {
    auto * sub = app.add_subcommand("run", "generate text from a MoE GGUF model (stdout: the generated text only)");
    auto o = std::make_shared<RunOptions>();
    auto * p = sub->add_option("-p,--prompt", o->prompt, "prompt text");
    auto * f = sub->add_option("-f,--file", o->prompt_file, "read the prompt from a file");
    p->excludes(f);
    add_model_flags(*sub, *o);
    return [o]() {
        if (o->prompt.empty() && o->prompt_file.empty()) {
            throw epq::Error("no prompt: pass -p TEXT or -f FILE");
        }
        return run_generation(*o);
    };
}

}  // namespace epq::cli
