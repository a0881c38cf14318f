#include "test_util.h"

#include "verify/sample_text.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef EPQ_BINARY
#error "EPQ_BINARY must point at the built epq"
#endif

namespace epq::test {

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        const char * base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/epq-test-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (!mkdtemp(buf.data())) {
            std::perror("mkdtemp");
            std::abort();
        }
        path = buf.data();
    }
    ~TempDir() {
        const std::string cmd = "rm -rf '" + path + "'";
        if (std::system(cmd.c_str()) != 0) {
            std::fprintf(stderr, "could not remove %s\n", path.c_str());
        }
    }
};

std::string slurp(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string quote(const std::string & s) {
    std::string q = "'";
    for (char c : s) {
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return q + "'";
}

}  // namespace

const std::string & temp_dir() {
    static TempDir dir;
    return dir.path;
}

std::string synth_model(const std::string & name, const SynthConfig & cfg) {
    static std::map<std::string, std::string> made;
    auto it = made.find(name);
    if (it != made.end()) {
        return it->second;
    }
    SynthOptions opts;
    opts.progress = false;
    // ctest runs every test in its own process, and many use the same models: they share them
    // through EPQ_TEST_MODEL_CACHE (set by the test build). A model's name there carries the
    // test binary's size and time, so a rebuilt synthesizer never meets an older file; each is
    // written under a private name and linked into place, so concurrent writers never collide.
    const char * cache = std::getenv("EPQ_TEST_MODEL_CACHE");
    struct stat self {};
    if (cache && *cache && stat("/proc/self/exe", &self) == 0) {
        mkdir(cache, 0755);
        const std::string path = std::string(cache) + "/" + name + "-" + std::to_string(self.st_size) + "-" +
                                 std::to_string(self.st_mtim.tv_sec) + ".gguf";
        if (access(path.c_str(), R_OK) != 0) {
            const std::string mine = path + "." + std::to_string(getpid());
            synthesize(cfg, mine, opts);
            // link(), not rename(): a process that lost the race must not replace the file
            // under one already using it (the pager notices a replaced model file).
            if (link(mine.c_str(), path.c_str()) != 0 && errno != EEXIST) {
                std::perror(("link " + mine).c_str());
                std::abort();
            }
            unlink(mine.c_str());
        }
        return made[name] = path;
    }
    const std::string path = temp_dir() + "/" + name + ".gguf";
    synthesize(cfg, path, opts);
    return made[name] = path;
}

SynthConfig tiny(const std::string & arch, const std::string & quant, uint64_t seed) {
    SynthConfig cfg = make_preset("tiny-" + arch);
    if (!quant.empty()) {
        cfg.quant = make_quant_preset(quant);
        cfg.quant_name = quant;
    }
    cfg.seed = seed;
    return cfg;
}

std::string prompt_of(size_t n) {
    std::string s;
    while (s.size() < n) {
        s += sample_text();
    }
    return s.substr(0, n);
}

std::vector<uint8_t> read_file(const std::string & path) {
    const std::string s = slurp(path);
    return std::vector<uint8_t>(s.begin(), s.end());
}

void write_file(const std::string & path, const std::vector<uint8_t> & bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

CommandResult run_command(const std::vector<std::string> & args, const std::string & input) {
    static int counter = 0;
    const std::string base = temp_dir() + "/cmd" + std::to_string(counter++);
    std::string cmd;
    for (const auto & a : args) {
        cmd += (cmd.empty() ? "" : " ") + quote(a);
    }
    cmd +=
        " >" + quote(base + ".out") + " 2>" + quote(base + ".err") + " <" + quote(input.empty() ? "/dev/null" : input);
    const int status = std::system(cmd.c_str());
    CommandResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    r.out = slurp(base + ".out");
    r.err = slurp(base + ".err");
    return r;
}

CommandResult run_epq(const std::vector<std::string> & args, const std::string & input) {
    std::vector<std::string> full = {EPQ_BINARY};
    full.insert(full.end(), args.begin(), args.end());
    return run_command(full, input);
}

std::string wait_for_output(const std::string & path) {
    return "for i in $(seq 2400); do [ -s '" + path + "' ] && break; sleep 0.05; done";
}

CommandResult run_epq_with_faults(const std::vector<std::string> & faults, const std::vector<std::string> & args,
                                  const std::string & input) {
    std::vector<std::string> full = {"env"};
    full.insert(full.end(), faults.begin(), faults.end());
    full.push_back(EPQ_FAULTS_BINARY);
    full.insert(full.end(), args.begin(), args.end());
    return run_command(full, input);
}

LoggedRun run_logged(const std::string & model, const std::string & prompt, const std::string & n_predict,
                     const std::vector<std::string> & extra, const std::string & tag,
                     const std::vector<std::string> & faults) {
    const std::string logits = temp_dir() + "/" + tag + ".logits", stats = temp_dir() + "/" + tag + ".json";
    std::vector<std::string> args = {"run", "-m", model,          "-p",   prompt,         "-n", n_predict,
                                     "-t",  "2",  "--logits-out", logits, "--stats-json", stats};
    args.insert(args.end(), extra.begin(), extra.end());
    LoggedRun r;
    r.result = faults.empty() ? run_epq(args) : run_epq_with_faults(faults, args);
    r.logits = read_file(logits);
    if (r.result.exit_code == 0) {
        const std::string text = slurp(stats);
        r.stats = nlohmann::json::parse(text);
    }
    return r;
}

bool sampled_under_sanitizer(const std::string & param, std::initializer_list<const char *> sample) {
    if (!kSanitized) {
        return true;
    }
    for (const char * p : sample) {
        if (param == p) {
            return true;
        }
    }
    return false;
}

}  // namespace epq::test
