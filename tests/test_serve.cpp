// epq serve is llama.cpp's own server with the pager inside. What is checked here:
//  - identity: the same requests to `epq serve` and to stock `llama-server` (built from the same
//    pinned tree, same file, same flags) give the same answers, in both weight layouts, alone
//    and four at a time: chat (streamed and not, greedy and seeded sampling), tools,
//    json_schema, the Responses and Anthropic APIs, native /completion with probabilities;
//  - what only epq adds: its flags, the pager's view and counters, no warm-up reads, the
//    memory budget, clear errors;
//  - clients no one here wrote (tests/clients: openai, @anthropic-ai/sdk, the Vercel AI SDK,
//    and llama.cpp's web UI in a headless browser).
// llama.cpp's own server test suite runs against it too (tests/server_suite).
#include "serve_process.h"
#include "test_util.h"

#include "synth/arch_fixture.h"

#include <gtest/gtest.h>
#include <cpp-httplib/httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
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

struct Reply {
    int status = 0;
    std::string body;
};

Reply post_raw(int port, const std::string & path, const json & body) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300, 0);
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    if (!r) {
        return {-1, httplib::to_string(r.error())};
    }
    return {r->status, r->body};
}

// `j` without the members named `keys`, at any depth.
json without(json j, const std::vector<std::string> & keys) {
    if (j.is_object()) {
        for (const auto & k : keys) {
            j.erase(k);
        }
        for (auto & [k, v] : j.items()) {
            v = without(v, keys);
        }
    } else if (j.is_array()) {
        for (auto & v : j) {
            v = without(v, keys);
        }
    }
    return j;
}

// What differs between two servers for the same answer: ids, clocks and timings.
json normalized(json j) {
    return without(std::move(j), {"id", "item_id", "created", "created_at", "timings", "system_fingerprint",
                                  "completed_at", "t_ms", "prompt_ms", "predicted_ms", "predicted_per_second",
                                  "prompt_per_second", "predicted_per_token_ms", "prompt_per_token_ms"});
}

// A body as JSON, or a stream of server-sent events as the list of their JSON payloads (with
// the event names), normalized.
json answer_of(const Reply & r) {
    json out = {{"status", r.status}};
    if (r.body.rfind("data:", 0) == 0 || r.body.rfind("event:", 0) == 0) {
        json events = json::array();
        size_t at = 0;
        while (at < r.body.size()) {
            size_t end = r.body.find("\n\n", at);
            if (end == std::string::npos) {
                end = r.body.size();
            }
            const std::string ev = r.body.substr(at, end - at);
            at = end + 2;
            std::string name, data;
            size_t line_at = 0;
            while (line_at < ev.size()) {
                size_t nl = ev.find('\n', line_at);
                if (nl == std::string::npos) {
                    nl = ev.size();
                }
                const std::string line = ev.substr(line_at, nl - line_at);
                line_at = nl + 1;
                if (line.rfind("event: ", 0) == 0) {
                    name = line.substr(7);
                } else if (line.rfind("data: ", 0) == 0) {
                    data = line.substr(6);
                }
            }
            if (data.empty() && name.empty()) {
                continue;
            }
            json d = json::parse(data, nullptr, false);
            events.push_back({{"event", name}, {"data", d.is_discarded() ? json(data) : normalized(d)}});
        }
        out["events"] = events;
    } else {
        const json b = json::parse(r.body, nullptr, false);
        out["body"] = b.is_discarded() ? json(r.body) : normalized(b);
    }
    return out;
}

const json kUser = {{{"role", "user"}, {"content", "What is the capital of France? Answer briefly."}}};

const json kWeatherTool = {
    {"type", "function"},
    {"function",
     {{"name", "get_weather"},
      {"description", "The weather in a city"},
      {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}};

// The requests both servers get: every API llama-server speaks, streamed and not.
std::vector<std::pair<std::string, json>> identity_requests() {
    const json schema = {{"type", "object"},
                         {"properties", {{"name", {{"type", "string"}}}, {"age", {{"type", "integer"}}}}},
                         {"required", {"name", "age"}}};
    return {
        {"/v1/chat/completions", {{"messages", kUser}, {"max_tokens", 12}, {"temperature", 0}}},
        {"/v1/chat/completions",
         {{"messages", kUser}, {"max_tokens", 12}, {"temperature", 0.9}, {"seed", 7}, {"stream", true}}},
        {"/v1/chat/completions",
         {{"messages", kUser},
          {"max_tokens", 12},
          {"tools", {kWeatherTool}},
          {"tool_choice", "required"},
          {"parallel_tool_calls", true},
          {"temperature", 0}}},
        {"/v1/chat/completions",
         {{"messages", kUser},
          {"max_tokens", 24},
          {"temperature", 0},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", schema}}}}}}},
        {"/v1/chat/completions",
         {{"messages", kUser}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}}},
        {"/v1/responses", {{"input", "Say hello."}, {"max_output_tokens", 12}, {"temperature", 0}}},
        {"/v1/responses", {{"input", "Say hello."}, {"max_output_tokens", 12}, {"temperature", 0}, {"stream", true}}},
        {"/v1/messages",
         {{"model", "m"}, {"max_tokens", 12}, {"messages", kUser}, {"temperature", 0}, {"stream", false}}},
        {"/v1/messages",
         {{"model", "m"}, {"max_tokens", 12}, {"messages", kUser}, {"temperature", 0}, {"stream", true}}},
        {"/completion", {{"prompt", "Once upon a time"}, {"n_predict", 8}, {"n_probs", 3}, {"temperature", 0}}},
        {"/completion",
         {{"prompt", "The answer is"},
          {"n_predict", 8},
          {"grammar", "root ::= (\"yes\" | \"no\") \" \" [a-z]+"},
          {"temperature", 0}}},
        {"/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}}},
        {"/v1/chat/completions/input_tokens", {{"messages", kUser}}},
        {"/v1/chat/completions", {{"messages", kUser}, {"response_format", {{"type", "no-such-format"}}}}},
        {"/apply-template", {{"messages", kUser}}},
    };
}

class ServeIdentity : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Serve, ServeIdentity, ::testing::Values("repacked", "nr"),
                         [](const auto & p) { return p.param; });

}  // namespace

// Deliverable 4: the same answers as stock llama-server, alone and four at a time.
TEST_P(ServeIdentity, SameAnswersAsStockLlamaServer) {
    std::vector<std::string> flags = {
        "-c", "2048", "-np", "4", "--chat-template-file", llama_template("Qwen-Qwen3-0.6B.jinja")};
    // "repacked": --repack on both. "nr": stock -nr against epq's default, which at an arena that
    // holds part of the experts keeps the file's layout and names stock -nr as its configuration.
    std::vector<std::string> epq_flags = flags;
    if (GetParam() == "nr") {
        flags.push_back("-nr");
    } else {
        flags.push_back("--repack");
        epq_flags.push_back("--repack");
    }
    // A third of the experts: reads on every request. Every slot generates at once, as in stock
    // (Serve.GatedRequestsEachGetStocksAnswerAlone covers the gate that would otherwise hold three back).
    epq_flags.insert(epq_flags.end(), {"--arena", "6M"});
    ServeProcess stock(model(), flags, Server::stock);
    ServeProcess paged(model(), epq_flags);

    const auto requests = identity_requests();
    std::vector<json> stock_alone;
    for (const auto & [path, body] : requests) {
        const json a = answer_of(post_raw(stock.port(), path, body));
        const json b = answer_of(post_raw(paged.port(), path, body));
        EXPECT_EQ(a, b) << path << " " << body.dump();
        stock_alone.push_back(a);
    }
    // The invalid response_format is refused by both.
    EXPECT_EQ(stock_alone[requests.size() - 2]["status"], 400);
    EXPECT_EQ(stock_alone[0]["status"], 200);

    // Four at a time: the slots decode in one batch. A sequence's answer may depend on what it
    // is batched with (llama.cpp's kernels split work by batch size), so epq must equal stock
    // under the same concurrency, request by request, where stock's is stable.
    const auto concurrent = [&](int port) {
        std::vector<std::future<json>> f;
        for (int i = 0; i < 4; ++i) {
            json body = {{"messages", {{{"role", "user"}, {"content", "Count to " + std::to_string(i + 3)}}}},
                         {"max_tokens", 16},
                         {"temperature", i % 2 ? 0.8 : 0.0},
                         {"seed", 100 + i}};
            f.push_back(std::async(std::launch::async,
                                   [port, body] { return answer_of(post_raw(port, "/v1/chat/completions", body)); }));
        }
        std::vector<json> out;
        for (auto & x : f) {
            out.push_back(x.get());
        }
        return out;
    };
    // (The answers' text and tokens: how much of a prompt came from the cache depends on what ran
    // before, which differs between the first and the second round.)
    const auto text_of = [](json a) {
        if (a.contains("body") && a["body"].contains("usage")) {
            a["body"].erase("usage");
        }
        return a;
    };
    const auto s4 = concurrent(stock.port());
    const auto p4 = concurrent(paged.port());
    const auto s4_again = concurrent(stock.port());
    int compared = 0;
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(s4[i]["status"], 200);
        if (text_of(s4[i]) == text_of(s4_again[i])) {
            EXPECT_EQ(text_of(p4[i]), text_of(s4[i])) << "request " << i;
            ++compared;
        } else {
            std::fprintf(stderr, "stock unstable on request %zu:\n%s\n%s\n", i, text_of(s4[i]).dump().c_str(),
                         text_of(s4_again[i]).dump().c_str());
        }
    }
    EXPECT_GE(compared, 2) << "stock's concurrent answers were unstable in most requests";

    // The pager did the expert work: the arena holds a third, so it read experts.
    httplib::Client c("127.0.0.1", paged.port());
    auto st = c.Get("/epq/stats");
    ASSERT_TRUE(st);
    const json j = json::parse(st->body);
    EXPECT_TRUE(j["paged"].get<bool>());
    EXPECT_GT(j["pager"]["misses"].get<uint64_t>(), 0u);
    EXPECT_GT(j["pager"]["tokens"].get<uint64_t>(), 0u);
    EXPECT_EQ(j["pager"]["repacked_matrices_per_expert"].get<uint64_t>() > 0, GetParam() == "repacked");
    EXPECT_EQ(paged.stop(), 0) << paged.log();
    const std::string named = GetParam() == "nr" ? "identical to stock llama.cpp with -nr"
                                                 : "identical to stock llama.cpp with its default flags";
    EXPECT_NE(paged.log().find(named), std::string::npos) << paged.log();
    EXPECT_EQ(stock.stop(), 0);
}

// Under a cap the arena holds the working experts of fewer streams than there are slots: epq
// serve lets that many requests generate at once and queues the rest in arrival order
// (sched/stream_gate.h). Each answer is then stock's answer to the request alone, for every API
// and streamed or not, and the counters show the queue.
TEST(Serve, GatedRequestsEachGetStocksAnswerAlone) {
    const std::vector<std::string> flags = {
        "-c", "2048", "-np", "4", "--chat-template-file", llama_template("Qwen-Qwen3-0.6B.jinja"), "-nr"};
    ServeProcess stock(model(), flags, Server::stock);
    std::vector<std::string> epq_flags = flags;
    epq_flags.insert(epq_flags.end(), {"--arena", "6M"});
    ServeProcess paged(model(), epq_flags);
    EXPECT_NE(paged.log().find("decode streams: 1 of 4 slots generate at once"), std::string::npos) << paged.log();

    const std::vector<std::pair<std::string, json>> bodies = {
        {"/v1/chat/completions",
         {{"messages", {{{"role", "user"}, {"content", "Count to 5"}}}}, {"max_tokens", 32}, {"temperature", 0}}},
        {"/v1/chat/completions",
         {{"messages", {{{"role", "user"}, {"content", "Count to 7"}}}},
          {"max_tokens", 32},
          {"temperature", 0.8},
          {"seed", 3},
          {"stream", true}}},
        {"/v1/responses", {{"input", "Say hello."}, {"max_output_tokens", 32}, {"temperature", 0}, {"stream", true}}},
        {"/completion", {{"prompt", "Once upon a time"}, {"n_predict", 32}, {"temperature", 0}}},
        {"/v1/messages",
         {{"model", "m"}, {"max_tokens", 32}, {"messages", kUser}, {"temperature", 0}, {"stream", true}}},
    };
    // Which slot answers, and how much of a prompt its cache held, depend on what ran before.
    const auto text_of = [](json a) {
        return without(std::move(a), {"usage", "id_slot", "tokens_cached", "tokens_evaluated"});
    };
    std::vector<json> alone;
    for (const auto & [path, body] : bodies) {
        alone.push_back(text_of(answer_of(post_raw(stock.port(), path, body))));
    }
    // While they run, llama-server's own /slots must never show more than one slot busy.
    std::atomic<bool> done{false};
    std::atomic<int> most_busy{0};
    std::thread poll([&] {
        httplib::Client pc("127.0.0.1", paged.port());
        while (!done) {
            const auto sl = pc.Get("/slots");
            const json slots = json::parse(sl && sl->status == 200 ? sl->body : "[]", nullptr, false);
            int busy = 0;
            for (const auto & slot : slots) {
                busy += slot.value("is_processing", false) ? 1 : 0;
            }
            most_busy = std::max(most_busy.load(), busy);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    });
    std::vector<std::future<json>> f;
    for (const auto & [path, body] : bodies) {
        const int port = paged.port();
        f.push_back(std::async(std::launch::async,
                               [port, path = path, body = body] { return answer_of(post_raw(port, path, body)); }));
    }
    for (size_t i = 0; i < bodies.size(); ++i) {
        const json a = text_of(f[i].get());
        EXPECT_EQ(a["status"], 200) << a.dump();
        EXPECT_EQ(a, alone[i]) << bodies[i].first << " " << bodies[i].second.dump();
    }
    done = true;
    poll.join();
    EXPECT_EQ(most_busy.load(), 1) << "slots busy at once";
    httplib::Client c("127.0.0.1", paged.port());
    const json j = json::parse(c.Get("/epq/stats")->body);
    const json & g = j["decode_streams"];
    EXPECT_EQ(g["capacity"], 1);
    EXPECT_TRUE(g["tuning"].is_null()) << "one stream: nothing to tune";
    EXPECT_GT(g["busy_seconds"].get<double>(), 0.0);
    EXPECT_EQ(g["admitted"], bodies.size());
    EXPECT_GE(g["waited"].get<int>(), 1) << "five requests sent at once, one place: some must have waited";
    EXPECT_EQ(g["generating"], 0);
    EXPECT_EQ(g["waiting"], 0);
    const auto m = c.Get("/epq/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("\nepq:requests_waited_total "), std::string::npos) << m->body;
    EXPECT_EQ(paged.stop(), 0) << paged.log();
    EXPECT_EQ(stock.stop(), 0);
}

// A disk so slow that decode steps mostly wait on reads (every read call sleeps 5 ms): the arena
// fits two streams' working sets, but the stream tuner (sched/stream_tuner.h), which starts at one,
// keeps one generating, and /epq/stats and /epq/metrics show why; every request gets its answer.
TEST(Serve, ReadBoundStepsKeepOneRequestGenerating) {
    ServeProcess s(std::vector<std::string>{"/usr/bin/env",
                                            "EPQ_IO_FAULT=slow",
                                            EPQ_FAULTS_BINARY,
                                            "serve",
                                            "-m",
                                            model(),
                                            "--host",
                                            "127.0.0.1",
                                            "--port",
                                            "0",
                                            "-t",
                                            "2",
                                            "-c",
                                            "2048",
                                            "-np",
                                            "4",
                                            "--arena",
                                            "10M",
                                            "--prefetch",
                                            "off"});
    ASSERT_NE(s.log().find("decode streams: up to 2 of 4 slots generate at once"), std::string::npos) << s.log();
    ASSERT_NE(s.log().find("from 1, one more while reads take under a quarter"), std::string::npos) << s.log();
    std::vector<std::future<Reply>> f;
    for (int i = 0; i < 4; ++i) {
        const json body = {{"prompt", "Story number " + std::to_string(i) + ":"},
                           {"n_predict", 96},
                           {"temperature", 0},
                           {"ignore_eos", true}};
        const int port = s.port();
        f.push_back(std::async(std::launch::async, [port, body] { return post_raw(port, "/completion", body); }));
    }
    for (auto & x : f) {
        const Reply r = x.get();
        EXPECT_EQ(r.status, 200) << r.body;
    }
    httplib::Client c("127.0.0.1", s.port());
    const json g = json::parse(c.Get("/epq/stats")->body)["decode_streams"];
    EXPECT_EQ(g["max_capacity"], 2);
    EXPECT_EQ(g["capacity"], 1) << g.dump();
    EXPECT_EQ(g["tuning"]["raised"], 0) << g.dump();
    const json pager = json::parse(c.Get("/epq/stats")->body)["pager"];
    EXPECT_GE(pager["decode_step_seconds"].get<double>(), 5.0) << pager.dump() << ": no whole window was measured";
    EXPECT_EQ(pager["decode_batch_max_tokens"], 2);
    // What the steps looked up, by the model's shape: each step of one or two tokens selects
    // top-k to 2 x top-k distinct experts in each MoE layer, and a 10 MiB arena misses some.
    const SynthShape shape = tiny("qwen3moe").shape;
    const uint64_t per_token = uint64_t{shape.n_layer - shape.n_dense_lead} * shape.n_expert_used;
    const uint64_t steps = pager["decode_steps"], step_tokens = pager["decode_step_tokens"];
    const uint64_t lookups = pager["decode_step_lookups"], misses = pager["decode_step_demand_misses"];
    EXPECT_GE(steps, 96u) << pager.dump() << ": one request alone takes 96 steps";
    EXPECT_LE(step_tokens, 2 * steps) << pager.dump();
    EXPECT_GE(lookups, steps * per_token) << pager.dump();
    EXPECT_LE(lookups, step_tokens * per_token) << pager.dump();
    EXPECT_GT(misses, 0u) << pager.dump();
    EXPECT_LT(misses, lookups) << pager.dump();
    EXPECT_GE(pager["decode_step_missed_expert_bytes"].get<uint64_t>(), misses) << pager.dump();
    EXPECT_LT(lookups, pager["expert_lookups"].get<uint64_t>()) << pager.dump() << ": prompts' lookups are not steps'";
    EXPECT_GT(g["tuning"]["last_read_wait_share"].get<double>(), 0.25) << g.dump();
    EXPECT_GE(g["waited"].get<int>(), 3) << g.dump() << ": one place, four requests sent at once";
    const auto m = c.Get("/epq/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("\nepq:decode_streams 1\n"), std::string::npos) << m->body;
    EXPECT_NE(m->body.find("\nepq:decode_streams_max 2\n"), std::string::npos) << m->body;
    EXPECT_EQ(s.stop(), 0) << s.log();
}

// What only epq adds: the view at /epq/, the counters, llama.cpp's UI at /, no warm-up reads.
TEST(Serve, PagerViewBesideLlamaCppsWebUi) {
    ServeProcess s(model(), {"-c", "1024", "-np", "2"});  // --arena auto
    httplib::Client c("127.0.0.1", s.port());
    // llama.cpp's warm-up (every expert of every layer) is off, and the server's start-up probe
    // (2 tokens decoded to learn whether the KV cache can drop a sequence's tail) reads nothing:
    // no expert byte is read before the first request.
    EXPECT_NE(s.log().find("warm-up is off"), std::string::npos) << s.log();
    auto st = c.Get("/epq/stats");
    ASSERT_TRUE(st);
    ASSERT_EQ(st->status, 200);
    json j = json::parse(st->body);
    EXPECT_EQ(j["pager"]["bytes_read"].get<uint64_t>(), 0u) << "read experts before any request";
    EXPECT_NE(j["arena_reasoning"].get<std::string>().find("prompt cache (--cache-ram)"), std::string::npos)
        << j["arena_reasoning"];

    const Reply r = post_raw(s.port(), "/v1/chat/completions", {{"messages", kUser}, {"max_tokens", 4}});
    ASSERT_EQ(r.status, 200) << r.body;
    j = json::parse(c.Get("/epq/stats")->body);
    EXPECT_GT(j["pager"]["misses"].get<uint64_t>(), 0u);
    const json & v = j["view"];
    EXPECT_EQ(v["cells"].size(), v["layers"].size());
    ASSERT_FALSE(v["cells"].empty());
    EXPECT_EQ(v["cells"][0].get<std::string>().size(), v["n_expert"].get<size_t>());
    EXPECT_GT(v["resident_experts"].get<uint64_t>(), 0u);

    auto m = c.Get("/epq/metrics");
    ASSERT_TRUE(m);
    for (const char * name :
         {"epq:arena_hits_total", "epq:bytes_read_total", "epq:tokens_total", "epq:read_wait_seconds_total"}) {
        EXPECT_NE(m->body.find(std::string("\n") + name + " "), std::string::npos) << name;
    }
    auto page = c.Get("/epq/");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_NE(page->body.find("<iframe id=\"chat\" src=\"../\""), std::string::npos);
    auto redirect = c.Get("/epq");
    ASSERT_TRUE(redirect);
    EXPECT_EQ(redirect->status, 302);
    // llama.cpp's web UI at /, gzip-compressed as llama-server embeds it (the headless-browser
    // test opens it). Sanitizer builds embed none (cmake/llama_cpp.cmake).
    c.set_decompress(false);
    if (EPQ_HAS_LLAMA_UI) {
        auto ui = c.Get("/", httplib::Headers{{"Accept-Encoding", "gzip"}});
        ASSERT_TRUE(ui);
        EXPECT_EQ(ui->status, 200);
        EXPECT_EQ(ui->get_header_value("Content-Encoding"), "gzip");
        ASSERT_GT(ui->body.size(), 1000u) << "llama.cpp's web UI is not served at /";
        EXPECT_EQ(static_cast<unsigned char>(ui->body[0]), 0x1f);
    }
    // llama-server's own routes are all there.
    for (const char * path : {"/health", "/props", "/slots", "/v1/models"}) {
        auto x = c.Get(path);
        ASSERT_TRUE(x) << path;
        EXPECT_EQ(x->status, 200) << path << ": " << x->body;
    }
    EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST(Serve, HelpShowsEpqsFlagsAndLlamaServers) {
    const auto r = run_epq({"serve", "--help"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string all = r.out + r.err;
    for (const char * flag : {"--arena", "--read-threads", "--jinja", "--chat-template-file", "--cache-ram", "-np"}) {
        EXPECT_NE(all.find(flag), std::string::npos) << flag;
    }
}

TEST(Serve, BadStartsFailWithOneClearReason) {
    auto r = run_epq({"serve", "-m", temp_dir() + "/missing.gguf", "--port", "0"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;
    r = run_epq({"serve", "-m", model(), "--arena"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("epq: error: --arena needs a value"), std::string::npos) << r.err;
    r = run_epq({"serve", "-m", model(), "--port", "0", "--arena", "1K"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("epq: error:"), std::string::npos) << r.err;
    r = run_epq({"serve", "-m", model(), "--no-such-flag"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("no-such-flag"), std::string::npos) << r.err;
    const std::string bad = temp_dir() + "/truncated.gguf";
    auto bytes = read_file(model());
    bytes.resize(bytes.size() / 3);
    write_file(bad, bytes);
    r = run_epq({"serve", "-m", bad, "--port", "0"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("epq: error:"), std::string::npos) << r.err;
}

// A model without routed experts is served as stock serves it, with a note.
TEST(Serve, DenseModelsAreServedAsStockDoes) {
    const std::string dense = temp_dir() + "/dense-llama.gguf";
    ArchFixtureOptions o;
    o.n_expert = 0;
    o.n_expert_used = 0;
    write_arch_fixture("llama", dense, o);
    ServeProcess s(dense, {"-c", "512", "-np", "1"});
    EXPECT_NE(s.log().find("nothing to page"), std::string::npos) << s.log();
    const Reply r = post_raw(s.port(), "/completion", {{"prompt", "Hi"}, {"n_predict", 3}});
    EXPECT_EQ(r.status, 200) << r.body;
    httplib::Client c("127.0.0.1", s.port());
    EXPECT_FALSE(json::parse(c.Get("/epq/stats")->body)["paged"].get<bool>());
    EXPECT_EQ(s.stop(), 0);
}

// Router mode (no -m): llama-server starts a child per model by re-executing the binary; with
// epq the child is `epq serve` with the same pager flags.
TEST(Serve, RouterModeStartsPagedChildren) {
    const std::string dir = temp_dir() + "/router-models";
    run_command({"mkdir", "-p", dir});
    run_command({"ln", "-sf", model(), dir + "/tiny.gguf"});
    ServeProcess s(std::vector<std::string>{EPQ_BINARY, "serve", "--models-dir", dir, "--host", "127.0.0.1", "--port",
                                            "0", "-t", "2", "-c", "1024", "-np", "1", "--arena", "6M"});
    const Reply r = post_raw(s.port(), "/v1/chat/completions",
                             {{"model", "tiny"}, {"messages", kUser}, {"max_tokens", 4}, {"temperature", 0}});
    EXPECT_EQ(r.status, 200) << r.body << "\n" << s.log();
    // The child it started is paged, with the router's pager flags.
    const std::string spawned = "spawning server instance with name=tiny on port ";
    const size_t at = s.log().find(spawned);
    ASSERT_NE(at, std::string::npos) << s.log();
    httplib::Client child("127.0.0.1", std::atoi(s.log().c_str() + at + spawned.size()));
    auto st = child.Get("/epq/stats");
    ASSERT_TRUE(st);
    const json j = json::parse(st->body);
    EXPECT_TRUE(j["paged"].get<bool>());
    EXPECT_EQ(j["pager"]["arena_bytes"], 6u << 20);
    EXPECT_EQ(s.stop(), 0);
}

// llama-server's --sleep-idle-seconds frees the model when idle and loads it again on the next
// request: the second load is as lazy as the first (no expert bytes through the mapping) and
// the answers stay the same.
TEST(Serve, SleepsAndWakesWithTheSameAnswers) {
    ServeProcess s(model(), {"-c", "1024", "-np", "1", "--sleep-idle-seconds", "1"});
    const json body = {{"prompt", "Once upon a time"}, {"n_predict", 8}, {"temperature", 0}, {"cache_prompt", false}};
    const Reply before = post_raw(s.port(), "/completion", body);
    ASSERT_EQ(before.status, 200) << before.body;
    for (int i = 0; i < 100 && s.log().find("entering sleeping state") == std::string::npos; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_NE(s.log().find("entering sleeping state"), std::string::npos) << s.log();
    const Reply after = post_raw(s.port(), "/completion", body);
    ASSERT_EQ(after.status, 200) << after.body;
    EXPECT_NE(s.log().find("exiting sleeping state"), std::string::npos);
    EXPECT_EQ(json::parse(before.body)["content"], json::parse(after.body)["content"]);
    EXPECT_EQ(s.stop(), 0) << s.log();
}

// Under a memory cgroup several times smaller than a default llama-server would hold, the server
// lowers its prompt cache, answers concurrent requests and stays under the cap (memcap.sh
// reports the cgroup's peak and any OOM kill).
TEST(Serve, UnderAMemoryCapAnswersEveryRequestWithoutOomKill) {
    const std::string memcap = std::string(EPQ_SOURCE_DIR) + "/scripts/memcap.sh";
    const auto probe = run_command({memcap, "64M", "--", "true"});
    if (probe.exit_code == 77) {
        GTEST_SKIP() << "no memory cgroup here: " << probe.err;
    }
    ServeProcess s(std::vector<std::string>{memcap, "384M", "--", EPQ_BINARY, "serve", "-m", model(), "--host",
                                            "127.0.0.1", "--port", "0", "-t", "2", "-c", "2048", "-np", "4"});
    EXPECT_NE(s.log().find("--cache-ram lowered from 8192"), std::string::npos) << s.log();
    std::vector<std::future<Reply>> f;
    for (int i = 0; i < 4; ++i) {
        f.push_back(std::async(std::launch::async, [&s, i] {
            return post_raw(s.port(), "/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "Story number " + std::to_string(i)}}}},
                             {"max_tokens", 24}});
        }));
    }
    for (auto & x : f) {
        const Reply r = x.get();
        EXPECT_EQ(r.status, 200) << r.body;
    }
    EXPECT_EQ(s.stop(), 0) << s.log();
    const std::string log = s.log();
    const size_t at = log.find("memcap: limit 384 MiB");
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_NE(log.find("OOM-killed: no", at), std::string::npos) << log.substr(at);
}

// A disk that fails every expert read from some point on: each request gets an error response,
// the log says why, and the server stays up (and stops cleanly).
TEST(Serve, ExpertReadErrorsFailTheRequestsNotTheServer) {
    ServeProcess s(std::vector<std::string>{"/usr/bin/env", "EPQ_IO_FAULT=eio,after=3,count=0", EPQ_FAULTS_BINARY,
                                            "serve", "-m", model(), "--host", "127.0.0.1", "--port", "0", "-t", "2",
                                            "-c", "1024", "-np", "1", "--arena", "6M"});
    const json body = {{"messages", kUser}, {"max_tokens", 8}, {"temperature", 0}};
    for (int i = 0; i < 2; ++i) {
        const Reply failed = post_raw(s.port(), "/v1/chat/completions", body);
        EXPECT_GE(failed.status, 400) << failed.body;
        EXPECT_NE(failed.body.find("error"), std::string::npos) << failed.body;
    }
    EXPECT_NE(s.log().find("epq: pager: "), std::string::npos) << s.log();
    EXPECT_TRUE(s.running());
    httplib::Client c("127.0.0.1", s.port());
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    EXPECT_EQ(s.stop(), 0) << s.log();
}
