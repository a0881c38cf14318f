#include "server/metrics_text.h"

#include <sstream>

namespace epq::server {

namespace {

void metric(std::ostringstream & out, const char * type, const std::string & name, const char * help, double value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
        << name << " " << value << "\n";
}

}  // namespace

std::string metrics_text(const PagerSnapshot & pager, const std::optional<StreamGate::Counters> & gate) {
    std::ostringstream out;
    out.precision(15);
    {
        // Each metric is a value of the snapshot's one JSON form, named by its JSON pointer.
        struct PagerMetric {
            const char * type;
            const char * name;
            const char * help;
            const char * pointer;
        };
        static const PagerMetric kPagerMetrics[] = {
            {"gauge", "epq:arena_bytes", "RAM arena for experts, bytes.", "/arena_bytes"},
            {"counter", "epq:tokens_total", "Tokens through the first MoE layer (prompt and generated).", "/tokens"},
            {"counter", "epq:arena_hits_total", "Expert uses found resident in the arena.", "/hits"},
            {"counter", "epq:arena_misses_total", "Experts read from disk.", "/misses"},
            {"counter", "epq:arena_evictions_total", "Experts evicted from the arena.", "/evictions"},
            {"counter", "epq:bytes_read_total", "Bytes read from the model file for experts.", "/bytes_read"},
            {"counter", "epq:missed_expert_bytes_total", "Expert bytes the arena misses needed (reads may round up).",
             "/missed_expert_bytes"},
            {"counter", "epq:read_wait_seconds_total", "Time compute waited on expert reads.", "/read_wait_seconds"},
            {"counter", "epq:decode_step_tokens_total", "Tokens of decode steps (batches of one token per stream).",
             "/decode_step_tokens"},
            {"counter", "epq:decode_step_seconds_total",
             "Time in decode steps, from the first MoE layer's experts to the last's.", "/decode_step_seconds"},
            {"counter", "epq:decode_step_read_wait_seconds_total", "Time decode steps waited on expert reads.",
             "/decode_step_read_wait_seconds"},
            {"counter", "epq:decode_steps_total", "Decode steps timed.", "/decode_steps"},
            {"counter", "epq:decode_step_lookups_total", "Expert uses of decode steps.", "/decode_step_lookups"},
            {"counter", "epq:decode_step_misses_total", "Expert uses of decode steps not found resident.",
             "/decode_step_demand_misses"},
            {"counter", "epq:decode_step_missed_expert_bytes_total",
             "Expert bytes read during decode steps (their misses and guesses).", "/decode_step_missed_expert_bytes"},
            {"counter", "epq:prefetch_used_bytes_total", "Bytes read early by prefetch and then used.",
             "/prefetch/useful_bytes"},
            {"counter", "epq:prefetch_wasted_bytes_total", "Bytes read early by prefetch and not used.",
             "/prefetch/wasted_bytes"},
        };
        const nlohmann::json j = pager.to_json();
        for (const PagerMetric & m : kPagerMetrics) {
            metric(out, m.type, m.name, m.help, j.at(nlohmann::json::json_pointer(m.pointer)).get<double>());
        }
    }
    if (gate) {
        metric(out, "gauge", "epq:decode_streams", "Requests that may generate at once.", gate->capacity);
        metric(out, "gauge", "epq:decode_streams_max", "The most requests the arena lets generate at once.",
               gate->max_capacity);
        metric(out, "gauge", "epq:requests_generating", "Requests generating now.", gate->active);
        metric(out, "gauge", "epq:requests_waiting", "Requests waiting for a place to generate.", gate->waiting);
        metric(out, "counter", "epq:requests_waited_total", "Requests that had to wait before generating.",
               static_cast<double>(gate->waited));
        metric(out, "counter", "epq:request_wait_seconds_total", "Time requests waited before generating.",
               gate->wait_seconds);
        metric(out, "counter", "epq:generating_seconds_total", "Time with at least one request generating.",
               gate->busy_seconds);
    }
    return out.str();
}

}  // namespace epq::server
