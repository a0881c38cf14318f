#include "server/stream_admission.h"

#include "server-http.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>

namespace epq::server {

namespace {

// llama.cpp's response, held until its stream is done, and the place with it. Declared before
// the response so that the response (which cancels its tasks and frees its slot when destroyed)
// goes first.
struct GatedResponse : server_http_res {
    StreamGate::Permit permit;
    std::unique_ptr<server_http_res> inner;

    GatedResponse(StreamGate::Permit p, std::unique_ptr<server_http_res> r)
        : permit(std::move(p)), inner(std::move(r)) {
        content_type = inner->content_type;
        status = inner->status;
        headers = inner->headers;
        data = inner->data;
        next = [r = inner.get()](std::string & out) { return r->next(out); };
    }
    void on_complete() override { inner->on_complete(); }
};

std::unique_ptr<server_http_res> gone() {
    auto res = std::make_unique<server_http_res>();
    res->status = 503;
    res->data = nlohmann::json{{"error",
                                {{"code", 503},
                                 {"message", "the request was abandoned while it waited for a generating slot"},
                                 {"type", "unavailable_error"}}}}
                    .dump();
    return res;
}

}  // namespace

bool route_generates(const std::string & path) {
    static const char * const kRoutes[] = {
        "/completion",   "/completions", "/v1/completions", "/chat/completions", "/v1/chat/completions",
        "/v1/responses", "/responses",   "/v1/messages",    "/infill",
    };
    return std::find_if(std::begin(kRoutes), std::end(kRoutes), [&](const char * r) { return path == r; }) !=
           std::end(kRoutes);
}

HttpHandler gated_handler(std::shared_ptr<StreamGate> gate, HttpHandler inner) {
    return [gate = std::move(gate), inner = std::move(inner)](const server_http_req & req) {
        StreamGate::Permit permit = gate->acquire(req.should_stop);
        if (!permit) {
            return gone();
        }
        std::unique_ptr<server_http_res> res = inner(req);
        if (!res || !res->is_stream()) {
            return res;  // done: the place is given back as the permit goes out of scope
        }
        return std::unique_ptr<server_http_res>(std::make_unique<GatedResponse>(std::move(permit), std::move(res)));
    };
}

}  // namespace epq::server
