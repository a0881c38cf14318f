// epq serve: an OpenAI-compatible HTTP server (llama-server's flags and routes) on the pager.
#include "commands.h"

#include "engine/serving_engine.h"
#include "bench/read_floor.h"
#include "run_common.h"
#include "server/http_server.h"
#include "util/byte_size.h"
#include "util/error.h"

#include <condition_variable>
#include <csignal>
#include <memory>
#include <mutex>
#include <cstdio>
#include <fstream>
#include <pthread.h>
#include <sstream>
#include <thread>

namespace epq::cli {

namespace {

struct ServeOptions {
    RunOptions run;
    server::ServerOptions http;
    std::string api_key;  // comma-separated, as llama-server takes it
    std::string api_key_file;
    size_t queue = 64;
    double read_floor_seconds = 1.0;
};

std::vector<std::string> read_keys(const ServeOptions & o) {
    std::vector<std::string> keys;
    std::stringstream ss(o.api_key);
    for (std::string k; std::getline(ss, k, ',');) {
        if (!k.empty()) {
            keys.push_back(k);
        }
    }
    if (!o.api_key_file.empty()) {
        std::ifstream in(o.api_key_file);
        if (!in) {
            throw Error("cannot read --api-key-file " + o.api_key_file);
        }
        for (std::string line; std::getline(in, line);) {
            while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
                line.pop_back();
            }
            if (!line.empty()) {
                keys.push_back(line);
            }
        }
        if (keys.empty()) {
            throw Error("--api-key-file " + o.api_key_file + " holds no key (one per line)");
        }
    }
    return keys;
}

int serve(ServeOptions & o) {
    RunOptions & r = o.run;
    if (r.n_parallel < 1 || r.n_parallel > 256) {
        throw Error("-np must be 1..256");
    }
    if (r.n_ctx / r.n_parallel < 16) {
        throw Error("-c " + std::to_string(r.n_ctx) + " split over " + std::to_string(r.n_parallel) +
                    " slots leaves under 16 tokens each: raise -c or lower -np");
    }
    if (o.http.port < 0 || o.http.port > 65535) {
        throw Error("--port must be 0..65535");
    }
    if (o.http.timeout_s < 1) {
        throw Error("--timeout must be at least 1 second");
    }
    if (o.queue < 1) {
        throw Error("--queue must be at least 1");
    }
    o.http.api_keys = read_keys(o);
    o.http.model_path = r.model;
    if (o.http.alias.empty()) {
        const size_t slash = r.model.find_last_of('/');
        o.http.alias = slash == std::string::npos ? r.model : r.model.substr(slash + 1);
    }

    // SIGINT/SIGTERM are taken by one thread (below), so every thread created from here on
    // blocks them.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    // Listen first: /health answers 503 while the model loads.
    server::HttpServer http(o.http);
    http.start();
    std::fprintf(stderr, "epq: serve: listening on http://%s:%d (loading the model; /health says 503 until ready)\n",
                 o.http.host.c_str(), http.port());

    // Shared with the signal thread, which may outlive this function (a failed load returns).
    struct Shutdown {
        std::mutex mu;
        std::condition_variable cv;
        bool requested = false;
        bool ready = false;  // the engine runs: end requests in flight instead of exiting
    };
    auto shutdown = std::make_shared<Shutdown>();
    std::thread([shutdown, sigs] {
        int sig = 0;
        sigwait(&sigs, &sig);
        std::fprintf(stderr, "\nepq: serve: %s: no new requests; ending the ones in flight\n",
                     sig == SIGINT ? "SIGINT" : "SIGTERM");
        std::lock_guard<std::mutex> lk(shutdown->mu);
        if (!shutdown->ready) {
            std::fprintf(stderr, "epq: serve: stopped while loading\n");
            std::_Exit(0);
        }
        shutdown->requested = true;
        shutdown->cv.notify_all();
    }).detach();

    LoadedModel m = load_model(r);
    EngineOptions eo;
    eo.n_parallel = static_cast<int>(r.n_parallel);
    eo.n_ctx_slot = r.n_ctx / r.n_parallel;
    eo.n_batch = r.n_batch;
    eo.max_queue = o.queue;
    if (m.paged && o.read_floor_seconds > 0) {
        // The page draws the read bandwidth against what this disk can do, read as the pager reads.
        const ReadFloor rf = measure_expert_reads(r.model, m.paged->index(), r.read_threads, o.read_floor_seconds);
        http.set_read_floor(rf.bytes_per_second());
        std::fprintf(stderr, "epq: serve: direct reads of whole experts: %s/s (the page's disk floor)\n",
                     format_bytes(static_cast<uint64_t>(rf.bytes_per_second())).c_str());
    }
    ServingEngine engine(*m.session, m.paged ? &m.paged->pager() : nullptr, eo);
    {
        std::lock_guard<std::mutex> lk(shutdown->mu);
        shutdown->ready = true;
    }
    http.set_engine(&engine);
    std::fprintf(stderr,
                 "epq: serve: %s ready in %.1f s: %u slots of %u tokens (-c %u split evenly), batch %u, %d threads%s\n"
                 "epq: serve: http://%s:%d/ (chat page), /v1 (OpenAI API), /health, /metrics%s; Ctrl-C stops\n",
                 o.http.alias.c_str(), m.load_seconds, r.n_parallel, eo.n_ctx_slot, r.n_ctx, r.n_batch, m.n_threads,
                 o.http.api_keys.empty() ? "" : ", API key required", o.http.host.c_str(), http.port(),
                 o.http.metrics ? "" : " (off: --metrics)");

    {
        std::unique_lock<std::mutex> lk(shutdown->mu);
        shutdown->cv.wait(lk, [&] { return shutdown->requested; });
    }
    engine.shutdown("the server is shutting down");
    http.stop();
    const EngineCounters c = engine.counters();
    std::fprintf(stderr, "epq: serve: stopped after %llu requests (%llu prompt tokens, %llu generated)\n",
                 static_cast<unsigned long long>(c.requests_total),
                 static_cast<unsigned long long>(c.prompt_tokens_total),
                 static_cast<unsigned long long>(c.tokens_predicted_total));
    return 0;
}

}  // namespace

Handler add_serve(CLI::App & app) {
    auto * sub = app.add_subcommand(
        "serve", "OpenAI-compatible HTTP server (llama-server's routes and flags) with continuous batching");
    auto o = std::make_shared<ServeOptions>();
    RunOptions & r = o->run;
    r.n_ctx = 8192;
    r.n_parallel = 4;
    sub->add_option("-m,--model", r.model, "GGUF model file")->required();
    sub->add_option("--host", o->http.host, "address to listen on")->capture_default_str();
    sub->add_option("--port", o->http.port, "port to listen on (0: any free port)")->capture_default_str();
    sub->add_option("--parallel", r.n_parallel, "slots: requests decoded together (also -np)")->capture_default_str();
    sub->add_option("-c,--ctx-size", r.n_ctx, "context size in tokens, split evenly over the slots")
        ->capture_default_str();
    sub->add_option("-b,--batch-size", r.n_batch, "tokens per decode step (prompt chunks + one per generating slot)")
        ->capture_default_str();
    sub->add_option("-t,--threads", r.n_threads, "threads (default: all cores)");
    sub->add_option("--api-key", o->api_key, "require this key (Bearer or X-Api-Key); several: comma-separated");
    sub->add_option("--api-key-file", o->api_key_file, "require one of the keys in this file (one per line)");
    sub->add_option("--alias", o->http.alias, "model name in responses (default: the file name)");
    sub->add_flag("--metrics", o->http.metrics, "serve Prometheus metrics at /metrics");
    sub->add_option("--timeout", o->http.timeout_s, "read/write timeout of a connection, seconds")
        ->capture_default_str();
    sub->add_option("--queue", o->queue, "requests that may wait for a slot; more get 503 with Retry-After")
        ->capture_default_str();
    sub->add_option("--read-floor-seconds", o->read_floor_seconds,
                    "measure the disk's expert read rate this long at start, for the page's chart (0: skip)")
        ->capture_default_str();
    add_pager_flags(*sub, r);
    return [o]() { return serve(*o); };
}

}  // namespace epq::cli
