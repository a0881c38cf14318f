// epq serve against real clients: cpp-httplib's client and raw sockets here, curl, and the
// official openai npm package (tests/clients). Exactness is checked against `epq run` and the
// same server on stock llama.cpp (--no-pager), never against the server itself.
#include "serve_process.h"
#include "test_util.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <future>
#include <thread>

using namespace epq;
using namespace epq::test;
using json = nlohmann::json;

namespace {

std::string model() {
    return synth_model("tiny-qwen3moe", tiny("qwen3moe"));
}

httplib::Headers key(const std::string & k) {
    return {{"Authorization", "Bearer " + k}};
}

json post(ServeProcess & s, const std::string & path, const json & body, int expect = 200,
          const httplib::Headers & h = {}) {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(300, 0);
    auto r = c.Post(path.c_str(), h, body.dump(), "application/json");
    EXPECT_TRUE(r) << path << " (" << httplib::to_string(r.error()) << "); the server's log:\n" << s.log();
    if (!r) {
        return {};
    }
    EXPECT_EQ(r->status, expect) << path << ": " << r->body;
    return json::parse(r->body, nullptr, false);
}

std::string completion_text(ServeProcess & s, const std::string & prompt, int n) {
    const json r = post(s, "/v1/completions", {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}});
    return r.value("choices", json::array({json::object()}))[0].value("text", "<no text>");
}

// `epq run` prints a random model's bytes as they come; JSON carries only valid UTF-8, so the
// server sends U+FFFD for a broken sequence (as nlohmann-json's replace handler does): the same
// tokens, compared through the same replacement.
std::string as_json_text(const std::string & raw) {
    return json::parse(json(raw).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

// A raw connection that sends one request and reads what comes, for clients that go away.
struct RawClient {
    int fd = -1;
    RawClient(int port, const std::string & path, const json & body) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
            ADD_FAILURE() << "connect";
        }
        const std::string b = body.dump();
        const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                                "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
        EXPECT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
    }
    ~RawClient() { close(); }
    // Reads until `needle` appears or the connection ends (or 60 s pass).
    std::string read_until(const std::string & needle) {
        std::string got;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        char buf[4096];
        while (got.find(needle) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
            timeval tv{1, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            const ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n == 0) {
                break;
            }
            if (n > 0) {
                got.append(buf, static_cast<size_t>(n));
            }
        }
        return got;
    }
    void close() {
        if (fd >= 0) {
            ::close(fd);
            fd = -1;
        }
    }
};

bool any_slot_busy(ServeProcess & s) {
    httplib::Client c("127.0.0.1", s.port());
    auto r = c.Get("/slots");
    if (!r || r->status != 200) {
        return true;
    }
    for (const auto & slot : json::parse(r->body)) {
        if (slot["is_processing"].get<bool>()) {
            return true;
        }
    }
    return false;
}

const json kLong = {{"prompt", "Tell me a very long story."},
                    {"max_tokens", 100000},
                    {"ignore_eos", true},
                    {"temperature", 0},
                    {"stream", true}};

}  // namespace

TEST(Serve, RoutesKeysAndOpenAIErrors) {
    ServeProcess s(model(), {"--api-key", "secret", "--metrics", "-np", "2", "-c", "512", "--alias", "tiny"});
    httplib::Client c("127.0.0.1", s.port());
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    EXPECT_EQ(json::parse(health->body), json({{"status", "ok"}}));
    auto models = c.Get("/v1/models");  // public, like /health
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");

    const json ok_body = {{"prompt", "Hello"}, {"max_tokens", 2}, {"temperature", 0}, {"some_new_field", 1}};
    EXPECT_EQ(post(s, "/v1/completions", ok_body, 401)["error"]["type"], "authentication_error");
    EXPECT_EQ(post(s, "/v1/completions", ok_body, 401, key("wrong"))["error"]["code"], 401);
    EXPECT_EQ(post(s, "/v1/completions", ok_body, 200, {{"X-Api-Key", "secret"}})["object"], "text_completion");
    EXPECT_EQ(post(s, "/v1/completions", ok_body, 200, key("secret"))["usage"]["completion_tokens"], 2);

    auto missing = c.Get("/no/such/route", key("secret"));
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404);
    EXPECT_EQ(json::parse(missing->body)["error"]["type"], "not_found_error");

    auto malformed = c.Post("/v1/chat/completions", key("secret"), "{\"messages\": [", "application/json");
    ASSERT_TRUE(malformed);
    EXPECT_EQ(malformed->status, 400);
    EXPECT_EQ(json::parse(malformed->body)["error"]["type"], "invalid_request_error");
    for (const json & bad : {json{{"max_tokens", 4}}, json{{"messages", "hi"}}, json{{"messages", json::array()}},
                             json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"temperature", "hot"}},
                             json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 1.5}},
                             json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stop", 3}},
                             json{{"messages", {{{"content", "hi"}}}}}, json::array()}) {
        const json r = post(s, "/v1/chat/completions", bad, 400, key("secret"));
        EXPECT_EQ(r["error"]["type"], "invalid_request_error") << bad.dump();
        EXPECT_FALSE(r["error"]["message"].get<std::string>().empty());
    }
    EXPECT_EQ(post(s, "/v1/completions", {{"max_tokens", 1}}, 400, key("secret"))["error"]["type"],
              "invalid_request_error");
    std::string long_prompt;
    for (int i = 0; i < 400; ++i) {
        long_prompt += "word ";
    }
    const json too_long = post(s, "/v1/completions", {{"prompt", long_prompt}}, 400, key("secret"));
    EXPECT_EQ(too_long["error"]["type"], "exceed_context_size_error");
    EXPECT_EQ(too_long["error"]["n_ctx"], 256);
    auto huge = c.Post("/v1/completions", key("secret"), std::string(9 << 20, ' '), "application/json");
    ASSERT_TRUE(huge);
    EXPECT_EQ(huge->status, 413);

    const json tok = post(s, "/tokenize", {{"content", "Hello world"}}, 200, key("secret"));
    ASSERT_TRUE(tok["tokens"].is_array());
    EXPECT_GE(tok["tokens"].size(), 2u);
    EXPECT_EQ(post(s, "/detokenize", {{"tokens", tok["tokens"]}}, 200, key("secret"))["content"], "Hello world");
    auto metrics = c.Get("/metrics", key("secret"));
    ASSERT_TRUE(metrics);
    for (const char * name : {"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total",
                              "llamacpp:n_decode_total", "epq:arena_hits_total", "epq:bytes_read_total",
                              "epq:read_wait_seconds_total", "epq:prefetch_wasted_bytes_total"}) {
        EXPECT_NE(metrics->body.find(std::string("\n") + name + " "), std::string::npos) << name;
    }
    // A second server on the same port is refused, not sharing its connections.
    const auto second =
        run_command({"timeout", "60", EPQ_BINARY, "serve", "-m", model(), "--port", std::to_string(s.port())});
    EXPECT_EQ(second.exit_code, 1);
    EXPECT_NE(second.err.find("cannot listen on 127.0.0.1:" + std::to_string(s.port())), std::string::npos)
        << second.err;
    auto props = c.Get("/props", key("secret"));
    ASSERT_TRUE(props);
    EXPECT_EQ(json::parse(props->body)["total_slots"], 2);
    EXPECT_EQ(s.stop(), 0) << s.log();
}

// Exactness on every tiny architecture: hybrid recurrent layers (qwen35moe), sliding-window
// attention and sinks (gpt-oss), latent attention (deepseek2) and plain ones, each with the
// slots' sequences in one unified KV cache.
std::string arch_test_name(const ::testing::TestParamInfo<std::string> & param_info) {
    std::string n = param_info.param;
    std::replace(n.begin(), n.end(), '-', '_');
    return n;
}

class ServeArch : public ::testing::TestWithParam<std::string> {
protected:
    std::string arch_model() const { return synth_model("tiny-" + GetParam(), tiny(GetParam())); }
};

INSTANTIATE_TEST_SUITE_P(Serve, ServeArch, ::testing::Values("qwen3moe", "qwen35moe", "gpt-oss", "deepseek2", "olmoe"),
                         arch_test_name);

// Deliverable 7: a request served alone returns what `epq run` generates from the same
// (templated) prompt, and what the same server on stock llama.cpp returns.
TEST_P(ServeArch, AloneMatchesEpqRunAndStock) {
    const std::string m = arch_model();
    ServeProcess paged(m, {"-np", "2", "-c", "1024"});
    ServeProcess stock(m, {"-np", "2", "-c", "1024", "--no-pager"});
    const json chat = {{"messages",
                        {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "What is a mixture of experts?"}}}},
                       {"max_tokens", 24},
                       {"temperature", 0}};
    const std::string templated = post(paged, "/apply-template", chat)["prompt"];
    ASSERT_NE(templated.find("mixture of experts"), std::string::npos) << templated;
    for (const std::string & prompt : {std::string("Once upon a time"), templated}) {
        const auto run = run_epq({"run", "-m", m, "-p", prompt, "-n", "24", "--temp", "0", "-c", "512", "-t", "2"});
        ASSERT_EQ(run.exit_code, 0) << run.err;
        const std::string want = as_json_text(run.out.substr(0, run.out.size() - 1));  // it ends with a newline
        EXPECT_EQ(completion_text(paged, prompt, 24), want) << prompt;
        EXPECT_EQ(completion_text(stock, prompt, 24), want) << prompt;
    }
    const json r = post(paged, "/v1/chat/completions", chat);
    EXPECT_EQ(r["choices"][0]["message"]["content"], completion_text(stock, templated, 24));

    // Sampling with a seed: the same chain draws the same tokens in both tools.
    const auto seeded = run_epq({"run", "-m", m, "-p", "Once upon a time", "-n", "24", "--temp", "1.2", "--top-k", "50",
                                 "--top-p", "0.9", "--seed", "11", "-c", "512", "-t", "2"});
    ASSERT_EQ(seeded.exit_code, 0) << seeded.err;
    const json sampled = post(paged, "/v1/completions",
                              {{"prompt", "Once upon a time"},
                               {"max_tokens", 24},
                               {"temperature", 1.2},
                               {"top_k", 50},
                               {"top_p", 0.9},
                               {"min_p", 0},
                               {"seed", 11}});
    EXPECT_EQ(sampled["choices"][0]["text"], as_json_text(seeded.out.substr(0, seeded.out.size() - 1)));
}

// With several requests in one batch, each returns what it returns alone wherever stock
// llama.cpp is itself batch-invariant for the model; the test measures stock first and says.
// Over HTTP the batches' composition and where each request's keys land in the shared KV cache
// depend on arrival timing, and stock's own result moves with them (measured on tiny qwen35moe:
// in a context that keeps earlier requests' cells, stock's greedy text differed from the same
// prompt alone for 147 of 1,200 requests; from an empty context, for none; a last-bit
// difference in attention becomes another expert at a routing near-tie). Here the second round of requests reuses the
// first round's prompt cache, which keeps each sequence's cells in place, except on qwen35moe: a recurrent state cannot
// be rolled back, so every request is prefilled again into whatever cells are free, and stock and paged each draw their
// own layout. qwen35moe is therefore checked where the layout can be pinned: BatchExact runs the same server-like
// history of batches on both, byte for byte.
class ServeBatch : public ServeArch {};

INSTANTIATE_TEST_SUITE_P(Serve, ServeBatch, ::testing::Values("qwen3moe", "gpt-oss", "deepseek2", "olmoe"),
                         arch_test_name);

TEST_P(ServeBatch, ConcurrentRequestsMatchAloneWhereStockDoes) {
    const std::string m = arch_model();
    const std::vector<std::string> prompts = {"The capital of France", "def fibonacci(n):", "Once upon a time",
                                              "Mixture of experts models route"};
    std::map<std::string, std::vector<std::string>> alone, together;
    for (const std::string mode : {"stock", "paged"}) {
        std::vector<std::string> extra = {"-np", "4", "-c", "2048"};
        if (mode == "stock") {
            extra.push_back("--no-pager");
        }
        ServeProcess s(m, extra);
        for (const auto & p : prompts) {
            alone[mode].push_back(completion_text(s, p, 16));
        }
        std::vector<std::future<std::string>> fs;
        for (const auto & p : prompts) {
            fs.push_back(std::async(std::launch::async, [&s, p] { return completion_text(s, p, 16); }));
        }
        for (auto & f : fs) {
            together[mode].push_back(f.get());
        }
    }
    EXPECT_EQ(alone["paged"], alone["stock"]);
    if (together["stock"] == alone["stock"]) {
        std::printf("stock llama.cpp is batch-invariant on this model: the paged server must be too\n");
        EXPECT_EQ(together["paged"], alone["paged"]);
    } else {
        std::printf("stock llama.cpp is not batch-invariant on this model: nothing to require of the batch\n");
    }
}

// The prompt cache on a sliding-window model, with a history several windows long: a prompt
// that departs from the slot's history early reuses the part before (every layer kept every
// position), one that extends it reuses all of it, and `cache_prompt: false` prefills the
// whole prompt, so its result does not depend on earlier requests (kept keys come from batches
// of other sizes: the same math, other rounding) and equals a fresh server's.
TEST(Serve, PromptCacheOnASlidingWindowModel) {
    const std::string m = synth_model("tiny-gpt-oss", tiny("gpt-oss"));
    std::string a;
    for (int i = 0; i < 700; ++i) {
        a += (i ? " word" : "word") + std::to_string(i);
    }
    const std::string tail = " and then something completely different happened";
    const std::string early = a.substr(0, a.size() * 2 / 5) + tail;
    auto cached = [](const json & r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(); };
    auto ask = [](const std::string & prompt, bool cache) {
        return json{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"cache_prompt", cache}};
    };
    ServeProcess fresh(m, {"-np", "1", "-c", "4096"});
    const json want_early = post(fresh, "/v1/completions", ask(early, true));
    ServeProcess s(m, {"-np", "1", "-c", "4096"});
    const json first = post(s, "/v1/completions", ask(a, true));
    const int n_a = first["usage"]["prompt_tokens"].get<int>();
    ASSERT_GT(n_a, 1200) << "the history must be several windows long";
    const json early_r = post(s, "/v1/completions", ask(early, true));
    EXPECT_GT(cached(early_r), n_a / 3);
    EXPECT_LT(cached(early_r), n_a / 2);
    const json again = post(s, "/v1/completions", ask(early, false));
    EXPECT_EQ(cached(again), 0);
    EXPECT_EQ(again["choices"][0]["text"], want_early["choices"][0]["text"]);
    post(s, "/v1/completions", ask(a, false));
    EXPECT_GE(cached(post(s, "/v1/completions", ask(a + tail, true))), n_a);
}

TEST(Serve, ClientThatGoesAwayFreesItsSlot) {
    ServeProcess s(model(), {"-np", "1", "-c", "8192", "--metrics"});
    {
        RawClient raw(s.port(), "/v1/completions", kLong);
        ASSERT_NE(raw.read_until("data: ").find("data: "), std::string::npos);
        EXPECT_TRUE(any_slot_busy(s));
    }  // closed mid-stream
    const auto t0 = std::chrono::steady_clock::now();
    while (any_slot_busy(s) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_FALSE(any_slot_busy(s)) << "the slot still decodes for a client that left";
    // The same with a non-streaming request.
    json body = kLong;
    body["stream"] = false;
    {
        RawClient raw(s.port(), "/v1/completions", body);
        const auto t1 = std::chrono::steady_clock::now();
        while (!any_slot_busy(s) && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(10)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        EXPECT_TRUE(any_slot_busy(s));
    }
    const auto t2 = std::chrono::steady_clock::now();
    while (any_slot_busy(s) && std::chrono::steady_clock::now() - t2 < std::chrono::seconds(10)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_FALSE(any_slot_busy(s));
    httplib::Client c("127.0.0.1", s.port());
    auto metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_NE(metrics->body.find("\nepq:requests_cancelled_total 2\n"), std::string::npos) << metrics->body;
    EXPECT_EQ(s.stop(), 0);
}

TEST(Serve, FullQueueIs503WithRetryAfter) {
    ServeProcess s(model(), {"-np", "1", "-c", "8192", "--queue", "1", "--metrics"});
    RawClient running(s.port(), "/v1/completions", kLong);
    ASSERT_NE(running.read_until("data: ").find("data: "), std::string::npos);
    RawClient waiting(s.port(), "/v1/completions", kLong);
    httplib::Client c("127.0.0.1", s.port());
    for (int i = 0; i < 3000; ++i) {  // until the second request waits in the queue
        auto m = c.Get("/metrics");
        if (m && m->body.find("\nllamacpp:requests_deferred 1\n") != std::string::npos) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto r = c.Post("/v1/completions", json({{"prompt", "Hi"}, {"max_tokens", 1}}).dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
    EXPECT_EQ(json::parse(r->body)["error"]["type"], "unavailable_error");
}

TEST(Serve, SigtermEndsStreamsWithAnErrorAndExitsZero) {
    ServeProcess s(model(), {"-np", "1", "-c", "8192"});
    RawClient raw(s.port(), "/v1/chat/completions",
                  {{"messages", {{{"role", "user"}, {"content", "Talk forever."}}}},
                   {"max_tokens", 100000},
                   {"ignore_eos", true},
                   {"stream", true}});
    ASSERT_NE(raw.read_until("\"content\"").find("data: "), std::string::npos);
    std::future<int> code = std::async(std::launch::async, [&] { return s.stop(); });
    const std::string rest = raw.read_until("\"error\"");
    EXPECT_NE(rest.find("\"error\""), std::string::npos) << rest;
    EXPECT_EQ(code.get(), 0);
}

TEST(Serve, CurlStreamsServerSentEvents) {
    ServeProcess s(model(), {"-np", "1", "-c", "1024"});
    const json body = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                       {"max_tokens", 6},
                       {"temperature", 0},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
    const auto r = run_command({"curl", "-sS", "-N", "-H", "Content-Type: application/json", "-d", body.dump(),
                                s.url() + "/v1/chat/completions"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<json> chunks;
    size_t at = 0;
    bool done = false;
    while ((at = r.out.find("data: ", at)) != std::string::npos) {
        const size_t end = r.out.find("\n\n", at);
        const std::string data = r.out.substr(at + 6, end - at - 6);
        at = end;
        if (data == "[DONE]") {
            done = true;
            continue;
        }
        chunks.push_back(json::parse(data));
    }
    ASSERT_TRUE(done) << r.out;
    ASSERT_GE(chunks.size(), 3u) << r.out;
    for (const auto & c : chunks) {
        EXPECT_EQ(c["id"], chunks[0]["id"]);
        EXPECT_EQ(c["object"], "chat.completion.chunk");
    }
    EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    const json & last_choice = chunks[chunks.size() - 2]["choices"][0];
    EXPECT_EQ(last_choice["finish_reason"], "length");
    EXPECT_TRUE(chunks.back()["choices"].empty());
    EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 6);
    std::string streamed;
    for (const auto & c : chunks) {
        if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
            streamed += c["choices"][0]["delta"]["content"].get<std::string>();
        }
    }
    json whole = body;
    whole["stream"] = false;
    EXPECT_EQ(post(s, "/v1/chat/completions", whole)["choices"][0]["message"]["content"], streamed);
}

// The official openai npm package (tests/clients, installed by scripts/test.sh from its
// lockfile): streaming, non-streaming, abort mid-stream, a two-turn chat that reuses the cache,
// its errors, and its retry on 503.
TEST(Serve, OpenAINodeClient) {
    const std::string dir = std::string(EPQ_SOURCE_DIR) + "/tests/clients";
    if (access((dir + "/node_modules/openai/package.json").c_str(), R_OK) != 0) {
        FAIL() << "the openai package is not installed: run (cd tests/clients && npm ci)";
    }
    ServeProcess s(model(), {"-np", "2", "-c", "4096", "--api-key", "sk-test", "--metrics"});
    const auto r = run_command({"node", dir + "/openai_client.mjs", s.url() + "/v1", "sk-test"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::printf("%s", r.out.c_str());
    ServeProcess busy(model(), {"-np", "1", "-c", "8192", "--queue", "1", "--metrics"});
    const auto retry = run_command({"node", dir + "/openai_retry.mjs", busy.url() + "/v1"});
    EXPECT_EQ(retry.exit_code, 0) << retry.out << retry.err;
    std::printf("%s", retry.out.c_str());
}

// A short run of the loopback load test (scripts/serve_load.sh runs the long one): 16 clients
// with mixed endpoints, prompt lengths, streams and aborts; every request accounted for, the
// server's counters agree, it exits cleanly (a sanitizer report would make it fail).
TEST(Serve, LoadTestAccountsForEveryRequest) {
    const std::string dir = std::string(EPQ_SOURCE_DIR) + "/tests/clients";
    if (access((dir + "/node_modules/openai/package.json").c_str(), R_OK) != 0) {
        FAIL() << "the openai package is not installed: run (cd tests/clients && npm ci)";
    }
    ServeProcess s(model(), {"-np", "4", "-c", "8192", "--metrics"});
    const auto r = run_command({"node", dir + "/load.mjs", s.url() + "/v1", "10", "16"});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::printf("%s", r.out.c_str());
    EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(Serve, ChatPageIsBuiltInAndThePagerStateFeedsItsHeatMap) {
    ServeProcess s(model(), {"--api-key", "k1", "-np", "1"});
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    // The page and its files need no key (the page asks for one) and come from the binary.
    auto page = c.Get("/");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
    EXPECT_NE(page->get_header_value("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
    EXPECT_NE(page->body.find("<script src=\"/app.js\">"), std::string::npos);
    auto js = c.Get("/app.js");
    ASSERT_TRUE(js);
    EXPECT_EQ(js->status, 200);
    EXPECT_NE(js->get_header_value("Content-Type").find("javascript"), std::string::npos);
    EXPECT_NE(js->body.find("/pager/state"), std::string::npos);
    auto css = c.Get("/style.css");
    ASSERT_TRUE(css);
    EXPECT_EQ(css->status, 200);
    // Only the files themselves: a path that a pattern could be read to match is not found.
    for (const char * path : {"/appXjs", "/style-css", "/index.htm", "/app.js.map"}) {
        auto r = c.Get(path, key("k1"));  // past the key check, to the routes
        ASSERT_TRUE(r) << path;
        EXPECT_EQ(r->status, 404) << path;
    }
    // The pager's state is not public.
    auto no_key = c.Get("/pager/state");
    ASSERT_TRUE(no_key);
    EXPECT_EQ(no_key->status, 401);

    auto state = [&]() {
        auto r = c.Get("/pager/state", key("k1"));
        EXPECT_TRUE(r && r->status == 200);
        return r ? json::parse(r->body, nullptr, false) : json();
    };
    // The first request asks the loop for a heat map; an idle loop takes it at once.
    auto heat_after = [&](uint64_t batches) {
        json j;
        for (int i = 0; i < 100; ++i) {
            j = state();
            if (j.contains("heat") && j["heat"]["batches"].get<uint64_t>() > batches) {
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return j;
    };
    json j = heat_after(0);
    EXPECT_TRUE(j["paged"].get<bool>());
    EXPECT_GT(j["read_floor_bytes_per_second"].get<double>(), 0.0);
    EXPECT_FALSE(j.contains("heat") && j["heat"]["batches"].get<uint64_t>() > 0) << "no batch has run yet";

    post(s, "/v1/completions", {{"prompt", "The arena"}, {"max_tokens", 6}, {"temperature", 0}}, 200, key("k1"));
    j = heat_after(0);
    ASSERT_TRUE(j.contains("heat")) << j.dump();
    const json & h = j["heat"];
    ASSERT_EQ(h["layers"].size(), 4u);  // tiny-qwen3moe: 4 MoE layers of 32 experts
    ASSERT_EQ(h["n_expert"], 32);
    ASSERT_EQ(h["cells"].size(), 4u);
    size_t resident = 0, fresh = 0;
    for (const auto & row : h["cells"]) {
        const std::string r = row.get<std::string>();
        ASSERT_EQ(r.size(), 32u);
        for (char ch : r) {
            ASSERT_TRUE(ch >= '0' && ch <= '3') << r;
            resident += ch == '1' || ch == '2';
            fresh += ch == '3' || ch == '2';
        }
    }
    EXPECT_GT(fresh, 0u) << "the experts the request used or read show as recent";
    EXPECT_GT(j["resident_experts"].get<uint64_t>(), 0u);
    EXPECT_GE(j["views_taken"].get<uint64_t>(), 1u);
    EXPECT_GE(j["view_seconds_total"].get<double>(), 0.0);
    EXPECT_LE(j["resident_experts"].get<uint64_t>(), j["total_experts"].get<uint64_t>());
    EXPECT_GE(j["counters"]["tokens_predicted_total"].get<uint64_t>(), 5u);
    EXPECT_GT(j["counters"]["misses"].get<uint64_t>(), 0u);
    EXPECT_GT(j["counters"]["bytes_read"].get<uint64_t>(), 0u);
    // Another request moves it on.
    const uint64_t before = h["batches"];
    post(s, "/v1/completions", {{"prompt", "Another prompt entirely"}, {"max_tokens", 4}}, 200, key("k1"));
    const json later = heat_after(before);
    EXPECT_GT(later["heat"]["batches"].get<uint64_t>(), before);
    EXPECT_EQ(s.stop(), 0);
}

// The chat page in a real browser (tests/clients/page.mjs: Debian's chromium driven headless by
// puppeteer-core): a reply streams in and equals the API's text, stop aborts a reply, the heat
// map changes, model text with markup is shown as text; screenshots at desktop and phone width.
TEST(Serve, ChatPageInAHeadlessBrowser) {
    const std::string chromium = "/usr/bin/chromium";
    if (access(chromium.c_str(), X_OK) != 0) {
        GTEST_SKIP() << "chromium is not installed, so the chat page was not tried in a browser: "
                        "apt-get install chromium (scripts/test.sh installs it when run as root)";
    }
    const std::string dir = std::string(EPQ_SOURCE_DIR) + "/tests/clients";
    if (access((dir + "/node_modules/puppeteer-core/package.json").c_str(), R_OK) != 0) {
        FAIL() << "puppeteer-core is not installed: run (cd tests/clients && npm ci)";
    }
    ServeProcess s(model(), {"--api-key", "k-page", "-np", "1", "-c", "4096", "--read-floor-seconds", "0.3"});
    // EPQ_PAGE_SHOTS=DIR keeps the screenshots there, to look at them.
    const char * keep = std::getenv("EPQ_PAGE_SHOTS");
    const std::string shots = keep && *keep ? keep : temp_dir() + "/page-shots";
    ASSERT_EQ(run_command({"mkdir", "-p", shots}).exit_code, 0);
    const auto r = run_command({"node", dir + "/page.mjs", s.url(), "k-page", shots, chromium});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    std::printf("%s", r.out.c_str());
    EXPECT_EQ(s.stop(), 0);
}
