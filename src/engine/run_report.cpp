#include "engine/run_report.h"

#include "engine/weight_layout.h"

#include "util/byte_size.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <sys/resource.h>

namespace epq {

uint64_t peak_rss_bytes() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

uint64_t major_page_faults() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<uint64_t>(ru.ru_majflt);
}

uint64_t storage_read_bytes() {
    FILE * f = std::fopen("/proc/self/io", "r");
    if (!f) {
        return 0;
    }
    char key[64];
    unsigned long long v = 0;
    uint64_t out = 0;
    while (std::fscanf(f, "%63s %llu", key, &v) == 2) {
        if (std::string(key) == "read_bytes:") {
            out = v;
        }
    }
    std::fclose(f);
    return out;
}

namespace {

double ratio(double a, double b) {
    return b > 0 ? a / b : 0.0;
}

}  // namespace

TimeSplit time_split(const PagerSnapshot & a, const PagerSnapshot & b, double wall_seconds) {
    TimeSplit t;
    t.total = wall_seconds;
    t.read_wait = (b.wait_seconds - a.wait_seconds) + (b.prefetch_wait_seconds - a.prefetch_wait_seconds);
    t.expert_compute = b.compute_seconds - a.compute_seconds;
    t.gather = b.gather_seconds - a.gather_seconds;
    t.scatter = b.scatter_seconds - a.scatter_seconds;
    t.arena = b.arena_seconds - a.arena_seconds;
    t.predict = b.predict_seconds - a.predict_seconds;
    t.pager_own = t.gather + t.scatter + t.arena + t.predict;
    const double pager_wall = b.pager_seconds - a.pager_seconds;
    t.outside_pager = std::max(0.0, wall_seconds - pager_wall);
    t.unexplained = pager_wall - t.read_wait - t.expert_compute - t.pager_own;
    t.graph_computes = b.graph_computes - a.graph_computes;
    t.all_graph_computes = b.all_graph_computes - a.all_graph_computes;
    return t;
}

nlohmann::json TimeSplit::json(int tokens, int threads) const {
    return {{"total_seconds", total},
            {"read_wait_seconds", read_wait},
            {"expert_compute_seconds", expert_compute},
            {"pager_own_seconds", pager_own},
            {"pager_own",
             {{"gather_seconds", gather},
              {"scatter_seconds", scatter},
              {"arena_seconds", arena},
              {"predict_seconds", predict}}},
            {"outside_pager_seconds", outside_pager},
            {"unexplained_seconds", unexplained},
            {"unexplained_share", ratio(unexplained, total)},
            {"pager_graph_computes", graph_computes},
            {"pager_graph_computes_per_token", ratio(double(graph_computes), tokens)},
            {"ggml_graph_computes", all_graph_computes},
            {"ggml_graph_computes_per_token", ratio(double(all_graph_computes), tokens)},
            // Each graph is one parallel region of ggml's thread team: its start wakes the others.
            {"thread_wakeups_per_token", ratio(double(all_graph_computes) * std::max(0, threads - 1), tokens)}};
}

std::string RunReport::text() const {
    char buf[1024];
    std::string out;
    std::snprintf(
        buf, sizeof buf,
        "epq: prompt %d tokens in %.2f s (%.2f tok/s) | generated %d tokens in %.2f s (%.2f tok/s) | "
        "load %.2f s, first token after %.2f s | %d threads | peak RSS %s | read from storage %s "
        "(%s per token)\n",
        gen.n_prompt, gen.prefill_seconds, gen.prefill_tps(), gen.n_generated, gen.decode_seconds, gen.decode_tps(),
        load_seconds, ttft_seconds, n_threads, format_bytes(peak_rss_bytes).c_str(),
        format_bytes(storage_read_bytes).c_str(),
        format_bytes(static_cast<uint64_t>(ratio(double(storage_read_bytes), gen.n_prompt + gen.n_generated))).c_str());
    out += buf;
    if (major_faults_after_prefill && gen.n_generated > 0) {
        std::snprintf(buf, sizeof buf, "epq: major page faults %llu, %.1f per generated token (decode)\n",
                      static_cast<unsigned long long>(major_faults),
                      ratio(double(major_faults - *major_faults_after_prefill), gen.n_generated));
        out += buf;
    }
    if (pager) {
        const auto & p = *pager;
        const double tokens = gen.n_prompt + gen.n_generated;
        std::snprintf(buf, sizeof buf,
                      "epq: arena %s: hit rate %.1f%% (%llu hits, %llu misses, %llu evictions) | read %s in %llu "
                      "requests (%s per token, %s/s while reading, %s) | waiting on reads %.2f s, expert matmuls "
                      "%.2f s\n",
                      format_bytes(p.arena_bytes).c_str(), 100.0 * ratio(double(p.hits), double(p.expert_lookups)),
                      static_cast<unsigned long long>(p.hits), static_cast<unsigned long long>(p.misses),
                      static_cast<unsigned long long>(p.evictions), format_bytes(p.bytes_read).c_str(),
                      static_cast<unsigned long long>(p.read_requests),
                      format_bytes(static_cast<uint64_t>(ratio(double(p.bytes_read), tokens))).c_str(),
                      format_bytes(static_cast<uint64_t>(ratio(double(p.bytes_read), p.read_wall_seconds))).c_str(),
                      p.direct_io ? "O_DIRECT" : "buffered: O_DIRECT unsupported here", p.wait_seconds,
                      p.compute_seconds);
        out += buf;
        if (p.repacked_matrices > 0 && !p.repacked_file.empty()) {
            out += "epq: experts held in ggml's repacked layout (" + std::to_string(p.repacked_matrices) +
                   " matrices per expert over the layers), read ready-repacked from " + p.repacked_file + "\n";
        } else if (p.repacked_matrices > 0) {
            std::snprintf(buf, sizeof buf,
                          "epq: experts held in ggml's repacked layout (%llu matrices per expert over the layers; "
                          "-nr keeps the file's): %.2f s repacking on the read threads\n",
                          static_cast<unsigned long long>(p.repacked_matrices), p.repack_seconds);
            out += buf;
        }
        const PredictionCounts & f = p.prefetch;
        std::snprintf(buf, sizeof buf,
                      "epq: prefetch %s | %llu guesses: precision %.1f%%, recall %.1f%% | speculative reads %llu (%s), "
                      "used %s, wasted %s | waited %.2f s for them\n",
                      p.prefetch_state.c_str(), static_cast<unsigned long long>(f.predictions), 100.0 * f.precision(),
                      100.0 * f.recall(), static_cast<unsigned long long>(f.spec_reads),
                      format_bytes(f.spec_bytes).c_str(), format_bytes(f.useful_bytes).c_str(),
                      format_bytes(f.wasted_bytes).c_str(), p.prefetch_wait_seconds);
        out += buf;
        if (pager_after_prefill && gen.n_generated > 0) {
            const auto & a = *pager_after_prefill;
            const uint64_t lookups = p.expert_lookups - a.expert_lookups, misses = p.demand_misses - a.demand_misses;
            std::snprintf(
                buf, sizeof buf, "epq: decode only: hit rate %.1f%%, read %s per generated token (prefill read %s)\n",
                100.0 * ratio(double(lookups - std::min(lookups, misses)), double(lookups)),
                format_bytes(static_cast<uint64_t>(ratio(double(p.bytes_read - a.bytes_read), gen.n_generated)))
                    .c_str(),
                format_bytes(a.bytes_read).c_str());
            out += buf;
        }
        if (pager_before_prefill && pager_after_prefill) {
            const TimeSplit t = time_split(*pager_before_prefill, *pager_after_prefill, gen.prefill_seconds);
            std::snprintf(buf, sizeof buf,
                          "epq: prefill %.2f s: reads waited %.2f s, expert compute %.2f s, pager's own work %.2f s "
                          "(gather %.2f, scatter %.2f, arena %.2f, predict %.2f), outside the pager %.2f s, "
                          "unexplained %.2f s | %llu ggml graphs, %llu of them the pager's\n",
                          t.total, t.read_wait, t.expert_compute, t.pager_own, t.gather, t.scatter, t.arena, t.predict,
                          t.outside_pager, t.unexplained, static_cast<unsigned long long>(t.all_graph_computes),
                          static_cast<unsigned long long>(t.graph_computes));
            out += buf;
        }
    }
    return out;
}

nlohmann::json RunReport::json() const {
    nlohmann::json j;
    j["prompt_tokens"] = gen.n_prompt;
    j["generated_tokens"] = gen.n_generated;
    j["prefill_seconds"] = gen.prefill_seconds;
    j["decode_seconds"] = gen.decode_seconds;
    j["prefill_tokens_per_second"] = gen.prefill_tps();
    j["decode_tokens_per_second"] = gen.decode_tps();
    j["load_seconds"] = load_seconds;
    j["time_to_first_token_seconds"] = ttft_seconds;
    j["peak_rss_bytes"] = peak_rss_bytes;
    j["storage_read_bytes"] = storage_read_bytes;
    j["major_page_faults"] = major_faults;
    if (major_faults_after_prefill) {
        j["decode_major_page_faults_per_token"] =
            ratio(double(major_faults - *major_faults_after_prefill), gen.n_generated);
    }
    j["threads"] = n_threads;
    j["paged"] = pager.has_value();
    j["weights_repacked"] = repack;
    j["identical_to"] = stock_configuration(repack, gpu_host, remote_layers);
    if (pager) {
        const auto & p = *pager;
        const double tokens = gen.n_prompt + gen.n_generated;
        // The pager's own figures in their one JSON form; what follows needs the run's tokens.
        j.update(p.to_json());
        j["dense_locked_bytes"] = dense_locked_bytes;
        j["expert_tensor_bytes"] = expert_tensor_bytes;
        j["bytes_read_per_token"] = ratio(double(p.bytes_read), tokens);
        if (pager_after_prefill) {
            const auto & a = *pager_after_prefill;
            const uint64_t lookups = p.expert_lookups - a.expert_lookups, misses = p.demand_misses - a.demand_misses;
            // From the prompt's start: a preload before it is not the prefill's.
            const uint64_t read_before = pager_before_prefill ? pager_before_prefill->bytes_read : 0;
            const uint64_t misses_before = pager_before_prefill ? pager_before_prefill->misses : 0;
            j["prefill_bytes_read"] = a.bytes_read - read_before;
            j["prefill_misses"] = a.misses - misses_before;
            j["decode_bytes_read"] = p.bytes_read - a.bytes_read;
            j["decode_bytes_read_per_token"] = ratio(double(p.bytes_read - a.bytes_read), gen.n_generated);
            j["decode_missed_expert_bytes"] = p.missed_expert_bytes - a.missed_expert_bytes;
            j["decode_read_wait_seconds"] =
                (p.wait_seconds - a.wait_seconds) + (p.prefetch_wait_seconds - a.prefetch_wait_seconds);
            j["decode_repack_seconds"] = p.repack_seconds - a.repack_seconds;
            j["prefill_repack_seconds"] =
                a.repack_seconds - (pager_before_prefill ? pager_before_prefill->repack_seconds : 0.0);
            j["decode_hit_rate"] = ratio(double(lookups - std::min(lookups, misses)), double(lookups));
            if (pager_before_prefill) {
                j["prefill_time"] =
                    time_split(*pager_before_prefill, a, gen.prefill_seconds).json(gen.n_prompt, n_threads);
            }
            j["decode_time"] = time_split(a, p, gen.decode_seconds).json(gen.n_generated, n_threads);
        }
    }
    return j;
}

std::string token_stats_line(int step, const PagerSnapshot & a, const PagerSnapshot & b, double seconds) {
    char buf[256];
    const uint64_t lookups = b.expert_lookups - a.expert_lookups;
    std::snprintf(buf, sizeof buf, "epq: token %d: %.1f ms, hits %llu/%llu, read %s, waited %.1f ms\n", step,
                  seconds * 1000.0, static_cast<unsigned long long>(b.hits - a.hits),
                  static_cast<unsigned long long>(lookups), format_bytes(b.bytes_read - a.bytes_read).c_str(),
                  (b.wait_seconds - a.wait_seconds) * 1000.0);
    return buf;
}

}  // namespace epq
