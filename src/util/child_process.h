// Child processes of epq: copies of the binary itself, so a check can compare a stock llama.cpp
// process with a paged one (each with a clean ggml backend registry), and servers a benchmark
// drives in the background.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace epq {

struct SelfRun {
    int exit_code = -1;
    std::string out, err;
    double seconds = 0.0;
};

// The path of the running binary (to start copies of it). Throws epq::Error.
std::string self_exe();

// `env` entries are NAME=VALUE set for the child only.
SelfRun run_self(const std::string & exe, const std::vector<std::string> & args,
                 const std::vector<std::string> & env = {});

// A scratch directory for the children's files (removed at exit).
const std::string & scratch_dir();

std::string read_whole_file(const std::string & path);

// A command running in the background with its stderr in a file, ended on request or when the
// object goes (SIGTERM, then SIGKILL after a grace period).
class BackgroundProcess {
public:
    // argv[0] is the executable's path. Throws epq::Error when it cannot be started.
    BackgroundProcess(const std::vector<std::string> & argv, const std::string & stderr_path);
    ~BackgroundProcess();
    BackgroundProcess(const BackgroundProcess &) = delete;
    BackgroundProcess & operator=(const BackgroundProcess &) = delete;

    // False once it has exited (then exit_code() holds its status, 128 + signal if killed).
    bool running();
    int exit_code() const { return exit_code_; }
    // SIGTERM, then SIGKILL if it has not exited within `grace_seconds`. Returns the exit code.
    int stop(double grace_seconds);
    std::string err() const { return read_whole_file(err_path_); }

private:
    pid_t pid_ = -1;
    int exit_code_ = -1;
    std::string err_path_;
};

}  // namespace epq
