#include "server/http_server.h"

#include "server/api_error.h"
#include "server/metrics_text.h"
#include "server/pager_state.h"
#include "server/web_assets.h"
#include "server/openai_api.h"
#include "server/peer_socket.h"
#include "util/error.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <sys/socket.h>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

namespace epq::server {

using json = nlohmann::json;

namespace {

constexpr std::chrono::milliseconds kPoll{50};  // how often a waiting handler checks its client

void send_json(httplib::Response & res, int status, const json & j) {
    res.status = status;
    res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json; charset=utf-8");
}

void send_error(httplib::Response & res, const ApiError & e) {
    if (e.status == 503) {
        res.set_header("Retry-After", "1");
    }
    send_json(res, e.status, e.body());
}

ApiError from_rejected(const RequestRejected & r) {
    ApiError e{r.status, r.type, r.message, json::object()};
    if (r.type == "exceed_context_size_error") {
        e.extra = {{"n_prompt_tokens", r.n_prompt_tokens}, {"n_ctx", r.n_ctx}};
    }
    return e;
}

json parse_body(const httplib::Request & req) {
    try {
        return json::parse(req.body);
    } catch (const json::parse_error & e) {
        throw bad_request(std::string("the request body is not valid JSON: ") + e.what());
    }
}

std::string random_id(const char * prefix) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char * hex = "0123456789abcdef";
    std::string id = prefix;
    uint64_t x = rng();
    for (int i = 0; i < 24; ++i) {
        id += hex[(i < 16 ? x >> (i * 4) : rng() >> 60) & 15];
    }
    return id;
}

std::string sse(const json & j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// The page itself is public (it asks for the key before calling anything that needs one).
bool is_public(const std::string & path) {
    return path == "/health" || path == "/v1/health" || path == "/v1/models" || path == "/models" ||
           find_web_asset(path) != nullptr;
}

// Constant-time comparison: a key check should not tell how much of a guess was right.
bool same_key(const std::string & given, const std::string & key) {
    size_t diff = given.size() ^ key.size();
    for (size_t i = 0; i < given.size(); ++i) {
        diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(i < key.size() ? key[i] : 0);
    }
    return diff == 0;
}

// A stream's state, kept alive by the content provider until the connection is done with it.
// Counts a request as in flight for as long as it lives (until its stream is fully written).
struct InFlight {
    std::atomic<int> & n;
    explicit InFlight(std::atomic<int> & counter) : n(counter) { ++n; }
    ~InFlight() { --n; }
    InFlight(const InFlight &) = delete;
    InFlight & operator=(const InFlight &) = delete;
};

struct Stream {
    std::unique_ptr<InFlight> in_flight;
    ParsedRequest parsed;
    std::unique_ptr<ResponseBuilder> builder;
    std::shared_ptr<CompletionChannel> channel;
    std::unique_ptr<PeerSocket> peer;
    bool started = false;
    bool finished = false;
};

}  // namespace

struct HttpServer::Impl {
    ServerOptions o;
    httplib::Server svr;
    std::atomic<ServingEngine *> engine{nullptr};
    std::thread thread;
    int port = -1;
    std::atomic<int> in_flight{0};

    explicit Impl(ServerOptions opts) : o(std::move(opts)) {}

    std::string model_name() const { return o.alias; }

    void routes();
    void completion(const httplib::Request & req, httplib::Response & res, Endpoint ep);
};

void HttpServer::Impl::routes() {
    const size_t threads = static_cast<size_t>(std::max(4, o.http_threads));
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    svr.set_payload_max_length(o.max_body_bytes);
    // cpp-httplib's default also sets SO_REUSEPORT, which lets a second server bind the same
    // port and take half its connections: only allow quick rebinding after a restart.
    svr.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    svr.set_read_timeout(o.timeout_s, 0);
    svr.set_write_timeout(o.timeout_s, 0);

    // Keys and loading come before any route.
    svr.set_pre_routing_handler([this](const httplib::Request & req, httplib::Response & res) {
        if (!o.api_keys.empty() && !is_public(req.path)) {
            std::string key;
            const std::string auth = req.get_header_value("Authorization");
            if (auth.rfind("Bearer ", 0) == 0) {
                key = auth.substr(7);
            } else if (req.has_header("X-Api-Key")) {
                key = req.get_header_value("X-Api-Key");
            }
            bool ok = false;
            for (const auto & k : o.api_keys) {
                ok = same_key(key, k) || ok;
            }
            if (!ok) {
                send_error(res, {401, "authentication_error", "Invalid API Key", json::object()});
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        if (!engine.load() && req.path != "/v1/models" && req.path != "/models" && !find_web_asset(req.path)) {
            send_error(res, {503, "unavailable_error", "Loading model", json::object()});
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    // Statuses cpp-httplib sets itself (404, 413, 400 on a malformed request line) get a body.
    svr.set_error_handler([](const httplib::Request &, httplib::Response & res) {
        if (!res.body.empty()) {
            return;
        }
        if (res.status == 404) {
            send_error(res, {404, "not_found_error", "File Not Found", json::object()});
        } else if (res.status == 413) {
            send_error(res, {413, "invalid_request_error", "the request body is too large", json::object()});
        } else if (res.status >= 400) {
            send_error(res, {res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                             "HTTP error " + std::to_string(res.status), json::object()});
        }
    });
    svr.set_exception_handler([](const httplib::Request &, httplib::Response & res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(ep);
        } catch (const ApiError & e) {
            send_error(res, e);
            return;
        } catch (const RequestRejected & r) {
            send_error(res, from_rejected(r));
            return;
        } catch (const std::exception & e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, {500, "server_error", what, json::object()});
    });

    auto health = [](const httplib::Request &, httplib::Response & res) { send_json(res, 200, {{"status", "ok"}}); };
    svr.Get("/health", health);
    svr.Get("/v1/health", health);

    auto models = [this](const httplib::Request &, httplib::Response & res) {
        json m = {{"id", model_name()}, {"object", "model"}, {"created", std::time(nullptr)}, {"owned_by", "epq"}};
        if (ServingEngine * e = engine.load()) {
            m["meta"] = {{"n_vocab", e->n_vocab()},
                         {"n_ctx_train", e->n_ctx_train()},
                         {"n_embd", e->n_embd()},
                         {"n_params", e->n_params()},
                         {"size", e->model_size()}};
        }
        send_json(res, 200, {{"object", "list"}, {"data", json::array({m})}});
    };
    svr.Get("/v1/models", models);
    svr.Get("/models", models);

    for (const char * path : {"/v1/chat/completions", "/chat/completions"}) {
        svr.Post(path, [this](const httplib::Request & req, httplib::Response & res) {
            completion(req, res, Endpoint::chat);
        });
    }
    for (const char * path : {"/v1/completions", "/completions"}) {
        svr.Post(path, [this](const httplib::Request & req, httplib::Response & res) {
            completion(req, res, Endpoint::completion);
        });
    }

    svr.Post("/tokenize", [this](const httplib::Request & req, httplib::Response & res) {
        const json body = parse_body(req);
        if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
            throw bad_request("'content' must be a string");
        }
        const auto flag = [&](const char * name, bool def) {
            if (!body.contains(name) || body[name].is_null()) {
                return def;
            }
            if (!body[name].is_boolean()) {
                throw bad_request(std::string("'") + name + "' must be true or false");
            }
            return body[name].get<bool>();
        };
        ServingEngine & e = *engine.load();
        const auto tokens =
            e.tokenize(body["content"].get<std::string>(), flag("add_special", false), flag("parse_special", true));
        json out = json::array();
        const bool pieces = flag("with_pieces", false);
        for (int32_t t : tokens) {
            out.push_back(pieces ? json{{"id", t}, {"piece", e.piece(t)}} : json(t));
        }
        send_json(res, 200, {{"tokens", out}});
    });
    // The prompt a chat request becomes (llama-server's /apply-template).
    svr.Post("/apply-template", [this](const httplib::Request & req, httplib::Response & res) {
        const auto msgs = parse_messages(parse_body(req));
        send_json(res, 200, {{"prompt", engine.load()->apply_chat_template(msgs)}});
    });
    svr.Post("/detokenize", [this](const httplib::Request & req, httplib::Response & res) {
        const json body = parse_body(req);
        if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
            throw bad_request("'tokens' must be a list of token ids");
        }
        std::vector<int32_t> tokens;
        for (const auto & t : body["tokens"]) {
            if (!t.is_number_integer()) {
                throw bad_request("'tokens' must be a list of token ids");
            }
            const auto id = t.get<int64_t>();
            if (id < 0 || id > INT32_MAX) {
                throw bad_request("token id " + std::to_string(id) + " is out of range");
            }
            tokens.push_back(static_cast<int32_t>(id));
        }
        send_json(res, 200, {{"content", engine.load()->detokenize(tokens)}});
    });

    svr.Get("/props", [this](const httplib::Request &, httplib::Response & res) {
        ServingEngine & e = *engine.load();
        const SamplingParams d;
        send_json(res, 200,
                  {{"default_generation_settings",
                    {{"n_ctx", e.options().n_ctx_slot},
                     {"params",
                      {{"temperature", d.temp},
                       {"top_k", d.top_k},
                       {"top_p", d.top_p},
                       {"min_p", d.min_p},
                       {"typical_p", d.typical_p},
                       {"repeat_last_n", d.repeat_last_n},
                       {"repeat_penalty", d.repeat_penalty},
                       {"presence_penalty", d.presence_penalty},
                       {"frequency_penalty", d.frequency_penalty},
                       {"n_predict", -1},
                       {"samplers", {"penalties", "top_k", "typ_p", "top_p", "min_p", "temperature"}}}}}},
                   {"total_slots", e.options().n_parallel},
                   {"model_alias", model_name()},
                   {"model_path", o.model_path},
                   {"chat_template", e.chat_template()},
                   {"modalities", {{"vision", false}, {"audio", false}}},
                   {"build_info", "epq"},
                   {"epq", o.startup_info}});
    });
    svr.Get("/slots", [this](const httplib::Request &, httplib::Response & res) {
        ServingEngine & e = *engine.load();
        json out = json::array();
        for (const auto & s : e.slots()) {
            out.push_back({{"id", s.id},
                           {"id_task", s.request},
                           {"n_ctx", e.options().n_ctx_slot},
                           {"is_processing", s.busy},
                           {"n_cached_tokens", s.n_cached},
                           {"n_prompt_tokens", s.n_prompt},
                           {"next_token", json::array({{{"has_next_token", s.busy}, {"n_decoded", s.n_generated}}})}});
        }
        send_json(res, 200, out);
    });
    // The chat page and its pager view. Model text reaches the page only as data: the policy
    // forbids inline scripts, so even a page bug that produced markup from it could not run it.
    auto page = [](const httplib::Request & req, httplib::Response & res) {
        const WebAsset * a = find_web_asset(req.path);
        if (!a) {
            send_error(res, {404, "not_found_error", "File Not Found", json::object()});
            return;
        }
        res.set_header("Content-Security-Policy",
                       "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
        res.set_header("X-Content-Type-Options", "nosniff");
        res.set_header("Referrer-Policy", "no-referrer");
        res.set_header("Cache-Control", "no-cache");
        res.set_content(reinterpret_cast<const char *>(a->data), a->size, web_content_type(a->path));
    };
    svr.Get("/", page);
    for (const WebAsset & a : web_assets()) {
        // cpp-httplib takes a pattern as a regular expression: "/app.js" would also match "/appXjs".
        std::string exact;
        for (const char * c = a.path; *c; ++c) {
            exact += *c == '.' ? std::string("\\.") : std::string(1, *c);
        }
        svr.Get(exact, page);
    }
    svr.Get("/pager/state", [this](const httplib::Request &, httplib::Response & res) {
        ServingEngine & e = *engine.load();
        const PagerView view = e.pager_view();
        send_json(res, 200, pager_state_json(e.counters(), e.pager_snapshot(), view, o.read_floor_bytes_per_second));
    });
    svr.Get("/metrics", [this](const httplib::Request &, httplib::Response & res) {
        if (!o.metrics) {
            send_error(res, {501, "not_supported_error",
                             "This server does not support metrics endpoint: start it with --metrics", json::object()});
            return;
        }
        ServingEngine & e = *engine.load();
        res.set_content(metrics_text(e.counters(), e.pager_snapshot()), "text/plain; version=0.0.4");
    });
}

void HttpServer::Impl::completion(const httplib::Request & req, httplib::Response & res, Endpoint ep) {
    ServingEngine & e = *engine.load();
    const json body = parse_body(req);
    auto stream = std::make_shared<Stream>();
    stream->in_flight = std::make_unique<InFlight>(in_flight);
    stream->parsed = ep == Endpoint::chat ? parse_chat_request(body, e, model_name())
                                          : parse_completion_request(body, e, model_name());
    stream->channel = e.submit(stream->parsed.req);
    stream->builder = std::make_unique<ResponseBuilder>(
        stream->parsed, random_id(ep == Endpoint::chat ? "chatcmpl-" : "cmpl-"), std::time(nullptr));
    stream->peer = std::make_unique<PeerSocket>(req.remote_addr, req.remote_port, req.local_port);

    if (!stream->parsed.stream) {
        std::string text;
        std::vector<TokenLogprob> lps;
        auto checked = std::chrono::steady_clock::now();
        for (;;) {
            CompletionEvent ev;
            const bool got = stream->channel->pop(ev, kPoll);
            // Events may come every few milliseconds: look at the client on a clock, not only
            // when none came.
            const auto now = std::chrono::steady_clock::now();
            if (now - checked >= kPoll || !got) {
                checked = now;
                if (stream->peer->closed()) {
                    stream->channel->cancel();  // the slot is freed at the next step
                    res.status = 499;
                    return;
                }
            }
            if (!got) {
                continue;
            }
            if (ev.kind == CompletionEvent::Kind::text) {
                text += ev.text;
                lps.insert(lps.end(), ev.logprobs.begin(), ev.logprobs.end());
            } else if (ev.kind == CompletionEvent::Kind::done) {
                send_json(res, 200, stream->builder->whole(text, lps, ev.finish_reason, ev.usage));
                return;
            } else {
                send_error(res, {ev.status, ev.status == 503 ? "unavailable_error" : "server_error", ev.error,
                                 json::object()});
                return;
            }
        }
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream](size_t, httplib::DataSink & sink) {
            auto write = [&](const std::string & s) { return sink.write(s.data(), s.size()); };
            if (stream->finished) {
                sink.done();
                return true;
            }
            if (!stream->started) {
                stream->started = true;
                const json first = stream->builder->first_chunk();
                if (!first.is_null() && !write(sse(first))) {
                    stream->channel->cancel();
                    return false;
                }
            }
            for (;;) {
                CompletionEvent ev;
                if (!stream->channel->pop(ev, kPoll)) {
                    if (stream->peer->closed()) {
                        stream->channel->cancel();
                        return false;
                    }
                    continue;
                }
                bool ok = true;
                if (ev.kind == CompletionEvent::Kind::text) {
                    ok = write(sse(stream->builder->text_chunk(ev.text, ev.logprobs)));
                } else if (ev.kind == CompletionEvent::Kind::done) {
                    ok = write(sse(stream->builder->final_chunk(ev.finish_reason)));
                    if (ok && stream->parsed.include_usage) {
                        ok = write(sse(stream->builder->usage_chunk(ev.usage)));
                    }
                    ok = ok && write("data: [DONE]\n\n");
                    stream->finished = true;
                } else {
                    // The stream is already 200: the error travels as an event, as OpenAI does.
                    ok = write(sse(ApiError{ev.status, ev.status == 503 ? "unavailable_error" : "server_error",
                                            ev.error, json::object()}
                                       .body()));
                    stream->finished = true;
                }
                if (!ok) {
                    stream->channel->cancel();
                    return false;
                }
                if (stream->finished) {
                    sink.done();
                }
                return true;
            }
        },
        [stream](bool success) {
            if (!success) {
                stream->channel->cancel();
            }
        });
}

HttpServer::HttpServer(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
    impl_->routes();
}

HttpServer::~HttpServer() {
    stop();
}

void HttpServer::start() {
    Impl & m = *impl_;
    if (m.o.port == 0) {
        m.port = m.svr.bind_to_any_port(m.o.host);
    } else if (m.svr.bind_to_port(m.o.host, m.o.port)) {
        m.port = m.o.port;
    }
    if (m.port <= 0) {
        throw Error("cannot listen on " + m.o.host + ":" + std::to_string(m.o.port) + ": " + std::strerror(errno) +
                    " (is another server on that port? choose one with --port)");
    }
    m.thread = std::thread([&m] { m.svr.listen_after_bind(); });
}

void HttpServer::set_read_floor(double bytes_per_second) {
    impl_->o.read_floor_bytes_per_second = bytes_per_second;
}

void HttpServer::set_engine(ServingEngine * engine) {
    impl_->engine = engine;
}

void HttpServer::stop() {
    // Let the requests in flight write their last words (ServingEngine::shutdown has ended
    // them): once stopping, cpp-httplib no longer calls stream providers.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (impl_->in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (impl_->thread.joinable()) {
        impl_->svr.stop();
        impl_->thread.join();
    }
}

int HttpServer::port() const {
    return impl_->port;
}

}  // namespace epq::server
