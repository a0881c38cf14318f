// Shared helpers for the tests: temporary directories, synthetic models made once per run,
// and running the epq binary.
#pragma once

#include "synth/synthesizer.h"

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <string>
#include <vector>

namespace epq::test {

// True in the AddressSanitizer build. It runs every test, but the wide end-to-end matrices
// (every type, architecture, batch size) only on a representative sample: llama.cpp itself is
// not instrumented, and the regular build runs them all.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
// In the sanitized build, whether `param` is one of the sampled parameters.
bool sampled_under_sanitizer(const std::string & param, std::initializer_list<const char *> sample);

// A fresh directory under $TMPDIR, removed at process exit.
const std::string & temp_dir();

// Synthesizes `cfg` under `name` and returns its path: once per test run when the test build's
// model cache is set, else once per process. A name stands for one config in the whole suite.
std::string synth_model(const std::string & name, const SynthConfig & cfg);

// A tiny preset as a config, with a quant preset (default: the preset's own types) and seed.
SynthConfig tiny(const std::string & arch, const std::string & quant = "", uint64_t seed = 42);

// The first `n` characters of the sample text, repeated as needed: a prompt of a known length.
std::string prompt_of(size_t n);

std::vector<uint8_t> read_file(const std::string & path);
void write_file(const std::string & path, const std::vector<uint8_t> & bytes);

struct CommandResult {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};
// Runs the built epq binary with `args` (shell-quoted here), stdin from `input` or /dev/null.
CommandResult run_epq(const std::vector<std::string> & args, const std::string & input = "");
// Runs epq-faults, the epq command with test faults planted (tests/faults/planted_faults.h),
// with `faults` as environment assignments such as "EPQ_IO_FAULT=eio".
CommandResult run_epq_with_faults(const std::vector<std::string> & faults, const std::vector<std::string> & args,
                                  const std::string & input = "");
// A shell loop that waits until `path` is not empty, for at most two minutes (a command that
// died before writing must not leave its test waiting for ever).
std::string wait_for_output(const std::string & path);
// Runs any command (args[0] is the program).
CommandResult run_command(const std::vector<std::string> & args, const std::string & input = "");

// `epq run` on a model with 2 threads, every step's logits and the statistics written out
// (`extra` flags appended): what the exactness gates compare between paged and stock runs. With
// `faults`, epq-faults runs with them planted (see run_epq_with_faults).
struct LoggedRun {
    CommandResult result;
    std::vector<uint8_t> logits;
    nlohmann::json stats;  // empty when the run failed
};
LoggedRun run_logged(const std::string & model, const std::string & prompt, const std::string & n_predict,
                     const std::vector<std::string> & extra, const std::string & tag,
                     const std::vector<std::string> & faults = {});

}  // namespace epq::test
