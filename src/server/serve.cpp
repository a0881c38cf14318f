#include "server/serve.h"

#include "backend/pager_device.h"
#include "engine/memory_budget.h"
#include "engine/model_devices.h"
#include "engine/paged_model.h"
#include "gguf/expert_index.h"
#include "server/pager_routes.h"
#include "server/serve_args.h"
#include "server/serve_budget.h"
#include "server/server_hooks.h"
#include "server/stream_admission.h"
#include "server/stream_tuning.h"
#include "util/byte_size.h"
#include "util/error.h"

#include "arg.h"
#include "common.h"
#include "log.h"
#include "server-stream.h"

#include <algorithm>
#include <chrono>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

int llama_server(common_params & params, int argc, char ** argv);

namespace epq::server {

namespace {

void note(const std::string & s) {
    std::fprintf(stderr, "epq: %s\n", s.c_str());
}

bool given(const std::vector<std::string> & args, std::initializer_list<const char *> names, const char * env) {
    for (const auto & a : args) {
        for (const char * n : names) {
            if (a == n || a.rfind(std::string(n) + "=", 0) == 0) {
                return true;
            }
        }
    }
    return std::getenv(env) != nullptr;
}

// The pager of this process (single-model mode, or a router's child), alive until exit.
struct PagedServe {
    std::unique_ptr<PagedModel> model;
    PagerFlags flags;
    std::chrono::steady_clock::time_point start;
    std::shared_ptr<StreamGate> gate;  // null: every slot generates at once, as in llama-server
    // With --decode-streams auto under a cap: sets the gate from the decode steps' read wait.
    // Declared last, so its thread stops before the pager it reads goes.
    std::unique_ptr<StreamTuning> tuning;
};

// What llama-server would do that a paged model must not, changed in `params` and said.
// Returns whether warm-up was asked for (it is turned off; the note comes with the expert bytes).
bool adapt_server_defaults(common_params & params, const std::vector<std::string> & llama_args) {
    // Loading reads only the dense bytes: through the mapping the pager's policy shapes.
    if (params.load_mode != LLAMA_LOAD_MODE_AUTO && params.load_mode != LLAMA_LOAD_MODE_MMAP) {
        note(std::string("the model is loaded through mmap whatever the load mode (") +
             llama_load_mode_name(params.load_mode) +
             " would read every expert at load); the dense weights are locked in RAM by epq where it can");
    }
    params.load_mode = LLAMA_LOAD_MODE_MMAP;
    const bool warmup_asked = params.warmup;
    params.warmup = false;
    // --fit sizes the context and layers to device memory; epq sizes them to the memory limit.
    if (given(llama_args, {"-fit", "--fit"}, "LLAMA_ARG_FIT") && params.fit_params) {
        note("--fit is off: the pager sizes the arena, the context and the server's caches to the memory limit");
    }
    params.fit_params = false;
    // llama_server's own defaults for the slots and the KV pool, applied here so the budget sees them.
    if (params.n_parallel < 0) {
        params.n_parallel = 4;
        params.kv_unified = true;
    }
    if (params.kv_unified_per_slot > 0 && params.n_ctx == 0 &&
        static_cast<uint32_t>(params.fit_params_min_ctx) != UINT32_MAX) {
        params.n_ctx = params.n_parallel * params.kv_unified_per_slot;
    }
    return warmup_asked;
}

// The server's own memory (serve_budget.h), with the defaults that would crowd it lowered in
// `params`.
ServeMemoryPlan plan_server_memory(common_params & params, const GgufFile & file,
                                   const std::vector<std::string> & llama_args) {
    ServeMemoryRequest req;
    req.n_ctx = params.n_ctx;
    req.n_parallel = params.n_parallel;
    req.cache_ram_mib = params.cache_ram_mib;
    req.cache_ram_given = given(llama_args, {"-cram", "--cache-ram"}, "LLAMA_ARG_CACHE_RAM");
    req.n_ctx_checkpoints = params.n_ctx_checkpoints;
    req.checkpoints_given =
        given(llama_args, {"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"}, "LLAMA_ARG_CTX_CHECKPOINTS");
    req.draft_path = params.speculative.draft.mparams.path;
    req.mmproj_path = params.no_mmproj ? "" : params.mmproj.path;
    const ServeMemoryPlan plan = plan_serve_memory(file, req, available_memory().bytes);
    for (const auto & n : plan.notes) {
        note(n);
    }
    params.n_ctx = plan.n_ctx;
    params.cache_ram_mib = plan.cache_ram_mib;
    params.n_ctx_checkpoints = plan.n_ctx_checkpoints;
    return plan;
}

// The pager's patterns first: llama.cpp takes the first pattern that matches a tensor, and a
// user's own `-ot exps=CPU` (the usual recipe without epq) must not take the experts back.
void override_experts(common_params & params, const PagedModel & model) {
    std::vector<llama_model_tensor_buft_override> ot;
    for (const auto * o = model.overrides(); o->pattern; ++o) {
        ot.push_back(*o);
    }
    const size_t n_pager = ot.size();
    for (const auto & o : params.tensor_buft_overrides) {
        if (o.pattern) {
            ot.push_back(o);
        }
    }
    if (ot.size() > n_pager) {
        note(
            "your tensor overrides (-ot, --cpu-moe, --n-cpu-moe) apply to the tensors the pager does not serve: "
            "the routed experts stay with the pager");
    }
    // Null-padded as llama.cpp's parser leaves it (its --fit reads a fixed number of entries).
    ot.resize(std::max(ot.size() + 1, params.tensor_buft_overrides.size()), {nullptr, nullptr});
    params.tensor_buft_overrides = ot;
}

// The layout the user named (-nr, --no-repack, --repack, or LLAMA_ARG_REPACK as llama.cpp reads
// them), or automatic: the arena chooses (weight_layout.h).
WeightLayout asked_layout(const common_params & params, const std::vector<std::string> & llama_args) {
    if (!given(llama_args, {"-nr", "--no-repack", "--repack"}, "LLAMA_ARG_REPACK")) {
        return WeightLayout::automatic;
    }
    return params.no_extra_bufts ? WeightLayout::file : WeightLayout::repacked;
}

// How many requests generate at once (stream_gate.h): the user's --decode-streams, or what the
// arena fits, tuned while the server runs (stream_tuner.h). No gate when that is every slot and
// nothing is tuned: the arena holds every expert, or the user asked for every slot.
void plan_decode_streams(const common_params & params, PagedServe & ps) {
    const auto & idx = ps.model->index();
    const auto & ap = ps.model->pager().plan();
    StreamFit f;
    f.n_parallel = std::max(1, params.n_parallel);
    f.holds_everything = ap.holds_everything;
    f.n_expert = static_cast<int>(idx.n_expert);
    f.n_expert_used = static_cast<int>(idx.n_expert_used);
    // Every size class is given the same share of its experts (slot_arena.h), so the arena's
    // share of the expert bytes is its share of each layer's experts.
    f.slots_per_layer = idx.expert_bytes == 0
                            ? 0
                            : static_cast<uint64_t>(static_cast<double>(idx.n_expert) * static_cast<double>(ap.bytes) /
                                                    static_cast<double>(idx.expert_bytes));
    StreamCapacity c = streams_that_fit(f);
    const int asked = ps.flags.decode_streams;
    if (asked > 0) {
        c.streams = std::min(asked, f.n_parallel);
        c.why = "--decode-streams " + (asked == kAllDecodeStreams ? std::string("all") : std::to_string(asked));
    }
    // Tuned only when epq chose more than one and the arena can miss: then reads can come to
    // dominate the steps.
    const bool tuned = asked == 0 && !ap.holds_everything && c.streams > 1;
    note("decode streams: " + std::string(tuned ? "up to " : "") + std::to_string(c.streams) + " of " +
         std::to_string(f.n_parallel) + " slots generate at once (" + c.why + ")" +
         (tuned ? "; from 1, one more while reads take under a quarter of the decode steps' time, one fewer over a "
                  "half or when the steps decode fewer tokens per second than with one fewer"
                : "") +
         (c.streams < f.n_parallel || tuned ? "; later requests wait in arrival order (--decode-streams to choose)"
                                            : ""));
    // A decode step holds one token per generating request: at most this many.
    ps.model->pager().set_decode_batch_max(static_cast<uint32_t>(c.streams));
    if (c.streams >= f.n_parallel && !tuned) {
        return;
    }
    ps.gate = std::make_shared<StreamGate>(c.streams);
    if (tuned) {
        const Pager * pager = &ps.model->pager();
        ps.tuning = std::make_unique<StreamTuning>(
            ps.gate,
            [pager] {
                const PagerSnapshot s = pager->stats();
                return StreamTuning::DecodeTotals{s.decode_seconds, s.decode_wait_seconds,
                                                  static_cast<double>(s.decode_tokens)};
            },
            note);
    }
}

// Sets the server's parameters up for paging `params.model.path`. Returns null (the model is
// served as stock llama-server serves it) when there is nothing to page, saying why in `why`.
std::unique_ptr<PagedServe> setup_pager(common_params & params, const PagerFlags & flags,
                                        const std::vector<std::string> & llama_args, std::string & why) {
    if (params.model.path.empty()) {
        why = "no local model file (-m)";
        return nullptr;
    }
    if (flags.no_pager) {
        why = "--no-pager";
        note("--no-pager: serving " + params.model.path + " as stock llama-server does (mmap)");
        return nullptr;
    }
    // Validate before llama.cpp sees the file: a corrupt one gets a one-line reason.
    const GgufFile file = GgufFile::open(params.model.path);
    file.require_tensor_data();
    // llama.cpp loads a split model from its first shard; the user may have named another.
    params.model.path = file.path();
    if (!has_routed_experts(file)) {
        why = "the model has no routed experts";
        note(params.model.path +
             ": no routed experts (not a MoE model): nothing to page, serving it as stock "
             "llama-server does");
        return nullptr;
    }
    auto ps = std::make_unique<PagedServe>();
    ps->flags = flags;
    ps->start = std::chrono::steady_clock::now();
    const bool warmup_asked = adapt_server_defaults(params, llama_args);
    const ServeMemoryPlan plan = plan_server_memory(params, file, llama_args);

    PagedModelOptions po;
    po.arena = flags.arena;
    po.read_threads = flags.read_threads;
    po.n_ctx = static_cast<uint32_t>(plan.n_ctx);
    po.n_batch = static_cast<uint32_t>(std::max(1, std::min(params.n_batch, params.n_ubatch)));
    po.prefetch = parse_prefetch_mode(flags.prefetch);
    po.policy = parse_run_policy(flags.policy);
    po.trace_path = flags.trace;
    po.layout = asked_layout(params, llama_args);
    po.repacked_experts = flags.repacked_experts;
    po.other_needs = plan.needs;
    // MTP drafting makes llama.cpp load the MTP layers, and with them their experts.
    // (as common_model_params_to_llama decides it).
    po.load_mtp = std::find(params.speculative.types.begin(), params.speculative.types.end(),
                            COMMON_SPECULATIVE_TYPE_DRAFT_MTP) != params.speculative.types.end();
    po.n_gpu_layers = params.n_gpu_layers;
    po.tensor_split.assign(params.tensor_split, params.tensor_split + llama_max_devices());
    ps->model = std::make_unique<PagedModel>(params.model.path, po);
    // llama.cpp then places the layers exactly as the pager predicted (LayerPlacement::pin_split).
    const LayerPlacement & placement = ps->model->placement();
    if (placement.pin_split()) {
        std::fill(params.tensor_split, params.tensor_split + llama_max_devices(), 0.0f);
        std::copy(placement.weights.begin(), placement.weights.end(), params.tensor_split);
    }
    params.no_extra_bufts = !ps->model->repack();
    // Beside a GPU (PagedModel::configure): repacked past the GPU's host buffer, as stock's
    // --no-host, and no op offload.
    params.no_host = params.no_host || (ps->model->repack() && ps->model->gpu_host());
    if (ps->model->gpu_host() && !params.no_op_offload) {
        params.no_op_offload = true;
        note("op offload is off: the pager's experts have no bytes to copy to the GPU (stock's --no-op-offload)");
    }
    // llama-server only sees a failed decode ("Compute error."): the log says why.
    log_pager_errors(true);
    // What llama-server decodes while it loads is its start-up probe (warm-up is off): nothing
    // reads its outputs, so the pager reads nothing for it (after_load turns this off).
    ps->model->pager().set_dry_run(true);
    override_experts(params, *ps->model);

    const auto & idx = ps->model->index();
    const auto & ap = ps->model->pager().plan();
    note(params.model.path + ": " + idx.arch + ", " + std::to_string(idx.n_layer) + " layers, " +
         std::to_string(idx.n_expert) + " experts (top-" + std::to_string(idx.n_expert_used) + "), " +
         format_bytes(idx.dense_bytes) + " dense in RAM, " + format_bytes(idx.expert_bytes) + " of experts paged");
    if (placement.pin_split()) {
        note("layers split over " + std::to_string(placement.devices.size()) + " devices with " +
             placement.split_flag() +
             (std::all_of(po.tensor_split.begin(), po.tensor_split.end(), [](float w) { return w == 0.0f; })
                  ? ": each device's free memory now, fixed for this load"
                  : ""));
    }
    if (placement.any_remote()) {
        note(placement.remote_line() + ": their tensors, experts included, stay there (" +
             format_bytes(idx.remote_bytes) + ")");
    }
    note("arena " + format_bytes(ap.bytes) + (ap.holds_everything ? " (every expert fits)" : "") + "; " +
         ps->model->arena_reasoning());
    if (warmup_asked) {
        note("llama.cpp's warm-up is off: it runs every expert of every layer once, which would read all " +
             format_bytes(idx.expert_bytes) + " of experts before the first request");
    }
    if (!ps->model->repacked_note().empty()) {
        note(ps->model->repacked_note());
    }
    note(layout_line(po.layout, ps->model->repack(), ps->model->gpu_host(), placement.any_remote(),
                     ps->model->repacked_file()) +
         "; " + std::to_string(params.n_parallel) + " slots, context " + std::to_string(params.n_ctx) + " tokens");
    plan_decode_streams(params, *ps);
    return ps;
}

bool after_load(PagedServe & ps) {
    ps.model->pager().set_dry_run(false);
    const DenseLock lock = ps.model->loaded();
    if (lock.error != 0) {
        note(std::string("the dense weights are not locked in RAM (mlock: ") + std::strerror(lock.error) + "; " +
             format_bytes(lock.bytes) +
             " locked): under memory pressure the kernel may drop and re-read them. "
             "Raise the limit (ulimit -l, LimitMEMLOCK=) to lock them.");
    }
    if (ps.flags.preload) {
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t n = ps.model->pager().preload();
        note("preloaded " + std::to_string(n) + " experts in " +
             std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) + " s");
    }
    const PagerSnapshot s = ps.model->pager().stats();
    note("model ready in " +
         std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - ps.start).count()) + " s; " +
         format_bytes(s.bytes_read) + " of experts read so far");
    return true;
}

// A model named by repository (-hf, -mu, -dr; how a router starts each child from the cache or a
// preset) is resolved to its file by llama_server() itself, after the point where the pager must
// be set up: resolve it here first (from the cache, or downloaded, as llama_server would). Its
// projector (-hf's mmproj) is then known to the budget too. On failure llama_server() tries again
// and reports it as stock does.
void resolve_model_file(common_params & params) {
    const char * mode = std::getenv("LLAMA_SERVER_CHILD_MODE");
    if ((mode && std::strcmp(mode, "download") == 0) || !params.model.path.empty() ||
        (params.model.hf_repo.empty() && params.model.url.empty() && params.model.docker_repo.empty())) {
        return;
    }
    try {
        common_models_handler h = common_models_handler_init(params, LLAMA_EXAMPLE_SERVER);
        if (!common_models_handler_is_preset_repo(h)) {
            common_models_handler_apply(h, params);
        }
    } catch (const std::exception &) {
    }
}

int run(int argc, char ** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    // A router's child gets the pager flags from its parent's environment; its own win.
    std::vector<std::string> pager_args = decode_pager_flags(std::getenv(kPagerFlagsEnv));
    const std::vector<std::string> own = pager_args_of(args);
    pager_args.insert(pager_args.end(), own.begin(), own.end());
    const PagerFlags flags = split_serve_args(pager_args).pager;
    const SplitArgs split = split_serve_args(args);
    if (split.help) {
        std::fputs(pager_flags_help().c_str(), stdout);
    }
    // Router mode starts one child per model by re-executing this binary: as `epq serve`, with
    // the same pager flags.
    setenv(kPagerFlagsEnv, encode_pager_flags(pager_args).c_str(), 1);
    setenv("LLAMA_APP_CMD", "serve", 1);

    std::vector<std::string> llama_args = split.llama;
    // llama.cpp's parser registers --rpc servers and aborts on one it cannot reach: reach them
    // first, to say which and what to do.
    for (size_t i = 0; i < llama_args.size(); ++i) {
        const std::string & a = llama_args[i];
        if (a == "--rpc" && i + 1 < llama_args.size()) {
            check_rpc_servers(llama_args[i + 1]);
        } else if (a.rfind("--rpc=", 0) == 0) {
            check_rpc_servers(a.substr(6));
        }
    }
    if (const char * env = std::getenv("LLAMA_ARG_RPC"); env && !given(llama_args, {"--rpc"}, "")) {
        check_rpc_servers(env);
    }
    std::vector<char *> largv{argv[0]};
    for (auto & a : llama_args) {
        largv.push_back(a.data());
    }
    largv.push_back(nullptr);
    const int largc = static_cast<int>(largv.size()) - 1;

    // What llama_server(argc, argv) does before it calls llama_server(params, ...).
    std::setlocale(LC_NUMERIC, "C");
    signal(SIGPIPE, SIG_IGN);
    common_params params;
    common_init();
    server_stream_session_manager_start();
    if (!common_params_parse(largc, largv.data(), params, LLAMA_EXAMPLE_SERVER)) {
        return 1;
    }
    llama_backend_init();
    llama_numa_init(params.numa);
    resolve_model_file(params);

    std::string why;
    std::unique_ptr<PagedServe> ps = setup_pager(params, flags, llama_args, why);
    PagerPageInfo info;
    info.model = params.model.path;
    info.not_paged = why;
    if (ps) {
        info.arena_reasoning = ps->model->arena_reasoning();
        set_after_load_hook([&ps] { return after_load(*ps); });
    }
    const Pager * pager = ps ? &ps->model->pager() : nullptr;
    std::shared_ptr<StreamGate> gate = ps ? ps->gate : nullptr;
    const StreamTuning * tuning = ps ? ps->tuning.get() : nullptr;
    if (gate) {
        set_post_route_hook([gate](const std::string & path, const HttpHandler & h) {
            return route_generates(path) ? gated_handler(gate, h) : h;
        });
    }
    set_before_listen_hook([pager, info, gate, tuning](server_http_context & http) {
        add_pager_routes(http, pager, {gate.get(), tuning}, info);
    });
    const int rc = llama_server(params, largc, largv.data());
    common_log_flush(common_log_main());
    if (ps && !flags.trace.empty()) {
        ps->model->pager().flush_trace();  // throws epq::Error when the write fails
        note("routing trace written to " + flags.trace);
    }
    return rc;
}

}  // namespace

int serve_main(int argc, char ** argv) {
    try {
        return run(argc, argv);
    } catch (const Error & e) {
        std::fprintf(stderr, "epq: error: %s\n", e.what());
        return 1;
    } catch (const std::exception & e) {
        std::fprintf(stderr, "epq: internal error: %s\n", e.what());
        return 2;
    }
}

}  // namespace epq::server
