#include "bench/serve_bench.h"

#include "bench/bench.h"
#include "bench/read_floor.h"
#include "engine/memory_budget.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "util/byte_size.h"
#include "util/child_process.h"
#include "util/error.h"

#include <cpp-httplib/httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace epq {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The counters the window needs: llama-server's from /metrics, the pager's from /epq/metrics.
struct Counters {
    double tokens = 0, seconds = 0, steps = 0, missed = 0, read = 0, wait = 0, hits = 0, misses = 0, arena = 0;
    // The pager's decode steps: their clock, and what they looked up, missed and read.
    double decode_tokens = 0, decode_seconds = 0, decode_wait = 0, decode_steps = 0, decode_lookups = 0,
           decode_misses = 0, decode_missed = 0;
    std::map<int64_t, int64_t> decoded;  // task id -> tokens it has generated (/slots), busy slots only
};

Counters counters_of(const std::string & text) {
    static const std::pair<const char *, double Counters::*> kNames[] = {
        {"llamacpp:n_decode_total", &Counters::steps},
        {"epq:missed_expert_bytes_total", &Counters::missed},
        {"epq:bytes_read_total", &Counters::read},
        {"epq:read_wait_seconds_total", &Counters::wait},
        {"epq:arena_hits_total", &Counters::hits},
        {"epq:arena_misses_total", &Counters::misses},
        {"epq:arena_bytes", &Counters::arena},
        {"epq:decode_step_tokens_total", &Counters::decode_tokens},
        {"epq:decode_step_seconds_total", &Counters::decode_seconds},
        {"epq:decode_step_read_wait_seconds_total", &Counters::decode_wait},
        {"epq:decode_steps_total", &Counters::decode_steps},
        {"epq:decode_step_lookups_total", &Counters::decode_lookups},
        {"epq:decode_step_misses_total", &Counters::decode_misses},
        {"epq:decode_step_missed_expert_bytes_total", &Counters::decode_missed}};
    Counters c;
    for (const auto & [name, v] : parse_metrics_text(text)) {
        for (const auto & [want, field] : kNames) {
            if (name == want) {
                c.*field = v;
            }
        }
    }
    return c;
}

enum class Mode { epq, stock, floor };

const char * mode_name(Mode m) {
    return m == Mode::epq ? "epq" : m == Mode::stock ? "stock" : "epq, every expert preloaded";
}

// What the client threads share with the one that samples the window.
struct Progress {
    std::mutex mu;
    std::condition_variable cv;
    int first_tokens = 0;
    int finished = 0;
    std::string error;
};

// One streaming /v1/completions request; records its time to first token.
void stream_one(int port, const json & body, Progress & pr, double & ttft) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(24 * 3600, 0);
    cli.set_write_timeout(60, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    const auto t0 = Clock::now();
    bool first = false;
    std::string buf;
    req.content_receiver = [&](const char * data, size_t len, uint64_t, uint64_t) {
        buf.append(data, len);
        for (size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
            const std::string event = buf.substr(0, end);
            buf.erase(0, end + 2);
            if (first || event.rfind("data: {", 0) != 0) {
                continue;
            }
            const json j = json::parse(event.substr(6), nullptr, false);
            if (j.is_object() && j.contains("choices") && !j["choices"].empty() &&
                !j["choices"][0].value("text", std::string()).empty()) {
                first = true;
                ttft = seconds_since(t0);
                std::lock_guard<std::mutex> lk(pr.mu);
                ++pr.first_tokens;
                pr.cv.notify_all();
            }
        }
        return true;
    };
    const auto res = cli.send(req);
    std::lock_guard<std::mutex> lk(pr.mu);
    if (!res || res->status != 200) {
        pr.error = !res ? "request failed: " + httplib::to_string(res.error())
                        : "HTTP " + std::to_string(res->status) + ": " + res->body;
    } else if (!first) {
        pr.error = "a stream ended without any text (raise -n?)";
    }
    if (!first) {
        ++pr.first_tokens;  // do not leave the sampler waiting
    }
    ++pr.finished;
    pr.cv.notify_all();
}

struct StreamBench {
    const BenchOptions & o;
    std::string replay_text;
    int threads;
    bool dropped_ok = true;

    // `generating`: for the floor, the streams the capped epq run let generate at once, so that its
    // step holds as many tokens as the steps it bounds.
    std::vector<std::string> server_args(const std::string & cap, int n, Mode mode, int generating) const {
        std::vector<std::string> a;
        if (cap != "none") {
            a = {source_file("scripts/memcap.sh"), cap, "--"};
        }
        // The server's own prompt cache and warm-up stay as llama-server has them; -np slots in one
        // KV cache of n x -c tokens.
        a.insert(a.end(), {o.self_exe,  "serve",
                           "-m",        o.model,
                           "--host",    "127.0.0.1",
                           "--port",    "0",
                           "-np",       std::to_string(n),
                           "-c",        std::to_string(o.n_ctx * static_cast<uint32_t>(n)),
                           "-b",        std::to_string(o.n_batch),
                           "-ub",       std::to_string(o.n_batch),
                           "-t",        std::to_string(threads),
                           "--metrics", "--no-webui"});
        if (mode == Mode::stock) {
            a.push_back("--no-pager");
        } else {
            a.insert(a.end(), {"--arena", mode == Mode::floor ? std::string("auto") : o.arena, "--prefetch", o.prefetch,
                               "--policy", o.policy, "--read-threads", std::to_string(o.read_threads)});
            if (mode == Mode::floor) {
                a.insert(a.end(), {"--preload", "--decode-streams", std::to_string(generating)});
            } else if (!o.decode_streams.empty()) {
                a.insert(a.end(), {"--decode-streams", o.decode_streams});
            }
        }
        for (const auto & f : layout_flags(mode != Mode::stock, mode == Mode::floor ? "none" : cap, o.layout)) {
            a.push_back(f);
        }
        return a;
    }

    StreamRun run(const std::string & cap, int n, Mode mode, const std::string & tag, int generating = 0) {
        StreamRun r;
        r.streams = n;
        if (cap != "none" && o.drop_caches) {
            dropped_ok = drop_page_cache() && dropped_ok;
        }
        std::fprintf(stderr, "epq bench: %s, %d stream%s, cap %s ...\n", mode_name(mode), n, n == 1 ? "" : "s",
                     cap.c_str());
        BackgroundProcess p(server_args(cap, n, mode, generating > 0 ? generating : n),
                            scratch_dir() + "/" + tag + ".err");
        const auto fail = [&](const std::string & why) {
            r.error = why;
            p.stop(30);
            std::fprintf(stderr, "epq bench:   failed: %s\n", why.c_str());
            return r;
        };
        int port = -1;
        try {
            port = wait_until_serving(p, 3600);
        } catch (const Error & e) {
            return fail(p.running() ? e.what() : child_failure(p.exit_code(), p.err()));
        }
        httplib::Client cli("127.0.0.1", port);
        cli.set_read_timeout(600, 0);
        const auto tok = cli.Post("/tokenize", json{{"content", replay_text}}.dump(), "application/json");
        if (!tok || tok->status != 200) {
            return fail("POST /tokenize failed");
        }
        const std::vector<int32_t> tokens = json::parse(tok->body)["tokens"].get<std::vector<int32_t>>();
        if (tokens.size() < static_cast<size_t>(o.replay_prompt)) {
            return fail("the replay text has " + std::to_string(tokens.size()) + " tokens, fewer than --replay-prompt");
        }

        // How many of the n the server lets generate at once (epq serve's stream gate), and
        // whether that can change while they run (its tuner).
        const auto gate_of = [&]() {
            const auto st = cli.Get("/epq/stats");
            const json sj = json::parse(st && st->status == 200 ? st->body : "{}", nullptr, false);
            return sj.is_object() && sj.contains("decode_streams") && sj["decode_streams"].is_object()
                       ? sj["decode_streams"]
                       : json(nullptr);
        };
        r.generating = n;
        bool queued = false;  // some requests wait for others to end
        if (mode != Mode::stock) {
            const json gate = gate_of();
            if (gate.is_object()) {
                r.generating = std::min(n, gate.value("capacity", n));
                queued = r.generating < n || (n > 1 && !gate["tuning"].is_null());
            }
        }
        // Every stream its own stretch of the text (no prompt cache shared between them).
        Progress pr;
        r.ttft_seconds.assign(static_cast<size_t>(n), 0.0);
        std::vector<std::thread> clients;
        const int n_predict = mode == Mode::stock ? o.n_decode_stock : o.n_decode;
        for (int i = 0; i < n; ++i) {
            std::vector<int32_t> prompt;
            for (int k = 0; k < o.replay_prompt; ++k) {
                prompt.push_back(
                    tokens[(static_cast<size_t>(i) * static_cast<size_t>(o.replay_prompt) + k) % tokens.size()]);
            }
            const json body = {{"prompt", prompt},
                               {"max_tokens", n_predict},
                               {"ignore_eos", true},
                               {"temperature", 0},
                               {"stream", true}};
            clients.emplace_back(stream_one, port, body, std::ref(pr),
                                 std::ref(r.ttft_seconds[static_cast<size_t>(i)]));
        }
        // llama-server counts a request's generated tokens when it ends, so the window reads
        // each busy slot's tokens so far from /slots and the decode steps from /metrics
        // (n_decode_total, counted live), and takes the time here.
        const auto t_start = Clock::now();
        const auto sample = [&]() {
            const auto sl = cli.Get("/slots");
            const auto m = cli.Get("/metrics");
            const auto pm = cli.Get("/epq/metrics");
            Counters c =
                counters_of((m && m->status == 200 ? m->body : "") + "\n" + (pm && pm->status == 200 ? pm->body : ""));
            c.seconds = seconds_since(t_start);
            const json slots = json::parse(sl && sl->status == 200 ? sl->body : "[]", nullptr, false);
            if (slots.is_array()) {
                for (const auto & slot : slots) {
                    if (slot.value("is_processing", false) && slot.contains("next_token") &&
                        !slot["next_token"].empty()) {
                        c.decoded[slot.value("id_task", int64_t{-1})] =
                            slot["next_token"][0].value("n_decoded", int64_t{0});
                    }
                }
            }
            return c;
        };
        // Every stream at once: the window is while all decode, from their first tokens to the
        // first one's end. Queued: from the first token to the last stream's end, and tok/s from
        // the pager's decode steps (below).
        Counters a, b;
        {
            std::unique_lock<std::mutex> lk(pr.mu);
            pr.cv.wait(lk, [&] { return pr.first_tokens >= (queued ? 1 : r.generating) || pr.finished > 0; });
        }
        a = sample();
        {
            std::unique_lock<std::mutex> lk(pr.mu);
            pr.cv.wait(lk, [&] { return pr.finished >= (queued ? n : 1) || !pr.error.empty(); });
        }
        b = sample();
        if (queued) {
            const json gate = gate_of();
            const int at_end = std::min(n, gate.is_object() ? gate.value("capacity", r.generating) : r.generating);
            if (at_end != r.generating) {
                std::fprintf(stderr,
                             "epq bench:   the server's tuner changed the streams generating at once: %d -> %d\n",
                             r.generating, at_end);
                r.generating_at_start = r.generating;
                r.generating = at_end;
            }
        }
        for (auto & t : clients) {
            t.join();
        }
        r.all_seconds = seconds_since(t_start);
        r.end_to_end_tps = static_cast<double>(n) * n_predict / r.all_seconds;
        if (!pr.error.empty()) {
            return fail(pr.error);
        }
        const int code = p.stop(60);
        r.memcap_line = memcap_line_of(p.err());
        if (code != 0) {
            r.error = "the server exited " + std::to_string(code) + " on SIGTERM";
        }
        r.steps = b.steps - a.steps;
        if (r.steps < 1 || b.seconds <= a.seconds) {
            r.error = "no decode step between the first tokens and the first stream's end: raise -n / --stock-tokens";
            std::fprintf(stderr, "epq bench:   failed: %s\n", r.error.c_str());
            return r;
        }
        r.ok = r.error.empty();
        // Tokens generated in the window: a request still running counts what it added, one that
        // ended counts the rest of its -n.
        double window_tokens = 0;
        for (const auto & [task, n_at_a] : a.decoded) {
            const auto at_b = b.decoded.find(task);
            window_tokens += static_cast<double>((at_b != b.decoded.end() ? at_b->second : n_predict) - n_at_a);
        }
        r.decode_tps = window_tokens / (b.seconds - a.seconds);
        // The pager's decode steps (batches of one token per stream, a prompt's left out) over
        // their own time: every epq row has it, so rows where requests come and go compare.
        const double step_time = b.decode_seconds - a.decode_seconds;
        r.decode_step_tps = step_time > 0 ? (b.decode_tokens - a.decode_tokens) / step_time : 0.0;
        if (queued) {
            r.decode_tps = r.decode_step_tps;
        }
        r.step_seconds = (b.seconds - a.seconds) / r.steps;
        r.wait_per_step = (b.wait - a.wait) / r.steps;
        r.missed_per_step = (b.missed - a.missed) / r.steps;
        r.read_per_step = (b.read - a.read) / r.steps;
        const double lookups = (b.hits - a.hits) + (b.misses - a.misses);
        r.hit_rate = lookups > 0 ? (b.hits - a.hits) / lookups : 0.0;
        const double decode_steps = b.decode_steps - a.decode_steps;
        if (queued && decode_steps > 0) {
            // Prompts admitted inside the window select nearly every expert once: their lookups
            // and reads are not a decode step's, so the step figures come from the steps alone.
            r.steps = decode_steps;
            r.tokens_per_step = (b.decode_tokens - a.decode_tokens) / decode_steps;
            r.step_seconds = step_time / decode_steps;
            r.wait_per_step = (b.decode_wait - a.decode_wait) / decode_steps;
            r.missed_per_step = (b.decode_missed - a.decode_missed) / decode_steps;
            const double step_lookups = b.decode_lookups - a.decode_lookups;
            r.hit_rate = step_lookups > 0 ? 1.0 - (b.decode_misses - a.decode_misses) / step_lookups : 0.0;
        }
        r.arena_bytes = static_cast<uint64_t>(b.arena);
        std::fprintf(stderr,
                     "epq bench:   %.2f tok/s over %.0f steps (%d generating), TTFT p50 %.2f s; all %d done in %.1f s "
                     "(%.2f tok/s end to end)\n",
                     r.decode_tps, r.steps, r.generating, percentile(r.ttft_seconds, 50), n, r.all_seconds,
                     r.end_to_end_tps);
        return r;
    }
};

// The median of the successful runs, field by field; time to first token pools every stream
// of every run (so p95 has more than N samples).
StreamRun median_run(const std::vector<StreamRun> & runs) {
    StreamRun m;
    std::vector<const StreamRun *> ok;
    for (const auto & r : runs) {
        if (r.ok) {
            ok.push_back(&r);
        } else if (m.error.empty()) {
            m.error = r.error;
        }
    }
    if (ok.empty()) {
        return m;
    }
    const auto med = [&](double StreamRun::*f) {
        std::vector<double> v;
        for (const auto * r : ok) {
            v.push_back(r->*f);
        }
        return median(v);
    };
    m.ok = true;
    m.error.clear();
    m.streams = ok.front()->streams;
    m.generating = ok.front()->generating;
    m.memcap_line = ok.back()->memcap_line;
    m.arena_bytes = ok.back()->arena_bytes;
    for (const auto * r : ok) {
        m.ttft_seconds.insert(m.ttft_seconds.end(), r->ttft_seconds.begin(), r->ttft_seconds.end());
    }
    m.decode_tps = med(&StreamRun::decode_tps);
    m.all_seconds = med(&StreamRun::all_seconds);
    m.end_to_end_tps = med(&StreamRun::end_to_end_tps);
    m.steps = med(&StreamRun::steps);
    m.tokens_per_step = med(&StreamRun::tokens_per_step);
    m.step_seconds = med(&StreamRun::step_seconds);
    m.decode_step_tps = med(&StreamRun::decode_step_tps);
    m.wait_per_step = med(&StreamRun::wait_per_step);
    m.missed_per_step = med(&StreamRun::missed_per_step);
    m.read_per_step = med(&StreamRun::read_per_step);
    m.hit_rate = med(&StreamRun::hit_rate);
    return m;
}

json run_json(const StreamRun & r) {
    if (!r.ok) {
        return {{"error", r.error}, {"memcap", r.memcap_line}};
    }
    return {{"streams", r.streams},
            {"generating", r.generating},
            {"generating_at_start", r.generating_at_start > 0 ? json(r.generating_at_start) : json(nullptr)},
            {"decode_tps", r.decode_tps},
            {"decode_step_tps", r.decode_step_tps},
            {"all_seconds", r.all_seconds},
            {"end_to_end_tps", r.end_to_end_tps},
            {"ttft_seconds", r.ttft_seconds},
            {"steps", r.steps},
            {"tokens_per_step", r.tokens_per_step > 0 ? json(r.tokens_per_step) : json(nullptr)},
            {"step_seconds", r.step_seconds},
            {"read_wait_per_step_seconds", r.wait_per_step},
            {"missed_expert_bytes_per_step", r.missed_per_step},
            {"read_bytes_per_step", r.read_per_step},
            {"hit_rate", r.hit_rate},
            {"arena_bytes", r.arena_bytes},
            {"memcap", r.memcap_line}};
}

}  // namespace

int wait_until_serving(BackgroundProcess & p, double timeout_seconds) {
    constexpr const char * kListening = "listening on http://127.0.0.1:";
    int port = -1;
    for (const auto t0 = Clock::now();;) {
        const std::string err = p.err();
        const size_t at = err.find(kListening);
        if (at != std::string::npos) {
            port = std::atoi(err.c_str() + at + std::strlen(kListening));
        }
        // llama-server prints its addresses once the model is loaded.
        if (port > 0) {
            return port;
        }
        if (!p.running()) {
            throw Error("epq serve exited (status " + std::to_string(p.exit_code()) + ") before it was ready");
        }
        if (seconds_since(t0) > timeout_seconds) {
            throw Error("epq serve was not ready within " + std::to_string(static_cast<int>(timeout_seconds)) + " s");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) {
        return 0.0;
    }
    std::sort(v.begin(), v.end());
    const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

std::vector<std::pair<std::string, double>> parse_metrics_text(const std::string & text) {
    std::vector<std::pair<std::string, double>> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.empty() || line[0] == '#') {
            continue;
        }
        const size_t sp = line.rfind(' ');
        if (sp == std::string::npos || line.find('{') != std::string::npos) {
            continue;
        }
        char * end = nullptr;
        const double v = std::strtod(line.c_str() + sp + 1, &end);
        if (end && *end == '\0') {
            out.emplace_back(line.substr(0, sp), v);
        }
    }
    return out;
}

int run_stream_bench(const BenchOptions & o) {
    if (o.runs < 1 || o.n_decode < 3 || o.n_decode_stock < 3 || o.replay_prompt < 1) {
        throw Error(
            "--streams needs -n and --stock-tokens >= 3 (a decode window after the first token) and "
            "--replay-prompt >= 1");
    }
    for (int n : o.streams) {
        if (n < 1 || n > 256) {
            throw Error("--streams: " + std::to_string(n) + " is not a concurrency from 1 to 256");
        }
    }
    const GgufFile file = GgufFile::open(o.model);
    const ExpertIndex idx = ExpertIndex::build(file);
    const std::string replay = o.replay.empty() ? default_replay_text() : o.replay;
    StreamBench bench{o, read_whole_file(replay),
                      o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
    if (bench.replay_text.empty()) {
        throw Error("cannot read the replay text " + replay);
    }
    std::fprintf(stderr,
                 "epq bench: %s: %s, %s (experts %s, dense %s), %d threads; %d-token prompts, %d tokens per "
                 "stream (stock %d)\n",
                 o.model.c_str(), idx.arch.c_str(), format_bytes(idx.file_size).c_str(),
                 format_bytes(idx.expert_bytes).c_str(), format_bytes(idx.dense_bytes).c_str(), bench.threads,
                 o.replay_prompt, o.n_decode, o.n_decode_stock);
    const ReadFloor rf = measure_expert_reads(o.model, idx, o.read_threads, o.read_floor_seconds);
    const double bw = rf.bytes_per_second();
    std::fprintf(stderr, "epq bench: direct reads of whole experts: %s/s (%s)\n",
                 format_bytes(static_cast<uint64_t>(bw)).c_str(), rf.direct ? "O_DIRECT" : "buffered");
    const bool can_floor = available_memory().bytes > idx.expert_bytes + idx.dense_bytes + (2ull << 30);

    struct Row {
        std::string cap;
        int n = 0;
        std::vector<StreamRun> epq_runs, stock_runs, floor_runs;
        StreamRun epq, stock, floor;  // medians (TTFT: every stream of every run)
        double compute_step = 0, io_step = 0, roofline = 0;
        std::string compute_source;
        // Read floor samples (bytes/s): the first, taken before any run, and one before each
        // capped epq run, so the floor is measured beside what it bounds; their median is used.
        std::vector<double> floors;
        double floor_bw = 0;
    };
    std::vector<Row> rows;
    for (const auto & cap : o.memcaps) {
        for (int n : o.streams) {
            Row row;
            row.cap = cap;
            row.n = n;
            for (int k = 0; k < o.runs; ++k) {
                // Interleaved, so drift of the machine hits all three alike.
                const std::string tag = cap + "-" + std::to_string(n) + "-" + std::to_string(k);
                if (cap != "none") {
                    row.floors.push_back(
                        measure_expert_reads(o.model, idx, o.read_threads, o.read_floor_seconds / 2, 2 + k)
                            .bytes_per_second());
                }
                row.epq_runs.push_back(bench.run(cap, n, Mode::epq, "epq-" + tag));
                // After the epq run: its floor decodes as many streams at once as it did.
                if (can_floor) {
                    row.floor_runs.push_back(
                        bench.run("none", n, Mode::floor, "floor-" + tag, row.epq_runs.back().generating));
                }
                if (o.stock) {
                    row.stock_runs.push_back(bench.run(cap, n, Mode::stock, "stock-" + tag));
                }
            }
            row.floor = median_run(row.floor_runs);
            row.epq = median_run(row.epq_runs);
            row.stock = median_run(row.stock_runs);
            // The tokens a step decodes: those the server lets generate at once, or where
            // requests queue, the tokens its decode steps had (fewer while one waits for its prompt).
            const auto tokens_per_step = [](const StreamRun & r) {
                return r.tokens_per_step > 0 ? r.tokens_per_step : static_cast<double>(r.generating);
            };
            const double per_step = tokens_per_step(row.epq);
            if (row.floor.ok && row.floor.missed_per_step == 0) {
                // The floor's compute per token, at as many tokens per step as epq's steps had.
                row.compute_step = row.floor.step_seconds / std::max(1.0, tokens_per_step(row.floor)) * per_step;
                row.compute_source = "measured: the same server with every expert preloaded, uncapped";
            } else if (row.epq.ok) {
                row.compute_step = row.epq.step_seconds - row.epq.wait_per_step;
                row.compute_source = "estimated: decode step time not spent waiting on reads";
            }
            row.floors.push_back(bw);
            row.floor_bw = median(row.floors);
            row.io_step = row.floor_bw > 0 && row.epq.ok ? row.epq.missed_per_step / row.floor_bw : 0.0;
            const double step = std::max(row.compute_step, row.io_step);
            row.roofline = step > 0 && row.epq.ok ? per_step / step : 0.0;
            rows.push_back(row);
        }
    }

    std::string out = "\nepq bench --streams: " + o.model + " (" + idx.arch + "), " + std::to_string(bench.threads) +
                      " threads, " + std::to_string(o.replay_prompt) + "-token prompts, medians of " +
                      std::to_string(o.runs) + " interleaved run(s); TTFT over every stream of every run\n";
    out += "floors: direct expert reads " + format_bytes(static_cast<uint64_t>(bw)) + "/s; compute per step " +
           (can_floor ? std::string("measured with every expert preloaded (uncapped)")
                      : std::string("estimated (RAM cannot hold every expert)")) +
           "\n";
    char line[512];
    std::snprintf(line, sizeof line,
                  "%-6s %7s %5s %10s %10s %10s %11s %7s %10s %10s %15s %15s %7s %12s %11s %10s %8s\n", "cap", "streams",
                  "gen", "arena", "epq tok/s", "epq steps", "stock tok/s", "ratio", "epq e2e", "stock e2e",
                  "epq TTFT p50/95", "stk TTFT p50/95", "hit", "missed/step", "compute/st", "roofline", "of roof");
    out += line;
    for (const auto & r : rows) {
        const std::string e_ttft = r.epq.ok ? format_number("%.2f", percentile(r.epq.ttft_seconds, 50)) + "/" +
                                                  format_number("%.2f", percentile(r.epq.ttft_seconds, 95)) + " s"
                                            : "failed";
        const std::string s_ttft = r.stock.ok ? format_number("%.2f", percentile(r.stock.ttft_seconds, 50)) + "/" +
                                                    format_number("%.2f", percentile(r.stock.ttft_seconds, 95)) + " s"
                                              : (o.stock ? "failed" : "-");
        std::snprintf(line, sizeof line,
                      "%-6s %7d %5d %10s %10.2f %10.2f %11.2f %6.1fx %10.2f %10.2f %15s %15s %6.1f%% %12s %8.1f ms "
                      "%10.2f %7.0f%%\n",
                      r.cap.c_str(), r.n, r.epq.generating, format_bytes(r.epq.arena_bytes).c_str(), r.epq.decode_tps,
                      r.epq.decode_step_tps, r.stock.decode_tps,
                      r.stock.decode_tps > 0 ? r.epq.decode_tps / r.stock.decode_tps : 0.0, r.epq.end_to_end_tps,
                      r.stock.end_to_end_tps, e_ttft.c_str(), s_ttft.c_str(), 100.0 * r.epq.hit_rate,
                      format_bytes(static_cast<uint64_t>(r.epq.missed_per_step)).c_str(), 1000.0 * r.compute_step,
                      r.roofline, r.roofline > 0 ? 100.0 * r.epq.decode_tps / r.roofline : 0.0);
        out += line;
    }
    out +=
        "tok/s: tokens of all streams per second of decode steps while every stream decodes (server counters), or, "
        "where requests queue, the steps figure; steps: the tokens of epq's decode steps (one token per stream; "
        "prompts' batches left out) per second of them, from layer 0's experts to the last layer's "
        "(epq:decode_step_*); gen: the streams epq serve lets generate at once at the end of the run "
        "(--decode-streams; its tuner lowers it while reads take most of the steps), the rest wait; e2e: every "
        "stream's tokens / the time from the requests sent to the last one done (prompts and waits included; stock "
        "generates fewer tokens per stream); where requests queue, hit and missed/step are the decode steps' alone "
        "(admitted prompts left out); roofline = generating streams (queued: the decode steps' tokens per step) / "
        "max(compute s/step, missed expert bytes/step / read bandwidth), compute/st being the preloaded server's "
        "compute per token times those tokens per step\n";
    // The floor beside the runs it bounds; a run that beats its roofline shows the floor is wrong.
    for (const auto & r : rows) {
        if (r.cap == "none") {
            continue;
        }
        const auto [lo, hi] = std::minmax_element(r.floors.begin(), r.floors.end());
        out += "cap " + r.cap + ", " + std::to_string(r.n) + " streams: read floor " +
               format_bytes(static_cast<uint64_t>(r.floor_bw)) + "/s (median of " + std::to_string(r.floors.size()) +
               " samples taken before its runs; " + format_bytes(static_cast<uint64_t>(*lo)) + "/s to " +
               format_bytes(static_cast<uint64_t>(*hi)) + "/s)" +
               (r.roofline > 0 && r.epq.decode_tps > r.roofline
                    ? " - decode ABOVE its roofline: a floor (compute or read) is wrong (a cache below the file "
                      "system?)"
                    : "") +
               "\n";
    }
    if (!bench.dropped_ok) {
        out += "note: the page cache could not be dropped before capped runs (needs root): stock may look faster\n";
    }
    for (const auto & r : rows) {
        for (const auto * run : {&r.epq, &r.stock, &r.floor}) {
            if (!run->ok && !run->error.empty()) {
                out += "note: cap " + r.cap + ", " + std::to_string(r.n) + " streams, " +
                       (run == &r.epq     ? "epq"
                        : run == &r.stock ? "stock"
                                          : "floor") +
                       ": " + run->error + "\n";
            }
        }
    }
    std::fputs(out.c_str(), stdout);

    if (!o.json_path.empty()) {
        json j = {{"model", o.model},
                  {"arch", idx.arch},
                  {"threads", bench.threads},
                  {"prompt_tokens", o.replay_prompt},
                  {"read_floor_bytes_per_second", bw},
                  {"rows", json::array()}};
        for (const auto & r : rows) {
            const auto all = [](const std::vector<StreamRun> & runs) {
                json a = json::array();
                for (const auto & run : runs) {
                    a.push_back(run_json(run));
                }
                return a;
            };
            j["rows"].push_back({{"memcap", r.cap},
                                 {"streams", r.n},
                                 {"epq", run_json(r.epq)},
                                 {"stock", run_json(r.stock)},
                                 {"floor", run_json(r.floor)},
                                 {"epq_runs", all(r.epq_runs)},
                                 {"stock_runs", all(r.stock_runs)},
                                 {"floor_runs", all(r.floor_runs)},
                                 {"compute_seconds_per_step", r.compute_step},
                                 {"compute_source", r.compute_source},
                                 {"io_seconds_per_step", r.io_step},
                                 {"read_floor_bytes_per_second", r.floor_bw},
                                 {"read_floor_samples", r.floors},
                                 {"roofline_tps", r.roofline},
                                 {"fraction_of_roofline", r.roofline > 0 ? r.epq.decode_tps / r.roofline : 0.0}});
        }
        write_json_file(o.json_path, j);
    }
    return 0;
}

}  // namespace epq
