#include "server/pager_routes.h"

#include "backend/pager.h"
#include "sched/stream_gate.h"
#include "server/stream_tuning.h"
#include "server/metrics_text.h"
#include "server/web_assets.h"

#include "server-http.h"

#include <nlohmann/json.hpp>

#include <optional>

namespace epq::server {

namespace {

server_http_res_ptr respond(int status, std::string body, const std::string & type) {
    auto res = std::make_unique<server_http_res>();
    res->status = status;
    res->content_type = type;
    res->data = std::move(body);
    res->headers["Cache-Control"] = "no-store";
    return res;
}

nlohmann::json gate_json(DecodeStreamsView streams) {
    if (!streams.gate) {
        return nullptr;
    }
    const StreamGate::Counters c = streams.gate->counters();
    nlohmann::json j = {{"capacity", c.capacity},         {"max_capacity", c.max_capacity}, {"generating", c.active},
                        {"waiting", c.waiting},           {"admitted", c.admitted},         {"waited", c.waited},
                        {"wait_seconds", c.wait_seconds}, {"busy_seconds", c.busy_seconds}, {"tuning", nullptr}};
    if (streams.tuning) {
        const StreamTuner::Status t = streams.tuning->status();
        j["tuning"] = {
            {"last_read_wait_share", t.last_share < 0 ? nlohmann::json(nullptr) : nlohmann::json(t.last_share)},
            {"last_decode_step_tps", t.last_rate < 0 ? nlohmann::json(nullptr) : nlohmann::json(t.last_rate)},
            {"lowered", t.lowered},
            {"raised", t.raised},
            {"last_change", t.last_change}};
    }
    return j;
}

nlohmann::json stats_json(const Pager * pager, DecodeStreamsView streams, const PagerPageInfo & info) {
    nlohmann::json j = {{"paged", pager != nullptr}, {"model", info.model}};
    if (!pager) {
        j["not_paged"] = info.not_paged;
        return j;
    }
    j["arena_reasoning"] = info.arena_reasoning;
    j["pager"] = pager->stats().to_json();
    j["decode_streams"] = gate_json(streams);
    const Pager::View v = pager->view();
    j["view"] = {{"layers", v.layers},
                 {"n_expert", v.n_expert},
                 {"cells", v.cells},
                 {"resident_experts", v.resident_experts},
                 {"total_experts", static_cast<uint64_t>(v.layers.size()) * v.n_expert},
                 {"batches", v.batches}};
    return j;
}

}  // namespace

void add_pager_routes(server_http_context & http, const Pager * pager, DecodeStreamsView streams,
                      const PagerPageInfo & info) {
    // Relative links in the page resolve against /epq/, so /epq itself redirects there.
    http.get("/epq", [](const server_http_req &) {
        auto res = respond(302, "", "text/plain; charset=utf-8");
        res->headers["Location"] = "epq/";
        return res;
    });
    for (const WebAsset & a : web_assets()) {
        const std::string path = a.path;
        const std::string route = "/epq" + (path == "/index.html" ? std::string("/") : path);
        http.get(route, [&a](const server_http_req &) {
            return respond(200, std::string(reinterpret_cast<const char *>(a.data), a.size), web_content_type(a.path));
        });
    }
    http.get("/epq/stats", [pager, streams, info](const server_http_req &) {
        return respond(200, stats_json(pager, streams, info).dump(), "application/json; charset=utf-8");
    });
    const StreamGate * gate = streams.gate;
    http.get("/epq/metrics", [pager, gate](const server_http_req &) {
        if (!pager) {
            return respond(404, "# the model is not paged: no pager metrics\n", "text/plain; version=0.0.4");
        }
        std::optional<StreamGate::Counters> g;
        if (gate) {
            g = gate->counters();
        }
        return respond(200, metrics_text(pager->stats(), g), "text/plain; version=0.0.4");
    });
}

}  // namespace epq::server
