#include "bench/bench.h"

#include "bench/read_floor.h"
#include "arena/routing_script.h"
#include "arena/trace.h"
#include "bench/time_bound.h"
#include "engine/memory_budget.h"
#include "engine/llama_log.h"
#include "engine/paged_model.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "sim/routing_stats.h"
#include "util/byte_size.h"
#include "util/error.h"
#include "util/child_process.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace epq {

std::vector<std::string> layout_flags(bool paged, const std::string & cap, WeightLayout layout) {
    if (layout == WeightLayout::file || (!paged && cap != "none")) {
        return {"--no-repack"};
    }
    if (paged && layout == WeightLayout::repacked) {
        return {"--repack"};
    }
    return {};
}

std::string source_file(const std::string & rel) {
    return std::string(EPQ_SOURCE_DIR) + "/" + rel;
}

bool drop_page_cache() {
    sync();
    std::ofstream f("/proc/sys/vm/drop_caches");
    f << "3\n";
    f.flush();
    return static_cast<bool>(f);
}

namespace {

// Reads the whole file once so stock llama.cpp's mmap finds it in the page cache.
void warm_page_cache(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> buf(8 << 20);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    }
}

double num(const nlohmann::json & j, const char * key) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

struct Child {
    const BenchOptions & o;
    std::string replay;
    int threads;
    bool dropped_ok = true;

    RunFigures run(const std::string & cap, bool paged, const std::vector<std::string> & extra,
                   const std::string & tag) {
        const std::string json = scratch_dir() + "/" + tag + ".json";
        const int n = paged ? o.n_decode : o.n_decode_stock;
        const bool scripted = paged && !o.routing.empty();
        std::vector<std::string> args = {scripted ? "bench-run" : "run",
                                         "-m",
                                         o.model,
                                         "--replay",
                                         replay,
                                         "--replay-prompt",
                                         std::to_string(o.replay_prompt),
                                         "-n",
                                         std::to_string(n),
                                         "-t",
                                         std::to_string(threads),
                                         "-c",
                                         std::to_string(o.n_ctx),
                                         "-b",
                                         std::to_string(o.n_batch),
                                         "--stats-json",
                                         json};
        if (paged) {
            args.insert(args.end(), {"--arena", o.arena, "--prefetch", scripted ? "off" : o.prefetch, "--policy",
                                     o.policy, "--read-threads", std::to_string(o.read_threads)});
            if (scripted) {
                args.insert(args.end(), {"--routing", o.routing});
            }
        } else {
            args.push_back("--no-pager");
        }
        for (const auto & f : layout_flags(paged, cap, o.layout)) {
            args.push_back(f);
        }
        args.insert(args.end(), extra.begin(), extra.end());
        if (cap != "none" && o.drop_caches) {
            dropped_ok = drop_page_cache() && dropped_ok;
        }
        std::fprintf(stderr, "epq bench: %s run, cap %s ...\n", paged ? "epq" : "stock", cap.c_str());
        SelfRun r;
        if (cap == "none") {
            r = run_self(o.self_exe, args);
        } else {
            args.insert(args.begin(), {cap, "--", o.self_exe});
            r = run_self(source_file("scripts/memcap.sh"), args);
        }
        RunFigures f;
        f.memcap_line = memcap_line_of(r.err);
        if (r.exit_code != 0) {
            f.error = child_failure(r.exit_code, r.err);
            std::fprintf(stderr, "epq bench:   failed: %s\n", f.error.c_str());
            return f;
        }
        f.stats = nlohmann::json::parse(read_whole_file(json));
        const auto & s = f.stats;
        f.ok = true;
        f.decode_tps = num(s, "decode_tokens_per_second");
        f.prefill_tps = num(s, "prefill_tokens_per_second");
        f.decode_seconds = num(s, "decode_seconds");
        f.n_decode = static_cast<int>(num(s, "generated_tokens"));
        f.n_prompt = static_cast<int>(num(s, "prompt_tokens"));
        f.decode_wait_seconds = num(s, "decode_read_wait_seconds");
        f.decode_missed_bytes = num(s, "decode_missed_expert_bytes");
        f.decode_read_bytes = num(s, "decode_bytes_read");
        f.decode_hit_rate = num(s, "decode_hit_rate");
        f.prefill_seconds = num(s, "prefill_seconds");
        f.prefill_read_bytes = num(s, "prefill_bytes_read");
        f.decode_repack_seconds = num(s, "decode_repack_seconds");
        f.prefill_repack_seconds = num(s, "prefill_repack_seconds");
        f.repacked = !s.contains("weights_repacked") || s["weights_repacked"].get<bool>();
        if (s.contains("prefill_time")) {
            f.prefill_wait_seconds = num(s["prefill_time"], "read_wait_seconds");
        }
        f.arena_bytes = static_cast<uint64_t>(num(s, "arena_bytes"));
        f.storage_read_bytes = static_cast<uint64_t>(num(s, "storage_read_bytes"));
        std::fprintf(stderr, "epq bench:   decode %.2f tok/s, prefill %.2f tok/s\n", f.decode_tps, f.prefill_tps);
        return f;
    }
};

struct CapResult {
    std::string cap;
    std::vector<RunFigures> epq, stock;
    double epq_decode = 0, stock_decode = 0, epq_prefill = 0, stock_prefill = 0;
    double compute_s = 0;  // per token
    std::string compute_source;
    double missed_per_token = 0, read_per_token = 0, hit_rate = 0;
    double roofline = 0;
    // Prefill: prompt tokens / max(prefill compute with every expert resident, expert bytes the
    // prefill read / read bandwidth).
    double prefill_compute_s = 0, prefill_read_bytes = 0, prefill_roofline = 0;
    int n_prompt = 0;
    uint64_t arena = 0;
    bool repacked = true;  // epq's layout in these runs
    TimeBound decode_bound, prefill_bound;
    // Read floor samples (bytes/s): the first, taken before any run, and one before each of this
    // cap's epq runs, so the floor is measured beside what it bounds (the disk drifts).
    std::vector<double> floor;
    double floor_bw = 0;  // their median: the roofline's bandwidth
};

}  // namespace

double median(std::vector<double> v) {
    if (v.empty()) {
        return 0.0;
    }
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double median_of(const std::vector<RunFigures> & runs, double RunFigures::*f) {
    std::vector<double> v;
    for (const auto & r : runs) {
        if (r.ok) {
            v.push_back(r.*f);
        }
    }
    return median(std::move(v));
}

std::string child_failure(int exit_code, const std::string & err) {
    if (exit_code == 137) {
        return "OOM-killed under the cap";
    }
    const size_t at = err.rfind("epq: error:");
    return at != std::string::npos ? err.substr(at, err.find('\n', at) - at)
                                   : "exit status " + std::to_string(exit_code);
}

std::string memcap_line_of(const std::string & err) {
    std::string found;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("memcap:", 0) == 0) {
            found = line;
        }
    }
    return found;
}

void write_json_file(const std::string & path, const nlohmann::json & j) {
    std::ofstream f(path);
    f << j.dump(2) << "\n";
    if (!f) {
        throw Error("cannot write " + path);
    }
    std::fprintf(stderr, "epq bench: wrote %s\n", path.c_str());
}

std::string default_replay_text() {
    return source_file("data/text/tale-of-two-cities-ch1.txt");
}

int run_bench(const BenchOptions & asked) {
    BenchOptions o = asked;
    o.stock = o.stock && o.routing.empty();  // stock follows its router: nothing to compare
    if (o.runs < 1 || o.n_decode < 2 || o.n_decode_stock < 2 || o.replay_prompt < 1) {
        throw Error("--runs must be >= 1, -n and --stock-tokens >= 2, --replay-prompt >= 1");
    }
    const GgufFile file = GgufFile::open(o.model);
    file.require_tensor_data();
    const ExpertIndex idx = ExpertIndex::build(file);
    Child child{o, o.replay.empty() ? default_replay_text() : o.replay,
                o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
    if (access(child.replay.c_str(), R_OK) != 0) {
        throw Error("cannot read the replay text " + child.replay);
    }
    for (const auto & cap : o.memcaps) {
        if (cap != "none" && !parse_byte_size(cap)) {
            throw Error("--memcap: '" + cap + "' is not a size (like 8G) or 'none'");
        }
    }
    if (!o.routing.empty()) {
        const RoutingScript script(read_trace(o.routing), idx.layers.size(), idx.n_expert, idx.n_expert_used);
        std::fprintf(stderr,
                     "epq bench: TIMING ONLY: epq's runs follow the expert choices of %s (%zu prompt tokens, %zu "
                     "decode steps, repeated as needed), not this model's router; no stock runs, prefetch off\n",
                     o.routing.c_str(), script.prompt_tokens(), script.decode_steps());
    }
    std::fprintf(stderr,
                 "epq bench: %s: %s, %s (experts %s, dense %s), %d threads; decode replays %s after a %d-token "
                 "prompt\n",
                 o.model.c_str(), idx.arch.c_str(), format_bytes(idx.file_size).c_str(),
                 format_bytes(idx.expert_bytes).c_str(), format_bytes(idx.dense_bytes).c_str(), child.threads,
                 child.replay.c_str(), o.replay_prompt);

    // Experts rewritten by `epq repack` beside the model: every epq run then reads them ready-
    // repacked and holds stock's default layout, capped or not (backend/repacked_experts.h).
    set_llama_verbosity(false);  // checking the file repacks a few experts: ggml logs each
    std::string ready_note;
    const bool ready = o.layout == WeightLayout::automatic && find_repacked_experts(idx, "auto", &ready_note);
    if (ready) {
        std::fprintf(stderr, "epq bench: experts ready-repacked in %s: every epq run holds stock's default layout\n",
                     repacked_experts_path(idx).c_str());
    } else if (!ready_note.empty()) {
        std::fprintf(stderr, "epq bench: %s\n", ready_note.c_str());
    }

    // Floor 1: the disk.
    const ReadFloor rf = measure_expert_reads(o.model, idx, o.read_threads, o.read_floor_seconds);
    const double bw = rf.bytes_per_second();
    std::fprintf(stderr, "epq bench: direct reads of whole experts: %s/s (%llu experts, %s, %d in flight)\n",
                 format_bytes(static_cast<uint64_t>(bw)).c_str(), static_cast<unsigned long long>(rf.reads),
                 rf.direct ? "O_DIRECT" : "buffered: O_DIRECT unsupported, the page cache may flatter this",
                 o.read_threads * 2);

    // Floor 2: the CPU, every expert resident (only where this machine's RAM can hold them), in
    // each layout a row's epq runs use: the kernels differ (an arena that holds every expert
    // repacks by default, a capped one keeps the file's layout).
    struct ComputeFloor {
        double decode = 0.0, prefill = 0.0;  // seconds per token, seconds for the prompt
    };
    ComputeFloor floors[2];  // [repacked]
    const char * compute_floor_source = "measured: epq with every expert preloaded, uncapped, same layout";
    const MemoryAvailable mem = available_memory();
    if (mem.bytes > idx.expert_bytes + idx.dense_bytes + (2ull << 30)) {
        const bool capped =
            std::any_of(o.memcaps.begin(), o.memcaps.end(), [](const std::string & c) { return c != "none"; });
        std::vector<std::vector<std::string>> extras = {{"--preload"}};
        if (capped && o.layout == WeightLayout::automatic && !ready) {
            extras.push_back({"--preload", "--no-repack"});
        }
        for (const auto & extra : extras) {
            RunFigures f = child.run("none", true, extra, extra.size() > 1 ? "floor-nr" : "floor");
            if (f.ok && f.decode_missed_bytes == 0 && f.n_decode > 0) {
                floors[f.repacked] = {f.decode_seconds / f.n_decode, f.prefill_seconds};
            }
        }
    }

    // The routing of the first epq run's decode is recorded, to compare with published figures.
    const std::string trace_path = scratch_dir() + "/routing.trace";
    bool traced = false;
    std::vector<CapResult> caps;
    for (const auto & cap : o.memcaps) {
        CapResult c;
        c.cap = cap;
        const bool warm = cap == "none";
        for (int r = 0; r < o.runs; ++r) {
            // Interleaved, so drift of the machine hits both alike. Uncapped, both run warm:
            // stock from a page cache that holds the file, epq from a preloaded arena.
            if (!warm) {
                c.floor.push_back(measure_expert_reads(o.model, idx, o.read_threads, o.read_floor_seconds / 2, 2 + r)
                                      .bytes_per_second());
            }
            std::vector<std::string> extra;
            if (warm) {
                extra.push_back("--preload");
            }
            if (!traced) {
                extra.insert(extra.end(), {"--trace", trace_path});
            }
            c.epq.push_back(child.run(cap, true, extra, "epq-" + cap + "-" + std::to_string(r)));
            traced = traced || c.epq.back().ok;
            if (o.stock) {
                if (warm) {
                    warm_page_cache(o.model);
                }
                c.stock.push_back(child.run(cap, false, {}, "stock-" + cap + "-" + std::to_string(r)));
            }
        }
        c.epq_decode = median_of(c.epq, &RunFigures::decode_tps);
        c.epq_prefill = median_of(c.epq, &RunFigures::prefill_tps);
        c.stock_decode = median_of(c.stock, &RunFigures::decode_tps);
        c.stock_prefill = median_of(c.stock, &RunFigures::prefill_tps);
        std::vector<RunFigures> per_token = c.epq;
        for (auto & f : per_token) {
            const double n = std::max(1, f.n_decode);
            f.decode_missed_bytes /= n;
            f.decode_read_bytes /= n;
            f.decode_seconds = (f.decode_seconds - f.decode_wait_seconds) / n;  // CPU-busy time per token
        }
        c.missed_per_token = median_of(per_token, &RunFigures::decode_missed_bytes);
        c.read_per_token = median_of(per_token, &RunFigures::decode_read_bytes);
        c.hit_rate = median_of(c.epq, &RunFigures::decode_hit_rate);
        for (const auto & f : c.epq) {
            c.arena = f.ok ? f.arena_bytes : c.arena;
            c.repacked = f.ok ? f.repacked : c.repacked;
        }
        const ComputeFloor & floor = floors[c.repacked];
        if (floor.decode > 0) {
            c.compute_s = floor.decode;
            c.compute_source = compute_floor_source;
        } else {
            c.compute_s = median_of(per_token, &RunFigures::decode_seconds);
            c.compute_source = "estimated: decode time not spent waiting on reads, this cap's epq runs";
        }
        c.floor.push_back(bw);
        c.floor_bw = median(c.floor);
        const double io_s = c.floor_bw > 0 ? c.missed_per_token / c.floor_bw : 0.0;
        c.roofline = std::max(c.compute_s, io_s) > 0 ? 1.0 / std::max(c.compute_s, io_s) : 0.0;
        for (const auto & f : c.epq) {
            c.n_prompt = f.ok ? f.n_prompt : c.n_prompt;
        }
        c.prefill_read_bytes = median_of(c.epq, &RunFigures::prefill_read_bytes);
        if (floor.prefill > 0) {
            c.prefill_compute_s = floor.prefill;
        } else {
            std::vector<RunFigures> busy = c.epq;
            for (auto & f : busy) {
                f.prefill_seconds -= f.prefill_wait_seconds;
            }
            c.prefill_compute_s = median_of(busy, &RunFigures::prefill_seconds);
        }
        const double prefill_io_s = c.floor_bw > 0 ? c.prefill_read_bytes / c.floor_bw : 0.0;
        const double prefill_s = std::max(c.prefill_compute_s, prefill_io_s);
        c.prefill_roofline = prefill_s > 0 ? c.n_prompt / prefill_s : 0.0;
        // The bound each phase sits on, from the medians of its parts.
        std::vector<RunFigures> parts = c.epq;
        for (auto & f : parts) {
            const double n = std::max(1, f.n_decode);
            f.decode_wait_seconds /= n;
            f.decode_repack_seconds /= n;
        }
        c.decode_bound = time_bound({c.epq_decode > 0 ? 1.0 / c.epq_decode : 0.0, c.compute_s,
                                     median_of(parts, &RunFigures::decode_wait_seconds),
                                     median_of(parts, &RunFigures::decode_repack_seconds), io_s});
        c.prefill_bound = time_bound({median_of(c.epq, &RunFigures::prefill_seconds), c.prefill_compute_s,
                                      median_of(c.epq, &RunFigures::prefill_wait_seconds),
                                      median_of(c.epq, &RunFigures::prefill_repack_seconds), prefill_io_s});
        caps.push_back(std::move(c));
    }

    // The table.
    std::string out = "\nepq bench: " + o.model + " (" + idx.arch + "), " + std::to_string(child.threads) +
                      " threads, medians of " + std::to_string(o.runs) + " interleaved runs\n";
    if (!o.routing.empty()) {
        out += "TIMING ONLY: every routed expert chosen by the recorded trace " + o.routing +
               ", not by this model's router (prefetch off)\n";
    }
    std::string compute_floors;
    for (const bool repacked : {true, false}) {
        if (floors[repacked].decode > 0) {
            compute_floors += (compute_floors.empty() ? "" : ", ") +
                              format_number("%.1f ms/token", floors[repacked].decode * 1000) +
                              (repacked ? " repacked" : " in the file's layout");
        }
    }
    out += "floors: direct expert reads " + format_bytes(static_cast<uint64_t>(bw)) + "/s; compute " +
           (compute_floors.empty() ? std::string("per cap (estimated from decode time not spent waiting on reads)")
                                   : compute_floors + " (" + compute_floor_source + ")") +
           "\n";
    out += o.layout == WeightLayout::file
               ? "layouts: -nr for every run (no repacking)\n"
               : std::string(
                     "layouts: stock with default flags uncapped, -nr under a cap (repacking would copy the model "
                     "into RAM); epq ") +
                     (o.layout == WeightLayout::repacked ? "repacked (--repack) in every run\n"
                      : ready ? "repacked in every run, read ready-repacked from " + repacked_experts_path(idx) + "\n"
                              : "repacked when its arena holds every expert, else the file's layout (stock -nr's)\n");
    char line[512];
    std::snprintf(line, sizeof line, "%-6s %10s %11s %11s %8s %11s %11s %8s %12s %12s %10s %9s\n", "cap", "arena",
                  "epq tok/s", "stock tok/s", "ratio", "epq prefill", "stk prefill", "hit", "missed/tok", "read/tok",
                  "roofline", "of roof");
    out += line;
    for (const auto & c : caps) {
        std::snprintf(line, sizeof line,
                      "%-6s %10s %11.2f %11.2f %7.1fx %11.2f %11.2f %7.1f%% %12s %12s %10.2f %8.0f%%\n", c.cap.c_str(),
                      format_bytes(c.arena).c_str(), c.epq_decode, c.stock_decode,
                      c.stock_decode > 0 ? c.epq_decode / c.stock_decode : 0.0, c.epq_prefill, c.stock_prefill,
                      100.0 * c.hit_rate, format_bytes(static_cast<uint64_t>(c.missed_per_token)).c_str(),
                      format_bytes(static_cast<uint64_t>(c.read_per_token)).c_str(), c.roofline,
                      c.roofline > 0 ? 100.0 * c.epq_decode / c.roofline : 0.0);
        out += line;
    }
    out +=
        "roofline tok/s = 1 / max(compute s/token, missed bytes/token / read bandwidth); read/tok counts every "
        "byte read in decode (speculative included), missed/tok the expert bytes of those reads\n";
    for (const auto & c : caps) {
        if (c.epq_decode <= 0) {
            continue;  // no epq run succeeded: the notes below say why
        }
        std::snprintf(line, sizeof line, "cap %s: epq's weights %s; decode bound by %s, %.1f ms/token (%s per token)\n",
                      c.cap.c_str(), c.repacked ? "repacked (stock's default layout)" : "in the file's layout (-nr)",
                      c.decode_bound.name.c_str(), 1e3 * c.decode_bound.seconds, c.decode_bound.detail.c_str());
        out += line;
        std::snprintf(line, sizeof line, "cap %s: prefill bound by %s, %.2f s (%s, in all)\n", c.cap.c_str(),
                      c.prefill_bound.name.c_str(), c.prefill_bound.seconds, c.prefill_bound.detail.c_str());
        out += line;
    }
    for (const auto & c : caps) {
        if (c.prefill_roofline <= 0) {
            continue;
        }
        std::snprintf(line, sizeof line,
                      "cap %s: prefill of %d tokens %.2f tok/s, roofline %.2f tok/s (%.0f%%): compute %.2f s (%s), "
                      "read %s at the floor %.2f s\n",
                      c.cap.c_str(), c.n_prompt, c.epq_prefill, c.prefill_roofline,
                      100.0 * c.epq_prefill / c.prefill_roofline, c.prefill_compute_s,
                      floors[c.repacked].prefill > 0 ? "every expert preloaded, same layout"
                                                     : "estimated: prefill not waiting on reads",
                      format_bytes(static_cast<uint64_t>(c.prefill_read_bytes)).c_str(),
                      c.floor_bw > 0 ? c.prefill_read_bytes / c.floor_bw : 0.0);
        out += line;
        if (c.epq_prefill > c.prefill_roofline * 1.001) {
            out.insert(out.size() - 1, " - prefill ABOVE its roofline: a floor (compute or read) is wrong");
        }
    }
    // The floor beside the runs it bounds, and every run that beat it: a floor a run beats is wrong.
    for (const auto & c : caps) {
        if (c.cap == "none") {
            continue;
        }
        const auto [lo, hi] = std::minmax_element(c.floor.begin(), c.floor.end());
        double run_bw = 0;
        for (const auto & f : c.epq) {
            run_bw = std::max(run_bw, f.ok ? num(f.stats, "read_bandwidth_bytes_per_second") : 0.0);
        }
        std::snprintf(line, sizeof line,
                      "cap %s: read floor %s/s (median of %zu samples taken before its runs; %s/s to %s/s); its epq "
                      "runs read at up to %s/s while reading",
                      c.cap.c_str(), format_bytes(static_cast<uint64_t>(c.floor_bw)).c_str(), c.floor.size(),
                      format_bytes(static_cast<uint64_t>(*lo)).c_str(),
                      format_bytes(static_cast<uint64_t>(*hi)).c_str(),
                      format_bytes(static_cast<uint64_t>(run_bw)).c_str());
        out += line;
        if (run_bw > *hi) {
            out += " - ABOVE every floor sample: the floor understates this disk (a cache below the file system?)";
        }
        if (c.roofline > 0 && c.epq_decode > c.roofline) {
            out += " - decode ABOVE its roofline: a floor (compute or read) is wrong";
        }
        out += "\n";
    }
    if (!child.dropped_ok) {
        out += "note: the page cache could not be dropped before capped runs (needs root): stock may look faster\n";
    }
    for (const auto & c : caps) {
        for (const auto * runs : {&c.epq, &c.stock}) {
            for (const auto & f : *runs) {
                if (!f.ok) {
                    out += "note: a " + std::string(runs == &c.epq ? "epq" : "stock") + " run under cap " + c.cap +
                           " failed: " + f.error + "\n";
                }
            }
        }
    }
    nlohmann::json routing;
    if (traced) {
        out += routing_report(read_trace(trace_path), idx.arch, routing);
    }
    std::fputs(out.c_str(), stdout);

    if (!o.json_path.empty()) {
        nlohmann::json j;
        j["model"] = o.model;
        j["routing_trace"] = o.routing;  // "" : the model's own router
        j["arch"] = idx.arch;
        j["threads"] = child.threads;
        j["runs"] = o.runs;
        j["replay"] = child.replay;
        j["read_floor"] = {{"bytes_per_second", bw},
                           {"experts", rf.reads},
                           {"bytes", rf.bytes},
                           {"seconds", rf.seconds},
                           {"direct", rf.direct}};
        j["compute_floor_seconds_per_token"] = floors[true].decode > 0 ? floors[true].decode : floors[false].decode;
        j["compute_floor_file_layout_seconds_per_token"] = floors[false].decode;
        j["routing"] = routing;
        j["caps"] = nlohmann::json::array();
        for (const auto & c : caps) {
            nlohmann::json jc = {
                {"memcap", c.cap},
                {"arena_bytes", c.arena},
                {"epq_decode_tps", c.epq_decode},
                {"stock_decode_tps", c.stock_decode},
                {"ratio", c.stock_decode > 0 ? c.epq_decode / c.stock_decode : 0.0},
                {"epq_prefill_tps", c.epq_prefill},
                {"stock_prefill_tps", c.stock_prefill},
                {"decode_hit_rate", c.hit_rate},
                {"missed_expert_bytes_per_token", c.missed_per_token},
                {"read_bytes_per_token", c.read_per_token},
                {"compute_seconds_per_token", c.compute_s},
                {"compute_source", c.compute_source},
                {"roofline_tps", c.roofline},
                {"read_floor_bytes_per_second", c.floor_bw},
                {"read_floor_samples", c.floor},
                {"fraction_of_roofline", c.roofline > 0 ? c.epq_decode / c.roofline : 0.0},
                {"prefill_roofline_tps", c.prefill_roofline},
                {"prefill_compute_seconds", c.prefill_compute_s},
                {"prefill_read_bytes", c.prefill_read_bytes},
                {"prefill_fraction_of_roofline", c.prefill_roofline > 0 ? c.epq_prefill / c.prefill_roofline : 0.0},
                {"epq_weights_repacked", c.repacked},
                {"decode_bound",
                 {{"name", c.decode_bound.name},
                  {"seconds_per_token", c.decode_bound.seconds},
                  {"parts", c.decode_bound.detail}}},
                {"prefill_bound",
                 {{"name", c.prefill_bound.name},
                  {"seconds", c.prefill_bound.seconds},
                  {"parts", c.prefill_bound.detail}}}};
            for (const auto * runs : {&c.epq, &c.stock}) {
                nlohmann::json arr = nlohmann::json::array();
                for (const auto & f : *runs) {
                    arr.push_back(f.ok ? f.stats : nlohmann::json{{"error", f.error}});
                    if (!f.memcap_line.empty()) {
                        arr.back()["memcap"] = f.memcap_line;
                    }
                }
                jc[runs == &c.epq ? "epq_runs" : "stock_runs"] = arr;
            }
            j["caps"].push_back(jc);
        }
        write_json_file(o.json_path, j);
    }

    if (!o.plot_path.empty()) {
        const std::string data = o.plot_path + ".dat", script = o.plot_path + ".gp";
        {
            std::ofstream d(data);
            d << "# cap(arena) epq_decode_tps stock_decode_tps roofline_tps\n";
            for (const auto & c : caps) {
                d << '"' << c.cap << "\\n(arena " << format_bytes(c.arena) << ")\" " << c.epq_decode << ' '
                  << c.stock_decode << ' ' << c.roofline << "\n";
            }
            std::ofstream g(script);
            g << "set terminal png size 900,560\nset output '" << o.plot_path << "'\n"
              << "set title 'decode tokens/s against memory cap: " << idx.arch << ", " << child.threads
              << " threads'\nset ylabel 'tokens/s (log scale)'\nset logscale y\nset grid\n"
              << "set xlabel 'memory cap (epq arena within it)'\nset key top left\nset offsets 0.3, 0.3, 0, 0\nset "
                 "bmargin 5\nset xlabel offset 0,-1\n"
              << "plot '" << data << "' using 0:2:xtic(1) with linespoints lw 2 title 'epq', "
              << "'' using 0:3 with linespoints lw 2 title 'stock llama.cpp (mmap; -nr under a cap)', "
              << "'' using 0:4 with lines dt 2 title 'epq roofline'\n";
        }
        const SelfRun g = run_self("/bin/sh", {"-c", "command -v gnuplot >/dev/null && gnuplot '" + script + "'"});
        if (g.exit_code != 0) {
            std::fprintf(stderr,
                         "epq bench: could not draw %s (%s); the data is in %s, the script in %s. Install gnuplot "
                         "(apt-get install gnuplot-nox) and run: gnuplot %s\n",
                         o.plot_path.c_str(), g.err.empty() ? "gnuplot not found" : g.err.c_str(), data.c_str(),
                         script.c_str(), script.c_str());
            return 1;
        }
        std::fprintf(stderr, "epq bench: wrote %s\n", o.plot_path.c_str());
    }
    return 0;
}

}  // namespace epq
