#include "gguf/expert_index.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "verify/sample_text.h"
#include "util/child_process.h"
#include "verify/verify.h"

#include <algorithm>
#include <cstdlib>
#include <unistd.h>
#include <sstream>

namespace epq {

namespace {

// Arenas to try: the minimum (evicts constantly), a medium one, and one that holds every
// expert - or, under a memory cap, the largest the cap allows (--arena auto). Size 0 is "auto".
std::vector<std::pair<std::string, uint64_t>> arenas(const ExpertIndex & idx, bool capped) {
    const uint64_t all = idx.expert_bytes + idx.expert_bytes / 8 + (16ull << 20);
    return {{"minimum", idx.min_arena_bytes},
            {"medium", std::max(idx.min_arena_bytes * 2, idx.expert_bytes / 4)},
            capped ? std::make_pair(std::string("auto"), uint64_t{0}) : std::make_pair(std::string("everything"), all)};
}

std::string arena_arg(uint64_t bytes) {
    return bytes ? std::to_string(bytes) : "auto";
}
std::string arena_text(uint64_t bytes) {
    return bytes ? format_bytes(bytes) : "what the cap leaves";
}

std::string memcap_script() {
    const std::string p = std::string(EPQ_SOURCE_DIR) + "/scripts/memcap.sh";
    if (access(p.c_str(), X_OK) != 0) {
        throw Error("--memcap needs " + p + " (run epq from its build tree)");
    }
    return p;
}

struct Gen {
    SelfRun run;
    std::string logits;
};

Gen generate(const VerifyOptions & o, int n, int threads, const std::vector<std::string> & mode,
             const std::string & tag) {
    const std::string logits = scratch_dir() + "/" + tag + ".logits";
    std::vector<std::string> args = {"run",
                                     "-m",
                                     o.model,
                                     "-p",
                                     sample_text(),
                                     "-n",
                                     std::to_string(n),
                                     "-t",
                                     std::to_string(threads),
                                     "-c",
                                     std::to_string(n + 512),
                                     "--logits-out",
                                     logits};
    args.insert(args.end(), mode.begin(), mode.end());
    // The layout is named on both sides: a paged run would otherwise choose it with its arena.
    args.push_back(o.repack ? "--repack" : "--no-repack");
    Gen g;
    const bool paged = std::find(mode.begin(), mode.end(), "--no-pager") == mode.end();
    if (paged && !o.memcap.empty()) {
        // The paged process runs as on a smaller machine; the stock reference stays uncapped.
        args.insert(args.begin(), {o.memcap, "--", o.self_exe});
        g.run = run_self(memcap_script(), args);
    } else {
        g.run = run_self(o.self_exe, args);
    }
    if (g.run.exit_code != 0) {
        throw Error("epq " + tag + " failed: " +
                    g.run.err.substr(g.run.err.rfind("epq:") == std::string::npos ? 0 : g.run.err.rfind("epq:")));
    }
    g.logits = read_whole_file(logits);
    return g;
}

}  // namespace

CheckReport verify_generate(const VerifyOptions & o) {
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(o.model));
    const int n = o.fast ? std::min(o.n_generate, 64) : o.n_generate;
    CheckReport r;
    r.check = "generate";
    std::ostringstream md, rows;
    bool all_ok = true;
    nlohmann::json jcases = nlohmann::json::array();
    for (int threads : {1, 2}) {
        const Gen stock = generate(o, n, threads, {"--no-pager"}, "stock-t" + std::to_string(threads));
        for (const auto & [name, bytes] : arenas(idx, !o.memcap.empty())) {
            const std::string tag = name + "-t" + std::to_string(threads);
            // Prediction on, so its guessed reads (landing while layers compute) are checked too.
            const Gen paged = generate(o, n, threads, {"--arena", arena_arg(bytes), "--prefetch", "on"}, tag);
            const bool tokens_same = paged.run.out == stock.run.out;
            const bool logits_same = paged.logits == stock.logits && !stock.logits.empty();
            // First step whose logits differ, for the report.
            const size_t step_bytes = stock.logits.size() / static_cast<size_t>(std::max(1, n));
            long first_diff = -1;
            for (size_t i = 0; i < std::min(stock.logits.size(), paged.logits.size()); ++i) {
                if (stock.logits[i] != paged.logits[i]) {
                    first_diff = step_bytes ? static_cast<long>(i / step_bytes) : 0;
                    break;
                }
            }
            const bool ok = tokens_same && logits_same;
            all_ok = all_ok && ok;
            rows << "| " << threads << " | " << name << " (" << arena_text(bytes) << ") | " << n << " | "
                 << (tokens_same ? "identical" : "DIFFER") << " | " << (logits_same ? "bit-identical" : "DIFFER")
                 << " | " << (first_diff < 0 ? std::string("-") : std::to_string(first_diff)) << " | "
                 << (ok ? "PASS" : "FAIL") << " |\n";
            jcases.push_back({{"threads", threads},
                              {"arena", name},
                              {"arena_bytes", bytes},
                              {"tokens", n},
                              {"tokens_identical", tokens_same},
                              {"logits_identical", logits_same},
                              {"first_differing_step", first_diff},
                              {"pass", ok}});
        }
    }
    r.status = all_ok ? Status::Pass : Status::Fail;
    md << "# Autoregressive equivalence with stock llama.cpp\n\n**Verdict:** " << (all_ok ? "PASS" : "FAIL")
       << "  \n**Model:** `" << o.model << "`  \n**Method:** " << n
       << " greedy tokens after the same English prompt; every step's full-vocabulary logits compared byte for "
          "byte with stock llama.cpp (`--no-pager`, same thread count, same weight layout: " +
              std::string(o.repack ? "repacked where ggml repacks, stock's default" : "no repacking (-nr)") + ")."
       << (o.memcap.empty() ? std::string() : " epq ran in a " + o.memcap + " memory cgroup; stock ran uncapped.")
       << "\n\n"
       << "| Threads | Arena | Tokens | Tokens | Logits | First differing step | Verdict "
          "|\n|---:|---|---:|---|---|---:|---|\n"
       << rows.str()
       << "\nEvery paged run had next-layer prediction on (`--prefetch on`): its guessed reads change where "
          "bytes come from and when, never the math. An arena that holds every expert makes no guesses.\n";
    r.markdown = md.str();
    r.summary = std::string(all_ok ? "PASS" : "FAIL") + ": " + std::to_string(n) +
                " greedy tokens, logits bit-identical to stock for 3 arena sizes x 1 and 2 threads";
    if (!all_ok) {
        r.summary = "FAIL: " + std::to_string(n) + " greedy tokens: logits or tokens differ from stock (see report)";
    }
    r.json = {{"cases", jcases}, {"tokens", n}, {"model", o.model}};
    return r;
}

CheckReport verify_determinism(const VerifyOptions & o) {
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(o.model));
    const int runs = o.fast ? std::min(o.runs, 3) : o.runs;
    const auto sizes = arenas(idx, !o.memcap.empty());
    CheckReport r;
    r.check = "determinism";
    std::ostringstream md, lines;
    std::string first;
    bool all_ok = true;
    nlohmann::json jruns = nlohmann::json::array();
    for (int i = 0; i < runs; ++i) {
        // A different arena each run: what was resident, and where, differs between runs. The
        // last size class of arena starts preloaded in file order, so even the first expert
        // read (and where it lands) differs from the cold runs': a slot corrupted the same way
        // in every run would otherwise look deterministic.
        const auto & [size_name, bytes] = sizes[static_cast<size_t>(i) % sizes.size()];
        const bool preload = static_cast<size_t>(i) % sizes.size() == sizes.size() - 1 && bytes != 0;
        std::vector<std::string> args = {"--arena", arena_arg(bytes)};
        if (preload) {
            args.push_back("--preload");
        }
        const std::string name = size_name + (preload ? ", preloaded" : "");
        const Gen g = generate(o, o.n_determinism, o.n_threads, args, "det" + std::to_string(i));
        if (i == 0) {
            first = g.logits;
        }
        const bool same = g.logits == first && !first.empty();
        all_ok = all_ok && same;
        char buf[160];
        std::snprintf(buf, sizeof buf, "run%d: %.1fs (arena %s, %s)%s", i, g.run.seconds, name.c_str(),
                      arena_text(bytes).c_str(), i == 0 ? "" : (same ? " identical" : " DIFFERS"));
        lines << buf << "\n";
        jruns.push_back({{"run", i}, {"seconds", g.run.seconds}, {"arena", name}, {"identical_to_run0", same}});
    }
    const size_t vocab_bytes = first.size() / static_cast<size_t>(std::max(1, o.n_determinism));
    r.status = all_ok ? Status::Pass : Status::Fail;
    md << "# Determinism\n\n**Verdict:** " << (all_ok ? "PASS" : "FAIL") << "  \n**Model:** `" << o.model << "`  \n"
       << runs << " runs x " << o.n_determinism << " tokens x " << vocab_bytes / 4 << " vocab, " << o.n_threads
       << " threads\n\n```\n"
       << lines.str() << "```\n\n"
       << (all_ok ? "run1..run" + std::to_string(runs - 1) +
                        " are byte-identical to run0, although each run had a different arena."
                  : "Some runs differ from run0.")
       << "\n";
    r.markdown = md.str();
    r.summary = std::string(all_ok ? "PASS" : "FAIL") + ": " + std::to_string(runs) + " runs x " +
                std::to_string(o.n_determinism) + " tokens, full-vocabulary logits " +
                (all_ok ? "byte-identical" : "differ");
    r.json = {{"runs", jruns}, {"tokens", o.n_determinism}};
    return r;
}

}  // namespace epq
