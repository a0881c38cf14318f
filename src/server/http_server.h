// epq serve's HTTP side: llama-server's routes and OpenAI's, API keys, limits, streaming as
// server-sent events. It talks to the model only through ServingEngine; it listens before the
// model is loaded so /health can say 503 while loading.
#pragma once

#include "engine/serving_engine.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace epq::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::vector<std::string> api_keys;
    std::string alias;       // the model's name in responses and /v1/models
    std::string model_path;  // for /props
    bool metrics = false;
    int timeout_s = 600;                     // read/write timeout of a connection
    size_t max_body_bytes = 8 << 20;         // larger bodies get 413
    int http_threads = 64;                   // concurrent connections served
    std::string startup_info;                // shown by /props (arena reasoning etc.)
    double read_floor_bytes_per_second = 0;  // the disk's measured floor, for the page (0: not measured)
};

class HttpServer {
public:
    explicit HttpServer(ServerOptions opts);
    ~HttpServer();
    HttpServer(const HttpServer &) = delete;
    HttpServer & operator=(const HttpServer &) = delete;

    // Binds the port (throws epq::Error with the reason) and serves on a background thread.
    void start();
    // The disk's floor for the page's bandwidth chart; call before set_engine.
    void set_read_floor(double bytes_per_second);
    // The model is ready: the routes start answering (until then they return 503).
    void set_engine(ServingEngine * engine);
    // Stops accepting and waits for the connections in flight (their streams are ended by
    // ServingEngine::shutdown first).
    void stop();
    int port() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace epq::server
