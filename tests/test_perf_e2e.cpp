// End to end checks of the performance features: prediction never changes a logit and its
// accounting adds up; --trace records what epq simulate replays; epq bench produces every
// figure it promises. Counts and consistency only: no timing is asserted.
#include "test_util.h"

#include "bench/serve_bench.h"
#include "backend/router_predictor.h"
#include "bench/time_bound.h"
#include "gguf/gguf_file.h"
#include "gguf/expert_index.h"
#include "sim/cache_sim.h"
#include "sim/routing_stats.h"
#include "arena/trace.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <set>

using namespace epq;
using namespace epq::test;

namespace {

const std::string kText = std::string(EPQ_SOURCE_DIR) + "/data/text/tale-of-two-cities-ch1.txt";

nlohmann::json read_json(const std::string & path) {
    const auto bytes = read_file(path);
    return nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
}

std::string model64() {
    SynthConfig cfg = tiny("qwen3moe");
    cfg.shape.n_expert = 64;
    cfg.shape.n_ff_exp = 512;
    return synth_model("perf-qwen3moe-64", cfg);
}

}  // namespace

// The predictor ranks a layer's experts by that layer's router over a hidden state (ggml's dot
// product), as a scalar product in double read straight from the file ranks them: softmax
// gating (qwen3moe) and sigmoid gating plus a selection bias (deepseek2).
TEST(RouterPredictor, PicksTheTopExpertsOfTheRoutersOwnProduct) {
    for (const std::string arch : {"qwen3moe", "deepseek2"}) {
        const std::string model = synth_model("predictor-" + arch, make_preset("tiny-" + arch));
        const GgufFile file = GgufFile::open(model);
        const ExpertIndex idx = ExpertIndex::build(file);
        const RouterPredictor predictor(model, idx);
        ASSERT_TRUE(predictor.available()) << predictor.why();
        std::ifstream in(model, std::ios::binary);
        auto floats = [&](const TensorInfo & t) {
            EXPECT_EQ(t.type, GGML_TYPE_F32) << t.name;
            std::vector<float> v(static_cast<size_t>(t.nbytes / sizeof(float)));
            in.seekg(static_cast<std::streamoff>(t.file_offset));
            in.read(reinterpret_cast<char *>(v.data()), static_cast<std::streamsize>(t.nbytes));
            return v;
        };
        std::mt19937 rng(7);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        int compared = 0, samples = 0;
        for (const auto & layer : idx.layers) {
            const std::string prefix = "blk." + std::to_string(layer.layer) + ".";
            const TensorInfo * w = file.find_tensor(prefix + "ffn_gate_inp.weight");
            ASSERT_NE(w, nullptr);
            const std::vector<float> weight = floats(*w);
            const TensorInfo * b = file.find_tensor(prefix + "exp_probs_b.bias");
            const std::vector<float> bias = b ? floats(*b) : std::vector<float>{};
            const int64_t n_embd = w->ne[0];
            for (int sample = 0; sample < 20; ++sample, ++samples) {
                std::vector<float> x(static_cast<size_t>(n_embd));
                for (float & v : x) {
                    v = normal(rng);
                }
                std::vector<double> score(idx.n_expert);
                for (uint32_t e = 0; e < idx.n_expert; ++e) {
                    double s = 0;
                    for (int64_t i = 0; i < n_embd; ++i) {
                        s += static_cast<double>(weight[static_cast<size_t>(e * n_embd + i)]) *
                             x[static_cast<size_t>(i)];
                    }
                    score[e] = bias.empty() ? s : 1.0 / (1.0 + std::exp(-s)) + bias[e];
                }
                std::vector<uint32_t> order(idx.n_expert);
                std::iota(order.begin(), order.end(), 0u);
                std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t c) { return score[a] > score[c]; });
                const size_t k = idx.n_expert_used;
                if (score[order[k - 1]] - score[order[k]] < 1e-4) {
                    continue;  // a near tie at the cut: float and double may rank it either way
                }
                std::vector<uint32_t> got = predictor.predict(layer.layer, x.data(), n_embd);
                std::vector<uint32_t> want(order.begin(), order.begin() + static_cast<long>(k));
                std::sort(got.begin(), got.end());
                std::sort(want.begin(), want.end());
                EXPECT_EQ(got, want) << arch << " layer " << layer.layer << " sample " << sample;
                ++compared;
            }
        }
        EXPECT_GE(compared, samples * 9 / 10) << arch << ": too many near ties to compare";
        EXPECT_TRUE(predictor.predict(idx.layers.front().layer, std::vector<float>(3).data(), 3).empty())
            << "a hidden state of the wrong width is not ranked";
    }
}

TEST(Prefetch, PredictionChangesNoLogitAndItsAccountingAddsUp) {
    const std::string model = model64();
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string d = temp_dir();
    const std::vector<std::string> common = {"run", "-m", model, "--replay", kText, "--replay-prompt",
                                             "24",  "-n", "48",  "-t",       "2"};
    auto args = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = common;
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    const CommandResult stock =
        run_epq(args({"--no-pager", "-nr", "--logits-out", d + "/pf-stock.logits"}));  // the partial arena's layout
    ASSERT_EQ(stock.exit_code, 0) << stock.err;
    const CommandResult paged = run_epq(args({"--arena", std::to_string(4 * idx.min_arena_bytes), "--prefetch", "on",
                                              "--logits-out", d + "/pf-paged.logits", "--stats-json", d + "/pf.json"}));
    ASSERT_EQ(paged.exit_code, 0) << paged.err;
    EXPECT_EQ(paged.out, stock.out);
    EXPECT_TRUE(read_file(d + "/pf-paged.logits") == read_file(d + "/pf-stock.logits"));

    const auto j = read_json(d + "/pf.json");
    const auto & p = j["prefetch"];
    const uint64_t guesses = p["guesses"], guessed = p["guessed"], correct = p["correct"];
    // 47 decode steps; every MoE layer but the first is guessed from the one before it.
    EXPECT_EQ(guesses, 47u * (idx.layers.size() - 1));
    EXPECT_EQ(guessed, guesses * idx.n_expert_used);
    EXPECT_LE(correct, guessed);
    EXPECT_GT(p["speculative_reads"].get<uint64_t>(), 0u);
    EXPECT_EQ(p["speculative_bytes"].get<uint64_t>(),
              p["useful_bytes"].get<uint64_t>() + p["wasted_bytes"].get<uint64_t>());
    // Per-layer figures sum to the totals, and the first layer is never guessed.
    uint64_t sum_guesses = 0, sum_correct = 0, sum_wasted = 0;
    for (const auto & l : p["per_layer"]) {
        sum_guesses += l["guesses"].get<uint64_t>();
        sum_correct += l["correct"].get<uint64_t>();
        sum_wasted += l["wasted_bytes"].get<uint64_t>();
    }
    EXPECT_EQ(sum_guesses, guesses);
    EXPECT_EQ(sum_correct, correct);
    EXPECT_EQ(sum_wasted, p["wasted_bytes"].get<uint64_t>());
    EXPECT_EQ(p["per_layer"][0]["guesses"], 0);
    // Every speculative read the pager made was settled (the last layer guesses nothing), or
    // was read ahead for the prompt: 24 tokens x top-4 over 64 experts, so the next layer's
    // router applied to each row chooses what is read while a layer computes; much of it is used.
    // (How many reads go ahead depends on which slots are free when a layer starts, so on the
    // reads' timing: a bound with room, not an exact share.)
    const uint64_t ahead = j["readahead_reads"].get<uint64_t>(), used = j["readahead_used"].get<uint64_t>();
    EXPECT_GT(ahead, 0u);
    EXPECT_GE(4 * used, ahead) << used << " of " << ahead << " reads ahead were used";
    EXPECT_LE(used, ahead);
    EXPECT_EQ(j["speculative_reads"].get<uint64_t>(), p["speculative_reads"].get<uint64_t>() + ahead);
    EXPECT_EQ(j["demand_misses"].get<uint64_t>() + j["speculative_reads"].get<uint64_t>(), j["misses"].get<uint64_t>());

    // Each phase's time is split over the pager's clocks: every part present and non-negative,
    // the phase's wall time the one the run reports, and graphs counted.
    for (const char * phase : {"prefill_time", "decode_time"}) {
        const auto & t = j[phase];
        ASSERT_TRUE(t.is_object()) << phase;
        for (const char * part : {"read_wait_seconds", "expert_compute_seconds", "pager_own_seconds",
                                  "outside_pager_seconds", "total_seconds"}) {
            EXPECT_GE(t[part].get<double>(), 0.0) << phase << "." << part;
        }
        for (const char * part : {"gather_seconds", "scatter_seconds", "arena_seconds", "predict_seconds"}) {
            EXPECT_GE(t["pager_own"][part].get<double>(), 0.0) << phase << ".pager_own." << part;
        }
        EXPECT_GT(t["expert_compute_seconds"].get<double>(), 0.0) << phase;
        EXPECT_GT(t["pager_graph_computes"].get<uint64_t>(), 0u) << phase;
        // Every graph ggml computed is counted, llama.cpp's (attention, router...) besides the pager's.
        EXPECT_GT(t["ggml_graph_computes"].get<uint64_t>(), t["pager_graph_computes"].get<uint64_t>()) << phase;
    }
    EXPECT_EQ(j["prefill_time"]["total_seconds"], j["prefill_seconds"]);
    EXPECT_EQ(j["decode_time"]["total_seconds"], j["decode_seconds"]);
    // The read threads' own CPU time is measured (it competes with the matmuls for the cores).
    EXPECT_GT(j["read_cpu_seconds"].get<double>(), 0.0);
    EXPECT_LE(j["read_cpu_seconds"].get<double>(), j["read_seconds"].get<double>() * 4 + 0.01);  // 4 read threads
    EXPECT_GT(j["decode_time"]["pager_own"]["predict_seconds"].get<double>(), 0.0) << "prefetch on: guesses are timed";

    // An arena that holds every expert misses none once read: no guess is made, even when asked.
    const CommandResult all = run_epq(args({"--prefetch", "on", "--stats-json", d + "/pf-all.json"}));
    ASSERT_EQ(all.exit_code, 0) << all.err;
    const auto ja = read_json(d + "/pf-all.json");
    EXPECT_EQ(ja["prefetch"]["guesses"].get<uint64_t>(), 0u);
    EXPECT_NE(ja["prefetch"]["state"].get<std::string>().find("holds every expert"), std::string::npos)
        << ja["prefetch"]["state"];
}

TEST(Trace, RecordsEveryTokenAndLayerAndSimulateReplaysIt) {
    const std::string model = model64();
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string d = temp_dir(), trace = d + "/run.trace";
    const CommandResult r =
        run_epq({"run", "-m", model, "--replay", kText, "--replay-prompt", "20", "-n", "12", "-t", "2", "--arena",
                 std::to_string(3 * idx.min_arena_bytes), "--trace", trace, "--stats-json", d + "/trace.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Trace t = read_trace(trace);
    EXPECT_EQ(t.header.arch, idx.arch);
    EXPECT_EQ(t.header.n_expert, idx.n_expert);
    EXPECT_EQ(t.header.layers.size(), idx.layers.size());
    std::set<uint64_t> steps;
    uint64_t first_layer_prompt_tokens = 0;
    std::set<std::tuple<uint64_t, uint32_t, uint32_t>> distinct;  // (step, layer, expert)
    for (const auto & rec : t.records) {
        steps.insert(rec.step);
        first_layer_prompt_tokens += rec.step == 1 && rec.layer == t.header.layers.front().first;
        for (uint32_t e : rec.experts) {
            distinct.insert({rec.step, rec.layer, e});
        }
    }
    // The prompt is step 1; each of the 11 decoded tokens is a step of its own.
    EXPECT_EQ(steps.size(), 12u);
    EXPECT_EQ(first_layer_prompt_tokens, 20u);
    // Expert-major: the run read no more experts than the trace's distinct uses per step.
    const auto j = read_json(d + "/trace.json");
    EXPECT_LE(j["demand_misses"].get<uint64_t>(), distinct.size());

    const CommandResult sim =
        run_epq({"simulate", trace, "--arena",
                 std::to_string(3 * idx.min_arena_bytes) + "," + std::to_string(8 * idx.min_arena_bytes)});
    ASSERT_EQ(sim.exit_code, 0) << sim.err;
    EXPECT_NE(sim.out.find("belady"), std::string::npos) << sim.out;
    EXPECT_NE(sim.out.find("reuse by the next token"), std::string::npos) << sim.out;
    EXPECT_EQ(run_epq({"simulate", d + "/missing.trace"}).exit_code, 1);
    // Shares of the expert bytes; the defaults start at the minimum arena.
    const CommandResult shares = run_epq({"simulate", trace, "--arena", "50%"});
    ASSERT_EQ(shares.exit_code, 0) << shares.err;
    EXPECT_NE(shares.out.find("50.0%"), std::string::npos) << shares.out;
    EXPECT_EQ(run_epq({"simulate", trace, "--arena", "150%"}).exit_code, 1);

    // With prediction on, the trace holds the run's guesses and the simulator replays them: its
    // speculative reads are the run's within a few (the run's ones race the compute), and the
    // guessed reads used show as hits.
    const std::string guessed = d + "/guessed.trace";
    const CommandResult g = run_epq({"run", "-m", model, "--replay", kText, "--replay-prompt", "20", "-n", "24", "-t",
                                     "2", "--arena", std::to_string(3 * idx.min_arena_bytes), "--prefetch", "on",
                                     "--trace", guessed, "--stats-json", d + "/guessed.json"});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    const Trace gt = read_trace(guessed);
    // A guess for every MoE layer after the first, in each of the 23 decode steps.
    EXPECT_EQ(gt.guesses.size(), 23u * (idx.layers.size() - 1));
    const auto gj = read_json(d + "/guessed.json");
    const SimResult pf = simulate(gt, 3 * idx.min_arena_bytes, SimOptions{"lfu", true});
    const double run_spec = gj["speculative_reads"].get<double>();
    EXPECT_GT(run_spec, 0.0);
    EXPECT_NEAR(static_cast<double>(pf.speculative_reads), run_spec, 0.25 * run_spec);
    EXPECT_GT(pf.speculative_used, 0u);
    EXPECT_GT(pf.hit_rate, simulate(gt, 3 * idx.min_arena_bytes, "lfu").hit_rate);
    const CommandResult gsim = run_epq({"simulate", guessed, "--arena", std::to_string(3 * idx.min_arena_bytes)});
    ASSERT_EQ(gsim.exit_code, 0) << gsim.err;
    EXPECT_NE(gsim.out.find(std::string(kDefaultPolicy) + "+prefetch"), std::string::npos) << gsim.out;
}

// epq bench --routing's child: the pager computes the experts a recorded trace names instead of
// the router's, and the run's own trace shows exactly those.
TEST(Trace, ABenchRunFollowsARecordedTracesExpertChoices) {
    const std::string model = model64();
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    const std::string d = temp_dir(), recorded = d + "/recorded.trace", followed = d + "/followed.trace";
    const std::string arena = std::to_string(3 * idx.min_arena_bytes);
    const CommandResult a = run_epq({"run", "-m", model, "--replay", kText, "--replay-prompt", "20", "-n", "12", "-t",
                                     "2", "--arena", arena, "--trace", recorded});
    ASSERT_EQ(a.exit_code, 0) << a.err;
    // Another prompt, so the router alone would choose other experts.
    const CommandResult b =
        run_epq({"bench-run", "-m", model, "-p", "Completely different words about ships and the sea", "-n", "16", "-t",
                 "2", "--arena", arena, "--prefetch", "off", "--routing", recorded, "--trace", followed});
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_NE(b.err.find("TIMING ONLY"), std::string::npos) << b.err;

    // Per step: token -> layer -> experts.
    using Steps = std::map<uint64_t, std::map<uint64_t, std::map<uint32_t, std::vector<uint32_t>>>>;
    auto steps_of = [](const Trace & t) {
        Steps s;
        for (const auto & r : t.records) {
            s[r.step][r.token][r.layer] = r.experts;
        }
        return s;
    };
    auto decode_of = [](const Steps & s) {
        std::vector<std::map<uint32_t, std::vector<uint32_t>>> out;
        for (const auto & [step, tokens] : s) {
            if (tokens.size() == 1) {
                out.push_back(tokens.begin()->second);
            }
        }
        return out;
    };
    const auto want = decode_of(steps_of(read_trace(recorded)));
    const auto got = decode_of(steps_of(read_trace(followed)));
    ASSERT_EQ(want.size(), 11u);
    ASSERT_EQ(got.size(), 15u);
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], want[i % want.size()]) << "decode step " << i;
    }
    // The prompt's tokens at the first layer follow the recorded prompt's, repeated.
    const Steps rec = steps_of(read_trace(recorded)), fol = steps_of(read_trace(followed));
    const auto & rec_prompt = rec.begin()->second;
    const auto & fol_prompt = fol.begin()->second;
    ASSERT_GT(fol_prompt.size(), 1u);
    const uint32_t layer0 = idx.layers.front().layer;
    size_t i = 0;
    for (const auto & [token, layers] : fol_prompt) {
        auto it = rec_prompt.begin();
        std::advance(it, static_cast<long>(i++ % rec_prompt.size()));
        EXPECT_EQ(layers.at(layer0), it->second.at(layer0)) << "prompt token " << token;
    }

    // Never a flag of epq run; a trace of another shape is refused.
    const CommandResult run = run_epq({"run", "-m", model, "-p", "hi", "-n", "2", "--routing", recorded});
    EXPECT_NE(run.exit_code, 0);
    EXPECT_NE(run.err.find("--routing"), std::string::npos) << run.err;
    const CommandResult shape = run_epq({"bench-run", "-m", model, "-p", "hi", "-n", "2", "--routing",
                                         std::string(EPQ_SOURCE_DIR) + "/data/traces/qwen3-30b-a3b.route.csv"});
    EXPECT_EQ(shape.exit_code, 1);
    EXPECT_NE(shape.err.find("use a trace of a model of this shape"), std::string::npos) << shape.err;
}

TEST(SynthRouting, FlatProfileReusesExpertsOnlyByChance) {
    // The same text through a model synthesized with each routing profile: the realistic one
    // reuses a good share of the previous token's experts, the flat one about what independent
    // uniform picks would (top-k / n_expert = 4 / 64). Measured: 16.4% and 7.1%.
    const std::string d = temp_dir();
    auto reuse = [&](RoutingProfile profile, const std::string & name) {
        SynthConfig cfg = tiny("qwen3moe");
        cfg.shape.n_expert = 64;
        cfg.shape.n_layer = 8;  // context builds up over layers; 4 show little of it
        cfg.routing = profile;
        const std::string model = synth_model(name, cfg);
        const std::string trace = d + "/" + name + ".trace";
        const CommandResult r = run_epq(
            {"run", "-m", model, "--replay", kText, "--replay-prompt", "8", "-n", "96", "-t", "2", "--trace", trace});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return routing_stats(read_trace(trace), {0.25}).reuse;
    };
    const double realistic = reuse(RoutingProfile::realistic, "routing-realistic");
    const double flat = reuse(RoutingProfile::flat, "routing-flat");
    const double chance = 4.0 / 64.0;
    EXPECT_GT(realistic, 2 * chance) << "flat " << flat;
    EXPECT_LT(flat, 1.5 * chance) << "realistic " << realistic;
}

TEST(Replay, BadUseIsAClearError) {
    const std::string model = model64();
    const CommandResult both = run_epq({"run", "-m", model, "--replay", kText, "-p", "hello"});
    EXPECT_NE(both.exit_code, 0);
    const std::string tiny_text = temp_dir() + "/short.txt";
    write_file(tiny_text, {'H', 'i', '.'});
    const CommandResult short_text = run_epq({"run", "-m", model, "--replay", tiny_text, "--replay-prompt", "64"});
    EXPECT_EQ(short_text.exit_code, 1);
    EXPECT_NE(short_text.err.find("--replay-prompt"), std::string::npos) << short_text.err;
    const CommandResult stock_trace = run_epq({"run", "-m", model, "-p", "hi", "--no-pager", "--trace", "x"});
    EXPECT_EQ(stock_trace.exit_code, 1);
    const CommandResult belady = run_epq({"run", "-m", model, "-p", "hi", "--policy", "belady"});
    EXPECT_EQ(belady.exit_code, 1);
    EXPECT_NE(belady.err.find("simulate"), std::string::npos) << belady.err;
}

TEST(Bench, ReportsEveryFigureAsJsonAndAPlot) {
    const std::string model = model64();
    const std::string d = temp_dir();
    const CommandResult r = run_epq({"bench",
                                     "-m",
                                     model,
                                     "--memcap",
                                     "none",
                                     "--runs",
                                     "1",
                                     "-n",
                                     "8",
                                     "--stock-tokens",
                                     "4",
                                     "--replay-prompt",
                                     "16",
                                     "-t",
                                     "2",
                                     "--read-seconds",
                                     "0.5",
                                     "--json",
                                     d + "/bench.json",
                                     "--plot",
                                     d + "/bench.png"});
    const bool have_gnuplot = run_command({"/bin/sh", "-c", "command -v gnuplot"}).exit_code == 0;
    ASSERT_EQ(r.exit_code, have_gnuplot ? 0 : 1) << r.err;
    EXPECT_NE(r.out.find("roofline"), std::string::npos) << r.out;
    const auto j = read_json(d + "/bench.json");
    EXPECT_GT(j["read_floor"]["bytes_per_second"].get<double>(), 0.0);
    EXPECT_GT(j["compute_floor_seconds_per_token"].get<double>(), 0.0);
    ASSERT_EQ(j["caps"].size(), 1u);
    const auto & c = j["caps"][0];
    EXPECT_GT(c["epq_decode_tps"].get<double>(), 0.0);
    EXPECT_GT(c["stock_decode_tps"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(c["ratio"].get<double>(), c["epq_decode_tps"].get<double>() / c["stock_decode_tps"].get<double>());
    EXPECT_GT(c["roofline_tps"].get<double>(), 0.0);
    // Prefill's roofline: uncapped with every expert preloaded, it is that run's own compute.
    EXPECT_GT(c["prefill_roofline_tps"].get<double>(), 0.0);
    EXPECT_GT(c["prefill_compute_seconds"].get<double>(), 0.0);
    EXPECT_NE(r.out.find("prefill of"), std::string::npos) << r.out;
    // Each phase names its bound, one of the four, with the parts behind it.
    const std::set<std::string> bounds = {"compute", "reads", "repack", "scheduling"};
    EXPECT_EQ(bounds.count(c["decode_bound"]["name"].get<std::string>()), 1u) << c["decode_bound"];
    EXPECT_EQ(bounds.count(c["prefill_bound"]["name"].get<std::string>()), 1u) << c["prefill_bound"];
    EXPECT_GT(c["decode_bound"]["seconds_per_token"].get<double>(), 0.0);
    EXPECT_NE(r.out.find("decode bound by"), std::string::npos) << r.out;
    // Uncapped with every expert preloaded, the arena holds them all: stock's default layout.
    EXPECT_TRUE(c["epq_weights_repacked"].get<bool>());
    EXPECT_EQ(c["epq_runs"].size(), 1u);
    EXPECT_EQ(c["stock_runs"].size(), 1u);
    EXPECT_EQ(c["epq_runs"][0]["generated_tokens"], 8);
    EXPECT_EQ(c["stock_runs"][0]["generated_tokens"], 4);
    // The epq run's decode routing, beside the published figures for Qwen3-30B-A3B (qwen3moe).
    const auto & rt = j["routing"];
    EXPECT_EQ(rt["decode_tokens"], 7) << "8 generated tokens: 7 decode steps after the prompt's";
    EXPECT_EQ(rt["published_model"], "Qwen3-30B-A3B");
    ASSERT_EQ(rt["shares"].size(), 4u);
    for (const auto & sh : rt["shares"]) {
        EXPECT_LE(sh["lru"].get<double>(), sh["belady"].get<double>()) << sh.dump();  // the optimum is optimal
    }
    EXPECT_NE(r.out.find("reuse by the next token"), std::string::npos) << r.out;
    if (have_gnuplot) {
        const auto png = read_file(d + "/bench.png");
        ASSERT_GT(png.size(), 8u);
        EXPECT_EQ(png[1], 'P');
        EXPECT_EQ(png[2], 'N');
        EXPECT_EQ(png[3], 'G');
    }
}

TEST(Bench, PercentilesAndMetricsParsing) {
    EXPECT_EQ(percentile({}, 50), 0.0);
    EXPECT_EQ(percentile({3.0}, 95), 3.0);
    EXPECT_EQ(percentile({4.0, 1.0, 3.0, 2.0}, 50), 2.0);  // nearest rank: the 2nd of 4
    EXPECT_EQ(percentile({4.0, 1.0, 3.0, 2.0}, 95), 4.0);
    const auto m = parse_metrics_text("# HELP a x\n# TYPE a counter\na 12.5\nb{l=\"1\"} 3\nc:d 7\nbad x\n");
    ASSERT_EQ(m.size(), 2u);
    EXPECT_EQ(m[0], std::make_pair(std::string("a"), 12.5));
    EXPECT_EQ(m[1], std::make_pair(std::string("c:d"), 7.0));
}

// epq bench --streams: real servers (paged, stock, preloaded) at 1 and 2 streams; every figure
// is there and adds up. No timing is asserted.
TEST(Bench, StreamsReportEveryConcurrencyAgainstStock) {
    const std::string model = model64();
    const std::string d = temp_dir();
    const CommandResult r = run_epq({"bench",
                                     "-m",
                                     model,
                                     "--memcap",
                                     "none",
                                     "--streams",
                                     "1,2",
                                     "--runs",
                                     "2",
                                     "-n",
                                     "8",
                                     "--stock-tokens",
                                     "8",  // fewer can end the first stream before every stream decodes
                                     "--replay-prompt",
                                     "16",
                                     "-c",
                                     "256",
                                     "-t",
                                     "2",
                                     "--read-seconds",
                                     "0.5",
                                     "--json",
                                     d + "/streams.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("epq bench --streams"), std::string::npos) << r.out;
    const auto j = read_json(d + "/streams.json");
    ASSERT_EQ(j["rows"].size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const auto & row = j["rows"][i];
        const int n = static_cast<int>(i) + 1;
        EXPECT_EQ(row["streams"], n);
        for (const std::string side : {"epq", "stock", "floor"}) {
            ASSERT_FALSE(row[side].contains("error")) << side << ": " << row[side].dump();
            EXPECT_EQ(row[side]["ttft_seconds"].size(), static_cast<size_t>(2 * n)) << side << ": every stream, 2 runs";
            ASSERT_EQ(row[side + "_runs"].size(), 2u) << side;
            for (const auto & run : row[side + "_runs"]) {
                ASSERT_FALSE(run.contains("error")) << side << ": " << run.dump();
                EXPECT_EQ(run["ttft_seconds"].size(), static_cast<size_t>(n)) << side;
                EXPECT_GE(run["steps"].get<double>(), 1.0) << side;
                // Every step of the window decodes a token of every stream (one may have ended a step
                // early); the tokens (/slots) and the steps (/metrics) are read one request apart,
                // so a step may fall between them.
                const double steps = run["steps"].get<double>();
                const double per_step = run["decode_tps"].get<double>() * run["step_seconds"].get<double>();
                EXPECT_GE(per_step, std::max(1.0, n - 1.0) * steps / (steps + 1) - 1e-6) << side;
                EXPECT_LE(per_step, n * (steps + 1) / steps + 1e-6) << side;
            }
        }
        EXPECT_EQ(row["floor"]["missed_expert_bytes_per_step"].get<double>(), 0.0) << "preloaded: nothing to read";
        EXPECT_EQ(row["compute_source"], "measured: the same server with every expert preloaded, uncapped");
        EXPECT_GT(row["roofline_tps"].get<double>(), 0.0);
    }
}

// Where requests queue (one generates at a time here), a row reads the pager's decode steps:
// one token each, their count, and their hit rate and reads (the floor's server, every expert
// preloaded, hits them all).
TEST(Bench, QueuedStreamsReadThePagersDecodeSteps) {
    const std::string d = temp_dir();
    const CommandResult r = run_epq({"bench",
                                     "-m",
                                     model64(),
                                     "--memcap",
                                     "none",
                                     "--streams",
                                     "2",
                                     "--decode-streams",
                                     "1",
                                     "--runs",
                                     "1",
                                     "-n",
                                     "8",
                                     "--no-stock",
                                     "--replay-prompt",
                                     "16",
                                     "-c",
                                     "256",
                                     "-t",
                                     "2",
                                     "--read-seconds",
                                     "0.5",
                                     "--json",
                                     d + "/queued.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = read_json(d + "/queued.json");
    ASSERT_EQ(j["rows"].size(), 1u);
    const auto & e = j["rows"][0]["epq"];
    ASSERT_FALSE(e.contains("error")) << e.dump();
    EXPECT_EQ(e["generating"], 1);
    EXPECT_DOUBLE_EQ(e["tokens_per_step"].get<double>(), 1.0) << e.dump();
    // From the first token to the last stream's end: the first stream's 7 steps after its first
    // token, and the second's, less the last step (counted when a next batch starts).
    EXPECT_GE(e["steps"].get<double>(), 7.0) << e.dump();
    EXPECT_LE(e["steps"].get<double>(), 14.0) << e.dump();
    EXPECT_DOUBLE_EQ(e["decode_tps"].get<double>(), e["decode_step_tps"].get<double>());
    EXPECT_GT(e["hit_rate"].get<double>(), 0.0) << e.dump();
    EXPECT_LE(e["hit_rate"].get<double>(), 1.0) << e.dump();
    if (e["hit_rate"].get<double>() < 1.0) {
        EXPECT_GT(e["missed_expert_bytes_per_step"].get<double>(), 0.0) << e.dump();
    }
    const auto & f = j["rows"][0]["floor"];
    ASSERT_FALSE(f.contains("error")) << f.dump();
    EXPECT_DOUBLE_EQ(f["tokens_per_step"].get<double>(), 1.0) << f.dump();
    EXPECT_DOUBLE_EQ(f["hit_rate"].get<double>(), 1.0) << f.dump();
    EXPECT_EQ(f["missed_expert_bytes_per_step"].get<double>(), 0.0) << f.dump();
}

// The bound a benchmark row names, on figures worked out by hand.
TEST(TimeBound, NamesTheLargestPartOfATokensTime) {
    // 90 of 100 ms computing with every expert resident: compute.
    TimeBound b = time_bound({0.100, 0.090, 0.005, 0.0, 0.004});
    EXPECT_EQ(b.name, "compute");
    EXPECT_DOUBLE_EQ(b.seconds, 0.090);
    // 200 ms blocked on reads, 10 of them repacking: reads, 190 ms.
    b = time_bound({0.300, 0.080, 0.200, 0.010, 0.150});
    EXPECT_EQ(b.name, "reads");
    EXPECT_NEAR(b.seconds, 0.190, 1e-12);
    EXPECT_NE(b.detail.find("the disk's floor: 150.0 ms"), std::string::npos) << b.detail;
    // Waiting 120 ms of which repacking took 100: repack.
    b = time_bound({0.200, 0.050, 0.120, 0.100, 0.010});
    EXPECT_EQ(b.name, "repack");
    // 230 of 300 ms neither computing nor waiting: scheduling.
    b = time_bound({0.300, 0.050, 0.020, 0.0, 0.010});
    EXPECT_EQ(b.name, "scheduling");
    EXPECT_NEAR(b.seconds, 0.230, 1e-12);
    // Repack the wait did not cover came out of the compute threads: no negative part.
    b = time_bound({0.100, 0.080, 0.010, 0.050, 0.005});
    EXPECT_EQ(b.name, "compute");
    EXPECT_NE(b.detail.find("scheduling 0.0"), std::string::npos) << b.detail;
}
