#include "util/child_process.h"

#include "util/error.h"

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace epq {

namespace {

int decode_status(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string quote(const std::string & s) {
    std::string q = "'";
    for (char c : s) {
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return q + "'";
}

struct Scratch {
    std::string path;
    Scratch() {
        const char * base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/epq-verify-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!mkdtemp(buf.data())) {
            throw Error("cannot create a scratch directory under " + tmpl);
        }
        path = buf.data();
    }
    ~Scratch() {
        const std::string cmd = "rm -rf " + quote(path);
        (void)!std::system(cmd.c_str());
    }
};

}  // namespace

const std::string & scratch_dir() {
    static Scratch s;
    return s.path;
}

std::string read_whole_file(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string self_exe() {
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) {
        throw Error("cannot find the epq binary (/proc/self/exe)");
    }
    return std::string(buf, static_cast<size_t>(n));
}

SelfRun run_self(const std::string & exe, const std::vector<std::string> & args, const std::vector<std::string> & env) {
    static int counter = 0;
    const std::string base = scratch_dir() + "/run" + std::to_string(counter++);
    std::string cmd;
    if (!env.empty()) {
        cmd = "env";
        for (const auto & e : env) {
            cmd += " " + quote(e);
        }
        cmd += " ";
    }
    cmd += quote(exe);
    for (const auto & a : args) {
        cmd += " " + quote(a);
    }
    cmd += " >" + quote(base + ".out") + " 2>" + quote(base + ".err") + " </dev/null";
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system(cmd.c_str());
    SelfRun r;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.exit_code = decode_status(status);
    r.out = read_whole_file(base + ".out");
    r.err = read_whole_file(base + ".err");
    return r;
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string> & argv, const std::string & stderr_path)
    : err_path_(stderr_path) {
    if (argv.empty()) {
        throw Error("BackgroundProcess: no command");
    }
    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::vector<std::string> args = argv;
    std::vector<char *> cargv;
    for (auto & a : args) {
        cargv.push_back(a.data());
    }
    cargv.push_back(nullptr);
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (err < 0 || null < 0) {
        const std::string why = std::strerror(errno);
        if (err >= 0) {
            close(err);
        }
        throw Error("cannot open " + stderr_path + " for a child's output: " + why);
    }
    pid_ = fork();
    if (pid_ == 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(err, 2);
        execv(cargv[0], cargv.data());
        _exit(127);
    }
    close(err);
    close(null);
    if (pid_ < 0) {
        throw Error(std::string("cannot start ") + argv[0] + ": " + std::strerror(errno));
    }
}

BackgroundProcess::~BackgroundProcess() {
    if (pid_ > 0) {
        stop(5.0);
    }
}

bool BackgroundProcess::running() {
    if (pid_ <= 0) {
        return false;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = decode_status(status);
        pid_ = -1;
        return false;
    }
    return true;
}

int BackgroundProcess::stop(double grace_seconds) {
    if (!running()) {
        return exit_code_;
    }
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_seconds);
    while (running()) {
        if (std::chrono::steady_clock::now() >= deadline) {
            kill(pid_, SIGKILL);
            int status = 0;
            waitpid(pid_, &status, 0);
            exit_code_ = decode_status(status);
            pid_ = -1;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_code_;
}

}  // namespace epq
