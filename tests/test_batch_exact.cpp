// Multi-sequence batches, as `epq serve` builds them, give the same logits on the pager as on
// stock llama.cpp, byte for byte: several slots' decode tokens and prompt chunks in one
// llama_decode, over one unified KV cache. Over HTTP the composition of a batch depends on
// when requests arrive, and where each request's cells land in the shared cache depends on
// what earlier requests left there; here both are scripted, so paged and stock compute the
// very same batches over the very same cache layout.
#include "test_util.h"

#include "engine/llama_log.h"
#include "engine/llama_session.h"
#include "engine/paged_model.h"
#include "gguf/expert_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

using namespace epq;
using namespace epq::test;

namespace {

// One step of a script: which sequences join with a prompt chunk of how many tokens, and which
// decode their next token (its greedy choice at its previous row).
struct Step {
    std::vector<std::pair<int, int>> prompt;  // (sequence, tokens of its prompt to add)
    std::vector<int> decode;                  // sequences that decode one token
};

struct SeqState {
    std::vector<llama_token> prompt;
    size_t next_prompt = 0;
    llama_pos pos = 0;
    llama_token pending = -1;
};

// The logits rows of every step, in script order.
using Rows = std::vector<std::vector<float>>;

Rows run_script(LlamaSession & s, const std::vector<std::vector<llama_token>> & prompts,
                const std::vector<Step> & script, bool fresh = true) {
    if (fresh) {
        llama_memory_clear(llama_get_memory(s.ctx()), true);
    }
    std::vector<SeqState> seqs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        seqs[i].prompt = prompts[i];
    }
    Rows rows;
    for (const Step & st : script) {
        llama_batch batch = llama_batch_init(512, 0, 1);
        std::vector<std::pair<int, int>> out;  // (sequence, batch row)
        auto add = [&](int seq, llama_token t, bool logits) {
            const int i = batch.n_tokens++;
            batch.token[i] = t;
            batch.pos[i] = seqs[seq].pos++;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = seq;
            batch.logits[i] = logits;
            if (logits) {
                out.emplace_back(seq, i);
            }
        };
        for (int seq : st.decode) {
            add(seq, seqs[seq].pending, true);
        }
        for (auto [seq, n] : st.prompt) {
            SeqState & q = seqs[seq];
            if (!fresh && q.next_prompt == 0) {
                llama_memory_seq_rm(llama_get_memory(s.ctx()), seq, -1, -1);
            }
            for (int k = 0; k < n; ++k) {
                add(seq, q.prompt[q.next_prompt], q.next_prompt + 1 == q.prompt.size());
                ++q.next_prompt;
            }
        }
        EXPECT_EQ(llama_decode(s.ctx(), batch), 0);
        llama_batch_free(batch);
        const int n_vocab = s.n_vocab();
        for (auto [seq, row] : out) {
            const float * l = llama_get_logits_ith(s.ctx(), row);
            rows.emplace_back(l, l + n_vocab);
            // Greedy: while the two sessions agree they feed the same tokens.
            seqs[seq].pending = static_cast<llama_token>(std::max_element(l, l + n_vocab) - l);
        }
    }
    return rows;
}

std::vector<Step> staggered() {
    // seq 0 alone, then 1 joins while 0 decodes, then 2 and 3 together while 0 and 1 decode,
    // then everyone decodes; finally 0 and 2 stop and 1 and 3 go on.
    std::vector<Step> s;
    s.push_back({{{0, 6}}, {}});
    s.push_back({{{1, 7}}, {0}});
    s.push_back({{{2, 5}, {3, 8}}, {0, 1}});
    for (int i = 0; i < 8; ++i) {
        s.push_back({{}, {0, 1, 2, 3}});
    }
    for (int i = 0; i < 4; ++i) {
        s.push_back({{}, {1, 3}});
    }
    return s;
}

std::vector<Step> together() {
    std::vector<Step> s;
    s.push_back({{{0, 6}, {1, 7}, {2, 5}, {3, 8}}, {}});
    for (int i = 0; i < 10; ++i) {
        s.push_back({{}, {0, 1, 2, 3}});
    }
    return s;
}

std::vector<Step> chunked() {
    // Prompts longer than one step's room: chunks of 3 beside decoding sequences.
    std::vector<Step> s;
    s.push_back({{{0, 6}}, {}});
    s.push_back({{{1, 3}}, {0}});
    s.push_back({{{1, 3}, {2, 2}}, {0}});
    s.push_back({{{1, 1}, {2, 3}}, {0}});
    s.push_back({{{3, 8}}, {0, 1, 2}});
    for (int i = 0; i < 6; ++i) {
        s.push_back({{}, {0, 1, 2, 3}});
    }
    return s;
}

// Requests arriving in a random order at random steps, each decoding `n_decode` tokens: what
// a server sees from concurrent clients, drawn from a seeded generator.
std::vector<Step> arrivals(std::mt19937 & rng, const std::vector<size_t> & prompt_lengths, int n_decode) {
    const int n = static_cast<int>(prompt_lengths.size());
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int> join(static_cast<size_t>(n)), decoded(static_cast<size_t>(n), -1);
    for (int q : order) {
        join[static_cast<size_t>(q)] = static_cast<int>(rng() % 4);
    }
    std::vector<Step> script;
    for (int st = 0;; ++st) {
        Step step;
        for (int q = 0; q < n; ++q) {
            int & d = decoded[static_cast<size_t>(q)];
            if (d >= 0 && d < n_decode) {
                step.decode.push_back(q);
                ++d;
            }
        }
        for (int q : order) {
            if (decoded[static_cast<size_t>(q)] < 0 && join[static_cast<size_t>(q)] <= st) {
                step.prompt.push_back({q, static_cast<int>(prompt_lengths[static_cast<size_t>(q)])});
                decoded[static_cast<size_t>(q)] = 0;
            }
        }
        if (step.decode.empty() && step.prompt.empty() &&
            std::all_of(decoded.begin(), decoded.end(), [](int d) { return d >= 0; })) {
            return script;
        }
        if (!step.decode.empty() || !step.prompt.empty()) {
            script.push_back(step);
        }
    }
}

// A server's history: each prompt served alone, then rounds of the four arriving in a random
// order at random steps, in one context that keeps every earlier sequence's cells (a request
// clears only its own slot), so later batches land in a fragmented KV cache.
std::vector<std::vector<Step>> server_history(const std::vector<size_t> & prompt_lengths, int n_rounds) {
    std::vector<std::vector<Step>> h;
    for (size_t q = 0; q < prompt_lengths.size(); ++q) {
        std::vector<Step> alone = {{{{static_cast<int>(q), static_cast<int>(prompt_lengths[q])}}, {}}};
        alone.resize(1 + 16, Step{{}, {static_cast<int>(q)}});
        h.push_back(alone);
    }
    std::mt19937 rng(7);
    for (int r = 0; r < n_rounds; ++r) {
        h.push_back(arrivals(rng, prompt_lengths, 16));
    }
    return h;
}

Rows run_history(LlamaSession & s, const std::vector<std::vector<llama_token>> & prompts,
                 const std::vector<std::vector<Step>> & history) {
    llama_memory_clear(llama_get_memory(s.ctx()), true);
    Rows all;
    for (const auto & script : history) {
        Rows r = run_script(s, prompts, script, false);
        all.insert(all.end(), r.begin(), r.end());
    }
    return all;
}

void expect_same_rows(const Rows & got, const Rows & want, const std::string & what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t r = 0; r < got.size(); ++r) {
        ASSERT_TRUE(got[r].size() == want[r].size() &&
                    std::memcmp(got[r].data(), want[r].data(), want[r].size() * sizeof(float)) == 0)
            << what << ": logits row " << r << " differs from stock";
    }
}

}  // namespace

class BatchExact : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchExact, ScriptedMultiSequenceBatchesMatchStock) {
    if (!sampled_under_sanitizer(GetParam(), {"qwen35moe"})) {
        GTEST_SKIP() << "sampled under the sanitizer: the regular build runs " << GetParam();
    }
    set_llama_verbosity(false);
    const std::string model = synth_model("tiny-" + GetParam(), tiny(GetParam()));
    const ExpertIndex idx = ExpertIndex::build(GgufFile::open(model));
    SessionOptions so;
    so.n_ctx = 1024;
    so.n_batch = 512;
    so.n_seq_max = 4;
    // One thread: hundreds of small graphs, whose barriers crawl when another test process
    // holds the other core (the comparison does not depend on the thread count).
    so.n_threads = 1;
    const std::map<std::string, std::vector<Step>> scripts = {
        {"staggered", staggered()}, {"together", together()}, {"chunked", chunked()}};
    std::vector<std::vector<llama_token>> prompts;
    std::map<std::string, Rows> stock;
    std::vector<std::vector<Step>> history;
    {
        LlamaSession s(model, so);
        const char * texts[] = {"The capital of France", "def fibonacci(n):", "Once upon a time",
                                "Mixture of experts models route"};
        const size_t lengths[] = {6, 7, 5, 8};  // what the fixed scripts prefill of each
        for (int i = 0; i < 4; ++i) {
            auto t = s.tokenize(texts[i], true);
            t.resize(lengths[i], t.back());
            prompts.push_back(t);
        }
        for (const auto & [name, script] : scripts) {
            stock[name] = run_script(s, prompts, script);
        }
        history = server_history({6, 7, 5, 8}, kSanitized ? 2 : 8);
        stock["history"] = run_history(s, prompts, history);
    }
    for (const uint64_t arena : {idx.min_arena_bytes, idx.expert_bytes * 2}) {
        PagedModelOptions po;
        po.arena = std::to_string(arena);
        po.n_ctx = so.n_ctx;
        po.layout = WeightLayout::repacked;  // as the stock session above
        PagedModel paged(model, po);
        SessionOptions pso = so;
        pso.overrides = paged.overrides();
        LlamaSession s(model, pso);
        paged.loaded();
        for (const auto & [name, script] : scripts) {
            expect_same_rows(run_script(s, prompts, script), stock.at(name), name + ", arena " + std::to_string(arena));
        }
        expect_same_rows(run_history(s, prompts, history), stock.at("history"),
                         "server history, arena " + std::to_string(arena));
        EXPECT_GT(paged.pager().stats().hits + paged.pager().stats().misses, 0u) << "the pager computed nothing";
    }
}

INSTANTIATE_TEST_SUITE_P(Batch, BatchExact, ::testing::Values("qwen35moe", "qwen3moe", "gpt-oss", "deepseek2", "olmoe"),
                         [](const auto & p) { return p.param == "gpt-oss" ? std::string("gpt_oss") : p.param; });
