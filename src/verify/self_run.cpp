#include "verify/self_run.h"

#include "util/error.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sys/wait.h>
#include <unistd.h>

namespace epq {

namespace {

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
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    r.out = read_whole_file(base + ".out");
    r.err = read_whole_file(base + ".err");
    return r;
}

}  // namespace epq
