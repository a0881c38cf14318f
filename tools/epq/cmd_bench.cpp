#include "commands.h"

#include "bench/bench.h"
#include "bench/serve_bench.h"
#include "util/error.h"
#include "util/child_process.h"

#include <sstream>

namespace epq::cli {

Handler add_bench(CLI::App & app) {
    auto * sub = app.add_subcommand(
        "bench", "epq against stock llama.cpp (--no-pager) on the same file and cap, beside the disk and CPU floors");
    auto o = std::make_shared<BenchOptions>();
    auto caps = std::make_shared<std::string>("none");
    add_model_option(*sub, o->model)->required();
    sub->add_option("--memcap", *caps,
                    "memory caps to run both under, comma-separated (8G or 4G,8G,12G), or 'none' (uncapped: stock "
                    "from a warm page cache, epq from a preloaded arena); needs a memory cgroup (root)")
        ->capture_default_str();
    sub->add_option("--arena", o->arena, "epq's arena: a size or 'auto' (what the cap leaves)")->capture_default_str();
    sub->add_option("-t,--threads", o->threads, "threads for both (default: all cores)");
    sub->add_option("--runs", o->runs, "interleaved runs of each per cap (medians are reported)")
        ->capture_default_str();
    sub->add_option("-n,--n-predict", o->n_decode, "decode tokens replayed per epq run")->capture_default_str();
    sub->add_option("--stock-tokens", o->n_decode_stock, "decode tokens per stock run (it can be very slow)")
        ->capture_default_str();
    sub->add_option("--replay", o->replay, "text whose tokens drive the runs (default: the shipped sample)");
    sub->add_option("--replay-prompt", o->replay_prompt, "prompt tokens (prefill is measured on them)")
        ->capture_default_str();
    sub->add_option("-c,--ctx-size", o->n_ctx, "context size")->capture_default_str();
    sub->add_option("-b,--batch-size", o->n_batch, "prompt batch size")->capture_default_str();
    sub->add_option("--prefetch", o->prefetch, "epq's --prefetch")->capture_default_str();
    sub->add_option("--policy", o->policy, "epq's --policy")->capture_default_str();
    sub->add_option("--decode-streams", o->decode_streams,
                    "with --streams: epq serve's --decode-streams (requests that generate at once; default: its auto)");
    sub->add_option("--read-threads", o->read_threads, "epq's expert reads in flight; also the read floor's")
        ->capture_default_str();
    sub->add_option("--read-seconds", o->read_floor_seconds, "how long to measure the read floor")
        ->capture_default_str();
    sub->add_flag("!--no-stock", o->stock, "skip the stock runs");
    sub->add_option("--routing", o->routing,
                    "time epq on a recorded routing trace's expert choices (epq's own, or route_trace v1 such as "
                    "data/traces/qwen3-30b-a3b.route.csv) instead of the synthetic router's: the pager reads and "
                    "computes the experts the trace names. Timing only (the output is not the model's); needs a "
                    "model of the trace's shape; no stock runs (stock follows its router), prefetch off (the "
                    "predictor guesses the router's picks, not the trace's)");
    auto * nr = sub->add_flag_function(
        "--no-repack", [o](int64_t) { o->layout = WeightLayout::file; },
        "(-nr) every run without weight repacking. By default uncapped stock uses its default flags (repacked), "
        "stock under a cap runs -nr (repacking would copy the model into RAM), and epq repacks when its arena holds "
        "every expert and keeps the file's layout (stock -nr's) when it does not");
    sub->add_flag_function(
           "--repack", [o](int64_t) { o->layout = WeightLayout::repacked; },
           "epq's runs hold weights repacked as stock's default flags do, whatever the arena")
        ->excludes(nr);
    sub->add_flag("!--keep-cache", o->drop_caches, "do not drop the page cache before capped runs");
    sub->add_option("--json", o->json_path, "write every figure and run as JSON");
    sub->add_option("--plot", o->plot_path, "draw decode tok/s against the caps to this PNG (gnuplot)");
    auto streams = std::make_shared<std::string>();
    sub->add_option("--streams", *streams,
                    "benchmark epq serve instead: concurrent streams, comma-separated (1,2,4,8); each stream gets "
                    "its own --replay-prompt tokens and -n tokens (--stock-tokens for stock), -c per stream");
    return [o, caps, streams]() {
        std::stringstream ss(*caps);
        o->memcaps.clear();
        for (std::string c; std::getline(ss, c, ',');) {
            if (!c.empty()) {
                o->memcaps.push_back(c);
            }
        }
        if (o->memcaps.empty()) {
            throw Error("--memcap needs at least one size or 'none'");
        }
        o->self_exe = self_exe();
        std::stringstream sn(*streams);
        for (std::string n; std::getline(sn, n, ',');) {
            try {
                size_t used = 0;
                o->streams.push_back(std::stoi(n, &used));
                if (used != n.size()) {
                    throw std::invalid_argument(n);
                }
            } catch (const std::exception &) {
                throw Error("--streams: '" + n + "' is not a number (use a list like 1,2,4,8)");
            }
        }
        if (!o->plot_path.empty() && !o->streams.empty()) {
            throw Error("--plot draws the single-stream benchmark; drop it with --streams (--json has every figure)");
        }
        return o->streams.empty() ? run_bench(*o) : run_stream_bench(*o);
    };
}

}  // namespace epq::cli
