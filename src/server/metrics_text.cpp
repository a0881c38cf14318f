#include "server/metrics_text.h"

#include <sstream>

namespace epq::server {

namespace {

void metric(std::ostringstream & out, const char * type, const std::string & name, const char * help, double value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
        << name << " " << value << "\n";
}

}  // namespace

std::string metrics_text(const PagerSnapshot & pager) {
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
    return out.str();
}

}  // namespace epq::server
