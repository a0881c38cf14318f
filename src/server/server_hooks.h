// Three points inside llama.cpp's server library where epq adds what only the pager knows,
// reached without changing llama.cpp: the epq binary is linked with
//   -Wl,--wrap=server_http_context::start()            (mangled: see server_hooks.cpp)
//   -Wl,--wrap=server_context::load_model(common_params &)
//   -Wl,--wrap=server_http_context::post(path, handler) const
// llama_server() registers its routes and then starts listening; the start hook lets epq add
// its own routes (the pager view) to the same HTTP server first. The load hook runs after the
// model is loaded (the pager then releases the loader's mapping policy, locks the dense weights
// and preloads if asked). Both wrapped calls are made from server.cpp into other objects of the
// static library, so the linker redirects them; the pinned version keeps the names stable.
#pragma once

#include <functional>
#include <memory>
#include <string>

struct server_http_context;
struct server_http_req;
struct server_http_res;

namespace epq::server {

// Called with the HTTP server before it starts listening (single-model and router mode).
void set_before_listen_hook(std::function<void(server_http_context &)> fn);
// Called once the model has loaded; returns false to fail the load (the message already printed).
void set_after_load_hook(std::function<bool()> fn);

// llama.cpp's handler type (server_http_context::handler_t).
using HttpHandler = std::function<std::unique_ptr<server_http_res>(const server_http_req &)>;
// Called for each POST route as it is registered; returns the handler to register instead.
void set_post_route_hook(std::function<HttpHandler(const std::string & path, const HttpHandler &)> fn);

}  // namespace epq::server
