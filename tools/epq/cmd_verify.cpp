#include "commands.h"

#include "util/error.h"
#include "util/child_process.h"
#include "verify/verify.h"

#include <climits>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <fstream>
#include <unistd.h>

namespace epq::cli {

namespace {

const std::vector<std::string> kChecks = {"kernel", "layer", "multitoken", "generate", "determinism"};

CheckReport run_check(const std::string & check, const VerifyOptions & o) {
    if (check == "kernel")
        return verify_kernel(o);
    if (check == "layer")
        return verify_layer(o);
    if (check == "multitoken")
        return verify_multitoken(o);
    if (check == "generate")
        return verify_generate(o);
    if (check == "determinism")
        return verify_determinism(o);
    throw Error("unknown check '" + check + "'");
}

// A child check's verdict and summary: from its JSON report when it wrote one, else from its
// exit status and last error line (a check that did not finish is a FAIL).
struct ChildResult {
    Status status = Status::Fail;
    std::string summary;
};

ChildResult child_result(const std::string & report, const SelfRun & r) {
    ChildResult c;
    nlohmann::json result;
    try {
        result = nlohmann::json::parse(read_whole_file(report));
    } catch (...) {
    }
    if (result.is_object()) {
        c.status = status_from_label(result.value("status", std::string("FAIL")));
        c.summary = result.value("summary", std::string());
    }
    if (r.exit_code != 0) {
        c.status = Status::Fail;
    }
    if (c.summary.empty()) {
        const auto at = r.err.rfind("epq: error:");
        c.summary = at == std::string::npos ? "did not run (exit " + std::to_string(r.exit_code) + ")"
                                            : r.err.substr(at, r.err.find('\n', at) - at);
    }
    return c;
}

// Each check of `all` runs in its own process: the stock references must not share a ggml
// backend registry with the pager.
int run_all(const VerifyOptions & o, const std::vector<std::string> & passthrough) {
    std::string md =
        "# epq verify all\n\n**Model:** `" + o.model + "`\n\n| Check | Verdict | Summary |\n|---|---|---|\n";
    Status all = Status::Pass;
    nlohmann::json j = nlohmann::json::array();
    for (const auto & check : kChecks) {
        std::vector<std::string> args = {"verify", check};
        args.insert(args.end(), passthrough.begin(), passthrough.end());
        std::fprintf(stderr, "epq verify: %s ...\n", check.c_str());
        const std::string report = o.report_dir + "/" + check + ".json";
        std::remove(report.c_str());  // a stale report must not stand in for a check that did not finish
        const SelfRun r = run_self(o.self_exe, args);
        const ChildResult c = child_result(report, r);
        all = combine(all, c.status);
        md += "| " + check + " | " + status_label(c.status) + " | " + c.summary + " |\n";
        j.push_back({{"check", check},
                     {"status", status_label(c.status)},
                     {"pass", c.status == Status::Pass},
                     {"summary", c.summary},
                     {"seconds", r.seconds}});
        std::fprintf(stderr, "epq verify: %-11s %s (%.1f s)\n", check.c_str(), c.summary.c_str(), r.seconds);
    }
    md += "\n**Verdict:** " + status_label(all) + "\n";
    CheckReport report;
    report.check = "all";
    report.status = all;
    report.summary = status_label(all);
    report.markdown = md;
    report.json = {{"checks", j}, {"model", o.model}};
    report.write(o.report_dir);
    std::fputs(md.c_str(), stdout);
    return report.failed() ? 1 : 0;
}

}  // namespace

Handler add_verify(CLI::App & app) {
    auto * sub = app.add_subcommand("verify",
                                    "prove the paging path exact: kernel, layer, multitoken, generate, "
                                    "determinism, or all");
    auto o = std::make_shared<VerifyOptions>();
    auto check = std::make_shared<std::string>();
    sub->add_option("check", *check, "kernel | layer | multitoken | generate | determinism | all")
        ->required()
        ->check(CLI::IsMember({"kernel", "layer", "multitoken", "generate", "determinism", "all"}));
    add_model_option(*sub, o->model)->required();
    sub->add_option("--report-dir", o->report_dir, "where the Markdown and JSON reports go")->capture_default_str();
    sub->add_option("-t,--threads", o->n_threads, "threads")->capture_default_str();
    sub->add_option("-n,--n-predict", o->n_generate, "generate: greedy tokens")->capture_default_str();
    sub->add_option("--runs", o->runs, "determinism: runs")->capture_default_str();
    sub->add_option("--det-tokens", o->n_determinism, "determinism: tokens per run")->capture_default_str();
    sub->add_option("--batch-sizes", o->batch_sizes, "multitoken: batch sizes");
    sub->add_option("--pair", o->pairs, "kernel: LAYER:EXPERT (repeatable; default: every slot size and type)");
    sub->add_option("--layer", o->layer, "layer: the layer to recompute (default: one per slot size)");
    sub->add_flag("--fast", o->fast, "smaller runs (fewer tokens, batch sizes and runs)");
    sub->add_flag_function(
        "--no-repack", [o](int64_t) { o->repack = false; },
        "(-nr) every weight in the file's layout on both sides, as llama.cpp's -nr (default: repacked where stock's "
        "default flags repack)");
    sub->add_option(
        "--memcap", o->memcap,
        "generate/determinism: run epq in a memory cgroup of this size (e.g. 8G; root); stock stays uncapped");
    return [o, check]() {
        o->self_exe = self_exe();
        if (*check == "all") {
            std::vector<std::string> passthrough = {"-m",           o->model,
                                                    "--report-dir", o->report_dir,
                                                    "-t",           std::to_string(o->n_threads),
                                                    "-n",           std::to_string(o->n_generate),
                                                    "--runs",       std::to_string(o->runs),
                                                    "--det-tokens", std::to_string(o->n_determinism)};
            if (o->fast) {
                passthrough.push_back("--fast");
            }
            if (!o->repack) {
                passthrough.push_back("--no-repack");
            }
            if (!o->memcap.empty()) {
                passthrough.insert(passthrough.end(), {"--memcap", o->memcap});
            }
            return run_all(*o, passthrough);
        }
        const CheckReport r = run_check(*check, *o);
        r.write(o->report_dir);
        std::fputs(r.markdown.c_str(), stdout);
        std::fprintf(stderr, "epq verify %s: %s (report: %s/%s.md)\n", check->c_str(), r.summary.c_str(),
                     o->report_dir.c_str(), check->c_str());
        return r.failed() ? 1 : 0;  // NOT CHECKED is not a failure
    };
}

}  // namespace epq::cli
