#include "server/metrics_text.h"

#include <sstream>

namespace epq::server {

namespace {

void metric(std::ostringstream & out, const char * type, const std::string & name, const char * help, double value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
        << name << " " << value << "\n";
}

}  // namespace

std::string metrics_text(const EngineCounters & c, const std::optional<PagerSnapshot> & pager) {
    std::ostringstream out;
    out.precision(15);
    const auto counter = [&](const std::string & n, const char * help, double v) {
        metric(out, "counter", n, help, v);
    };
    const auto gauge = [&](const std::string & n, const char * help, double v) { metric(out, "gauge", n, help, v); };
    counter("llamacpp:prompt_tokens_total", "Number of prompt tokens processed.",
            static_cast<double>(c.prompt_tokens_total));
    counter("llamacpp:prompt_seconds_total", "Prompt process time", c.prompt_seconds_total);
    counter("llamacpp:tokens_predicted_total", "Number of generation tokens processed.",
            static_cast<double>(c.tokens_predicted_total));
    counter("llamacpp:tokens_predicted_seconds_total", "Predict process time", c.tokens_predicted_seconds_total);
    counter("llamacpp:n_decode_total", "Total number of llama_decode() calls", static_cast<double>(c.n_decode_total));
    gauge("llamacpp:n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
          c.n_decode_total ? static_cast<double>(c.n_busy_slots_total) / static_cast<double>(c.n_decode_total) : 0.0);
    gauge("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
          c.prompt_seconds_total > 0 ? static_cast<double>(c.prompt_tokens_total) / c.prompt_seconds_total : 0.0);
    gauge("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.",
          c.tokens_predicted_seconds_total > 0
              ? static_cast<double>(c.tokens_predicted_total) / c.tokens_predicted_seconds_total
              : 0.0);
    gauge("llamacpp:requests_processing", "Number of requests processing.", c.requests_processing);
    gauge("llamacpp:requests_deferred", "Number of requests deferred.", c.requests_deferred);
    gauge("llamacpp:n_tokens_max", "Largest observed n_tokens.", static_cast<double>(c.n_tokens_max));
    counter("epq:requests_total", "Requests accepted.", static_cast<double>(c.requests_total));
    counter("epq:requests_cancelled_total", "Requests whose client went away before the end.",
            static_cast<double>(c.requests_cancelled));
    counter("epq:prompt_tokens_cached_total", "Prompt tokens reused from a slot's cache instead of prefilled.",
            static_cast<double>(c.cached_prompt_tokens_total));
    if (pager) {
        // Each metric is a value of the snapshot's one JSON form, named by its JSON pointer.
        struct PagerMetric {
            const char * type;
            const char * name;
            const char * help;
            const char * pointer;
        };
        static const PagerMetric kPagerMetrics[] = {
            {"gauge", "epq:arena_bytes", "RAM arena for experts, bytes.", "/arena_bytes"},
            {"counter", "epq:arena_hits_total", "Expert uses found resident in the arena.", "/hits"},
            {"counter", "epq:arena_misses_total", "Experts read from disk.", "/misses"},
            {"counter", "epq:arena_evictions_total", "Experts evicted from the arena.", "/evictions"},
            {"counter", "epq:bytes_read_total", "Bytes read from the model file for experts.", "/bytes_read"},
            {"counter", "epq:missed_expert_bytes_total", "Expert bytes the arena misses needed (reads may round up).",
             "/missed_expert_bytes"},
            {"counter", "epq:read_wait_seconds_total", "Time compute waited on expert reads.", "/read_wait_seconds"},
            {"counter", "epq:prefetch_used_bytes_total", "Bytes read early by prefetch and then used.",
             "/prefetch/useful_bytes"},
            {"counter", "epq:prefetch_wasted_bytes_total", "Bytes read early by prefetch and not used.",
             "/prefetch/wasted_bytes"},
        };
        const nlohmann::json j = pager->to_json();
        for (const PagerMetric & m : kPagerMetrics) {
            metric(out, m.type, m.name, m.help, j.at(nlohmann::json::json_pointer(m.pointer)).get<double>());
        }
    }
    return out.str();
}

}  // namespace epq::server
