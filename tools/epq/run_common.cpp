#include "run_common.h"

#include "commands.h"

#include "arena/routing_script.h"
#include "arena/trace.h"
#include "backend/pager_device.h"
#include "engine/llama_log.h"
#include "util/byte_size.h"
#include "util/error.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace epq::cli {

void add_pager_flags(CLI::App & sub, RunOptions & o) {
    sub.add_flag("--no-pager", o.no_pager, "run the file through stock llama.cpp (mmap): the baseline");
    auto * nr = sub.add_flag("--no-repack", o.no_repack,
                             "(-nr) keep every weight in the file's layout: output identical to stock llama.cpp -nr. "
                             "Default: repacked where ggml has interleaved kernels for the type (stock's default "
                             "flags) when the arena holds every expert, the file's layout when it holds part of them "
                             "(repacking after every read costs the compute threads CPU)");
    sub.add_flag("--repack", o.repack,
                 "hold weights repacked as stock llama.cpp's default flags do, whatever the arena: output identical "
                 "to stock with its default flags")
        ->excludes(nr);
    sub.add_option("--repacked-experts", o.repacked_experts,
                   "experts rewritten once in ggml's repacked layout by `epq repack`: 'auto' reads them from "
                   "MODEL.epq-repacked when it is there and was made for this CPU, so an arena holding part of "
                   "the experts runs stock's default layout without repacking; a path names the file; 'none'")
        ->capture_default_str();
    sub.add_option("--arena", o.arena,
                   "RAM for experts: a size (4G, 512M) or 'auto' (available memory minus dense weights, KV cache, "
                   "compute buffers, the pager's scratch at -b, and headroom)")
        ->capture_default_str();
    sub.add_option("--read-threads", o.read_threads, "expert reads in flight")->capture_default_str();
    sub.add_option("--prefetch", o.prefetch,
                   "next-layer prediction: read the experts the next layer's router picks for the current hidden "
                   "state early (decode): auto (switches itself off when most speculative reads are wasted), on, off")
        ->capture_default_str();
    sub.add_option("--policy", o.policy,
                   "arena eviction: " + run_policy_names() + " (epq simulate compares them on a recorded trace)")
        ->capture_default_str();
    sub.add_flag("--preload", o.preload,
                 "fill the arena with experts (file order) before the prompt: for an arena that holds the model");
    sub.add_option(
           "--n-gpu-layers", o.n_gpu_layers,
           "(-ngl) layers on the GPU, as llama.cpp's -ngl (default: all of them where ggml has a GPU backend; a "
           "build without one runs every layer on the CPU). The routed experts stay with the pager, "
           "computed on the CPU: output identical to stock llama.cpp with -ngl N --cpu-moe --no-op-offload")
        ->check(CLI::Range(-1, 100000));
    sub.add_option("--rpc", o.rpc,
                   "llama.cpp's RPC servers (HOST:PORT, several separated by commas; llama.cpp's ggml-rpc-server): "
                   "devices for -ngl, first in the order. The layers placed there keep their experts there; this "
                   "machine's are paged. No authentication: a trusted network or an SSH tunnel only");
    sub.add_option("--tensor-split", o.tensor_split,
                   "(-ts) as llama.cpp's: the share of the -ngl layers each device takes, e.g. 3,1 (default: by free "
                   "memory)");
    sub.add_flag("--cpu-moe", o.cpu_moe,
                 "with --no-pager: keep stock llama.cpp's routed experts in CPU memory (its --cpu-moe); paged runs "
                 "always do");
    sub.add_flag("--no-op-offload", o.no_op_offload,
                 "with --no-pager, as llama.cpp's: compute large batches of ops on CPU weights on the CPU, not the "
                 "GPU (paged runs beside a GPU always do: the pager's experts have no bytes to copy)");
    sub.add_flag("--no-host", o.no_host,
                 "with --no-pager, as llama.cpp's: CPU weights bypass a GPU's host buffer, so ggml can repack them "
                 "(paged runs do with --repack)");
    sub.add_flag("-v,--verbose", o.verbose, "show llama.cpp's own log");
}

CLI::Option * add_model_option(CLI::App & sub, std::string & model, const std::string & names) {
    return sub.add_option(names, model, "GGUF model file (of a split model: any shard)")
        ->transform([](const std::string & path) { return first_shard_path(path); }, "", "first shard");
}

void add_model_flags(CLI::App & sub, RunOptions & o, bool model_required) {
    auto * m = add_model_option(sub, o.model);
    if (model_required) {
        m->required();
    }
    sub.add_option("-n,--n-predict", o.n_predict, "number of tokens to generate")->capture_default_str();
    sub.add_option("-t,--threads", o.n_threads, "threads (default: all cores)");
    sub.add_option("-c,--ctx-size", o.n_ctx, "context size in tokens")->capture_default_str();
    sub.add_option("-b,--batch-size", o.n_batch, "prompt batch size")->capture_default_str();
    sub.add_option("--temp", o.sampling.temp, "temperature; 0 = greedy")->capture_default_str();
    sub.add_option("--top-k", o.sampling.top_k, "top-k sampling (with --temp > 0)")->capture_default_str();
    sub.add_option("--top-p", o.sampling.top_p, "top-p sampling (with --temp > 0)")->capture_default_str();
    sub.add_option("--seed", o.sampling.seed, "sampling seed (default: random)");
    add_pager_flags(sub, o);
    sub.add_option("--trace", o.trace, "record every (token, layer, selected experts) to this file for epq simulate");
    sub.add_flag("--stats", o.stats_per_token, "print statistics after every token");
    sub.add_option("--stats-json", o.stats_json, "write the run's statistics as JSON to this file");
    sub.add_option("--logits-out", o.logits_out, "write every step's logits (raw float32) to this file");
}

// epq bench --routing: the pager follows a recorded trace's expert choices. Said loudly: the
// output is not the model's.
static void follow_routing_trace(PagedModel & paged, const std::string & path) {
    const ExpertIndex & idx = paged.index();
    auto script =
        std::make_shared<const RoutingScript>(read_trace(path), idx.layers.size(), idx.n_expert, idx.n_expert_used);
    std::fprintf(stderr,
                 "epq: TIMING ONLY: every routed expert is chosen by the trace %s (%zu prompt tokens, %zu decode "
                 "steps, repeated as needed), not by this model's router: the text and logits are not the model's\n",
                 path.c_str(), script->prompt_tokens(), script->decode_steps());
    paged.pager().set_routing_script(std::move(script));
}

LoadedModel load_model(const RunOptions & o) {
    set_llama_verbosity(o.verbose);
    if (o.n_ctx < 16) {
        throw Error("-c must be at least 16");
    }
    if (o.read_threads < 1 || o.read_threads > 64) {
        throw Error("--read-threads must be 1..64");
    }
    LoadedModel m;
    m.start = std::chrono::steady_clock::now();
    // Validate before llama.cpp sees the file: a corrupt or non-MoE file gets a one-line reason.
    const GgufFile file = GgufFile::open(o.model);
    file.require_tensor_data();
    SessionOptions so;
    so.n_threads = o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    so.n_ctx = o.n_ctx;
    so.n_batch = o.n_batch;
    so.n_seq_max = o.n_parallel;
    // Stock (--no-pager) runs with llama.cpp's default layout unless -nr; a paged run's layout is
    // chosen with its arena (weight_layout.h).
    so.use_extra_bufts = !o.no_repack;
    so.n_gpu_layers = o.n_gpu_layers;
    if (!o.rpc.empty()) {
        add_rpc_servers(o.rpc);
    }
    so.tensor_split = parse_tensor_split(o.tensor_split);
    so.op_offload = !o.no_op_offload;
    m.n_threads = so.n_threads;
    // A model without routed experts has nothing to page: say so and run it as stock does.
    const bool dense = !o.no_pager && !has_routed_experts(file);
    if (dense) {
        std::fprintf(stderr,
                     "epq: %s: no routed experts (not a MoE model): nothing to page, running it through stock "
                     "llama.cpp\n",
                     o.model.c_str());
    }
    if (!o.routing_trace.empty() && (o.no_pager || dense)) {
        throw Error("--routing drives the pager's expert choices: " +
                    std::string(dense ? "this model has no routed experts" : "drop --no-pager"));
    }
    if (!o.no_pager && !dense) {
        PagedModelOptions po;
        po.arena = o.arena;
        po.read_threads = o.read_threads;
        po.n_ctx = o.n_ctx;
        po.n_batch = o.n_batch;
        po.prefetch = parse_prefetch_mode(o.prefetch);
        po.policy = parse_run_policy(o.policy);
        po.trace_path = o.trace;
        po.layout = o.no_repack ? WeightLayout::file : o.repack ? WeightLayout::repacked : WeightLayout::automatic;
        po.repacked_experts = o.repacked_experts;
        po.n_gpu_layers = o.n_gpu_layers;
        po.tensor_split = so.tensor_split;
        m.paged = std::make_unique<PagedModel>(o.model, po);
        const auto & idx = m.paged->index();
        const auto & plan = m.paged->pager().plan();
        std::string pools;
        for (const auto & p : plan.pools) {
            pools +=
                (pools.empty() ? "" : " + ") + std::to_string(p.n_slots) + " x " + std::to_string(p.slot_bytes) + " B";
        }
        std::fprintf(stderr,
                     "epq: %s: %s, %u layers, %u experts (top-%u), %s dense in RAM, %s of experts paged from disk\n"
                     "epq: arena %s (%s slots%s); %s\n",
                     o.model.c_str(), idx.arch.c_str(), idx.n_layer, idx.n_expert, idx.n_expert_used,
                     format_bytes(idx.dense_bytes).c_str(), format_bytes(idx.expert_bytes).c_str(),
                     format_bytes(plan.bytes).c_str(), pools.c_str(),
                     plan.holds_everything ? ": every expert fits" : "", m.paged->arena_reasoning().c_str());
        m.remote_layers = m.paged->placement().any_remote();
        if (m.paged->placement().pin_split()) {
            std::fprintf(stderr, "epq: layers split over %zu devices with %s%s\n", m.paged->placement().devices.size(),
                         m.paged->placement().split_flag().c_str(),
                         so.tensor_split.empty() ? ": each device's free memory now, fixed for this load" : "");
        }
        if (m.remote_layers) {
            std::fprintf(stderr, "epq: %s: their tensors, experts included, stay there (%s)\n",
                         m.paged->placement().remote_line().c_str(), format_bytes(idx.remote_bytes).c_str());
        }
        if (!m.paged->repacked_note().empty()) {
            std::fprintf(stderr, "epq: %s\n", m.paged->repacked_note().c_str());
        }
        std::fprintf(
            stderr, "epq: %s\n",
            layout_line(po.layout, m.paged->repack(), m.paged->gpu_host(), m.remote_layers, m.paged->repacked_file())
                .c_str());
        m.paged->configure(so);
        if (!o.routing_trace.empty()) {
            follow_routing_trace(*m.paged, o.routing_trace);
        }
        if (o.cpu_moe) {
            std::fprintf(stderr, "epq: note: --cpu-moe: the routed experts stay with the pager, on the CPU\n");
        }
    } else {
        so.cpu_moe = o.cpu_moe && !dense;
        so.no_host = o.no_host;
        if (!o.trace.empty()) {
            throw Error("--trace records the pager's view of routing: " +
                        std::string(dense ? "this model has no routed experts" : "drop --no-pager"));
        }
        if (!dense) {
            // Beside a GPU stock's default repacks nothing (weight_layout.h); --no-host does.
            const char * layout = o.no_repack ? "no repacking"
                                  : !o.no_host && gpu_host_buffer_first()
                                      ? "no repacking: a GPU's host buffer comes first"
                                      : "weights repacked where ggml can, its default";
            std::fprintf(stderr, "epq: --no-pager: running %s through stock llama.cpp (mmap, %s)\n", o.model.c_str(),
                         layout);
        }
    }
    m.repack = so.use_extra_bufts && (so.no_host || !gpu_host_buffer_first());
    m.gpu_host = gpu_host_buffer_first();
    m.session = std::make_unique<LlamaSession>(o.model, so);
    const std::string gpu = gpu_layers_line(o.n_gpu_layers, llama_model_n_layer(m.session->model()));
    if (!gpu.empty()) {
        std::fprintf(stderr, "epq: %s; routed experts %s\n", gpu.c_str(),
                     m.paged && m.remote_layers ? "of this machine's layers with the pager, computed on the CPU"
                     : m.paged                  ? "with the pager, computed on the CPU"
                     : so.cpu_moe               ? "on the CPU (--cpu-moe)"
                                                : "placed by llama.cpp");
    }
    if (m.paged) {
        const DenseLock lock = m.paged->loaded();
        m.dense_locked_bytes = lock.bytes;
        m.expert_tensor_bytes = pager_buffer_bytes();
        if (lock.error != 0) {
            std::fprintf(stderr,
                         "epq: note: the dense weights are not locked in RAM (mlock: %s; %s locked): under memory "
                         "pressure the kernel may drop and re-read them. Raise the limit (ulimit -l, LimitMEMLOCK=) "
                         "to lock them.\n",
                         std::strerror(lock.error), format_bytes(lock.bytes).c_str());
        }
        if (o.preload) {
            const auto t0 = std::chrono::steady_clock::now();
            const uint64_t before = m.paged->pager().stats().bytes_read;
            const uint64_t n = m.paged->pager().preload();
            const PagerSnapshot after = m.paged->pager().stats();
            std::fprintf(stderr, "epq: preloaded %llu of %llu experts (%s read) in %.2f s\n",
                         static_cast<unsigned long long>(n),
                         static_cast<unsigned long long>(m.paged->index().n_expert * m.paged->index().layers.size()),
                         format_bytes(after.bytes_read - before).c_str(),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    } else if (o.preload) {
        throw Error(std::string("--preload fills the pager's arena: ") +
                    (dense ? "this model has no routed experts" : "drop --no-pager"));
    }
    m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.start).count();
    return m;
}

void finish_report(const RunOptions & o, LoadedModel & m, RunReport & report) {
    report.load_seconds = m.load_seconds;
    report.n_threads = m.n_threads;
    report.repack = m.repack;
    report.gpu_host = m.gpu_host;
    report.remote_layers = m.remote_layers;
    report.peak_rss_bytes = peak_rss_bytes();
    report.storage_read_bytes = storage_read_bytes();
    report.major_faults = major_page_faults();
    if (m.paged) {
        m.paged->pager().flush_trace();
        report.pager = m.paged->pager().stats();
        report.dense_locked_bytes = m.dense_locked_bytes;
        report.expert_tensor_bytes = m.expert_tensor_bytes;
    }
    std::fputs(("\n" + report.text()).c_str(), stderr);
    if (!o.stats_json.empty()) {
        std::ofstream out(o.stats_json);
        out << report.json().dump(2) << "\n";
        if (!out) {
            throw Error("cannot write " + o.stats_json);
        }
    }
}

int run_generation(const RunOptions & o) {
    auto read_text = [](const std::string & path, const char * what) {
        std::ifstream in(path, std::ios::binary);
        if (!in) {
            throw Error(std::string("cannot read ") + what + " " + path);
        }
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    };
    std::string prompt = o.prompt;
    if (!o.prompt_file.empty()) {
        prompt = read_text(o.prompt_file, "prompt file");
    }
    std::string replay_text;
    if (!o.replay.empty()) {
        if (!prompt.empty()) {
            throw Error("--replay takes its prompt from the text (--replay-prompt tokens): drop -p/-f");
        }
        if (o.replay_prompt < 1) {
            throw Error("--replay-prompt must be at least 1");
        }
        replay_text = read_text(o.replay, "replay text");
    }
    if (o.n_predict < 0) {
        throw Error("-n must be 0 or more");
    }
    LoadedModel m = load_model(o);
    LlamaSession & session = *m.session;

    auto tokens = session.tokenize(o.replay.empty() ? prompt : replay_text, true);
    std::vector<llama_token> replay;
    if (!o.replay.empty()) {
        const size_t n_prompt = static_cast<size_t>(o.replay_prompt);
        if (tokens.size() < n_prompt + 1) {
            throw Error("the replay text has " + std::to_string(tokens.size()) + " tokens: it needs more than " +
                        "--replay-prompt " + std::to_string(n_prompt));
        }
        const size_t n_replay = std::min(tokens.size() - n_prompt, static_cast<size_t>(std::max(0, o.n_predict)));
        replay.assign(tokens.begin() + static_cast<long>(n_prompt),
                      tokens.begin() + static_cast<long>(n_prompt + n_replay));
        tokens.resize(n_prompt);
        prompt.clear();
        for (llama_token t : tokens) {
            prompt += session.piece(t);
        }
        std::fprintf(stderr, "epq: replaying %zu tokens of %s after a %zu-token prompt\n", replay.size(),
                     o.replay.c_str(), n_prompt);
    }
    if (tokens.empty()) {
        throw Error("the prompt is empty: pass one with -p or -f");
    }
    if (tokens.size() + static_cast<size_t>(o.n_predict) > o.n_ctx) {
        throw Error("prompt (" + std::to_string(tokens.size()) + " tokens) + -n " + std::to_string(o.n_predict) +
                    " exceeds the context of " + std::to_string(o.n_ctx) + " tokens: raise -c");
    }
    std::unique_ptr<std::ofstream> logits_file;
    if (!o.logits_out.empty()) {
        logits_file = std::make_unique<std::ofstream>(o.logits_out, std::ios::binary | std::ios::trunc);
        if (!*logits_file) {
            throw Error("cannot write " + o.logits_out);
        }
    }
    std::fputs(prompt.c_str(), stderr);
    std::fputs("\n", stderr);

    PagerSnapshot before;
    if (m.paged) {
        before = m.paged->pager().stats();
    }
    auto last = std::chrono::steady_clock::now();
    int step = 0;
    RunReport report;
    report.gen = generate(
        session, tokens, o.n_predict, o.sampling,
        [&](const std::string & piece, llama_token) {
            std::fwrite(piece.data(), 1, piece.size(), stdout);
            std::fflush(stdout);
            if (o.stats_per_token && m.paged) {
                const auto now = std::chrono::steady_clock::now();
                const PagerSnapshot after = m.paged->pager().stats();
                std::fputs(
                    token_stats_line(step, before, after, std::chrono::duration<double>(now - last).count()).c_str(),
                    stderr);
                before = after;
                last = now;
            }
            ++step;
            return true;
        },
        [&](int i, const float * logits, int32_t n_vocab) {
            if (i == 0) {
                report.major_faults_after_prefill = major_page_faults();
            }
            if (i == 0 && m.paged) {
                report.pager_before_prefill = before;
                report.pager_after_prefill = m.paged->pager().stats();
            }
            if (logits_file) {
                logits_file->write(reinterpret_cast<const char *>(logits),
                                   static_cast<std::streamsize>(n_vocab) * static_cast<std::streamsize>(sizeof(float)));
            }
        },
        false, replay);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    report.ttft_seconds = m.load_seconds + report.gen.first_token_seconds;
    finish_report(o, m, report);
    return 0;
}

}  // namespace epq::cli
