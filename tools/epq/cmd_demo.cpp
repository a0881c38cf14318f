#include "commands.h"

#include "run_common.h"
#include "synth/synthesizer.h"
#include "util/error.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

namespace epq::cli {

namespace {

// The demo model lives in the build tree, beside the binary, unless EPQ_DEMO_DIR says otherwise.
std::string demo_dir() {
    if (const char * env = std::getenv("EPQ_DEMO_DIR"); env && *env) {
        return env;
    }
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) {
        return "models";
    }
    std::string exe(buf, static_cast<size_t>(n));
    return exe.substr(0, exe.rfind('/')) + "/../models";
}

}  // namespace

Handler add_demo(CLI::App & app) {
    auto * sub = app.add_subcommand("demo", "generate the built-in demo model on first use, then run it");
    auto o = std::make_shared<RunOptions>();
    o->prompt = "The quick brown fox jumps over the lazy dog. Once upon a time,";
    o->n_predict = 48;
    sub->add_option("-p,--prompt", o->prompt, "prompt text")->capture_default_str();
    add_model_flags(*sub, *o, /*model_required=*/false);
    return [o]() {
        const std::string dir = demo_dir();
        ::mkdir(dir.c_str(), 0755);
        o->model = dir + "/demo.gguf";
        if (access(o->model.c_str(), R_OK) != 0) {
            std::fprintf(stderr, "epq: generating the demo model %s (once)\n", o->model.c_str());
            synthesize(make_preset("demo"), o->model);
        }
        std::fprintf(stderr, "epq: demo model %s (random weights, real Qwen tokenizer: the text is noise)\n",
                     o->model.c_str());
        return run_generation(*o);
    };
}

}  // namespace epq::cli
