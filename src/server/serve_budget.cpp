#include "server/serve_budget.h"

#include "engine/paged_model.h"
#include "util/byte_size.h"
#include "util/error.h"

#include <algorithm>
#include <sys/stat.h>

namespace epq::server {

namespace {

uint64_t file_bytes(const std::string & path, const char * what) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        throw Error(std::string("cannot read the ") + what + " " + path);
    }
    return static_cast<uint64_t>(st.st_size);
}

int64_t meta(const GgufFile & f, const std::string & key, int64_t dflt = 0) {
    return f.get_int(f.architecture() + "." + key).value_or(dflt);
}

}  // namespace

uint64_t checkpoint_bytes(const GgufFile & f) {
    const int64_t n_layer = std::max<int64_t>(0, meta(f, "block_count"));
    // Recurrent layers (Mamba, gated delta nets): one state per sequence, F32. Counted for every
    // layer, an upper bound for hybrids that interleave attention layers.
    const int64_t d_state = meta(f, "ssm.state_size"), d_inner = meta(f, "ssm.inner_size");
    if (d_state > 0 && d_inner > 0) {
        const int64_t d_conv = std::max<int64_t>(1, meta(f, "ssm.conv_kernel", 4));
        const int64_t groups = std::max<int64_t>(1, meta(f, "ssm.group_count", 1));
        const int64_t per_layer = d_state * d_inner + (d_conv - 1) * (d_inner + 2 * groups * d_state);
        return static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(per_layer) * 4;
    }
    // Sliding-window attention: the window's keys and values (F16).
    const int64_t window = meta(f, "attention.sliding_window");
    if (window > 0) {
        const int64_t n_embd = meta(f, "embedding_length");
        const int64_t n_head = std::max<int64_t>(1, meta(f, "attention.head_count", 1));
        const int64_t n_head_kv = meta(f, "attention.head_count_kv", n_head);
        const int64_t k = meta(f, "attention.key_length", n_embd / n_head);
        const int64_t v = meta(f, "attention.value_length", n_embd / n_head);
        return static_cast<uint64_t>(n_layer) * static_cast<uint64_t>(window) * static_cast<uint64_t>(n_head_kv) *
               static_cast<uint64_t>(k + v) * 2;
    }
    return 0;
}

ServeMemoryPlan plan_serve_memory(const GgufFile & model, const ServeMemoryRequest & req, uint64_t available) {
    ServeMemoryPlan plan;
    const uint64_t mib = 1ull << 20;
    const int32_t n_parallel = std::max(1, req.n_parallel);

    // Context: the model's own when -c is 0, unless its KV cache would take over a quarter of
    // the memory (then the largest multiple of 1024 tokens that does not, at least 4096):
    // llama-server's --fit does the same for GPUs.
    plan.n_ctx = req.n_ctx;
    if (plan.n_ctx <= 0) {
        const int64_t train = meta(model, "context_length", 4096);
        int64_t n = std::clamp<int64_t>(train, 1, 1 << 24);
        if (estimate_kv_bytes(model, static_cast<uint32_t>(n)) > available / 4 && n > 4096) {
            const uint64_t per_1k = std::max<uint64_t>(1, estimate_kv_bytes(model, 1024));
            n = std::clamp<int64_t>(static_cast<int64_t>(available / 4 / per_1k) * 1024, 4096, n);
            plan.notes.push_back("-c 0 means the model's context of " + std::to_string(train) +
                                 " tokens, whose KV "
                                 "cache (" +
                                 format_bytes(estimate_kv_bytes(model, static_cast<uint32_t>(train))) +
                                 ") would take over a quarter of the memory: using -c " + std::to_string(n) +
                                 " (pass -c to choose)");
        }
        plan.n_ctx = static_cast<int32_t>(n);
    }

    // The host prompt cache: llama-server keeps up to --cache-ram MiB of finished prompts' state.
    // Under a limit it competes with the arena, which decode speed depends on: with an eighth of
    // 8 GiB for the cache, the 30B preset decoded 3.23 tok/s at 4 streams (arena 4.46 GiB, hit
    // rate 71%), with a thirty-second 4.59 tok/s (arena 5.21 GiB, 76%). A thirty-second still
    // keeps a few long conversations' states.
    plan.cache_ram_mib = req.cache_ram_mib;
    if (!req.cache_ram_given && req.cache_ram_mib > 0) {
        const int64_t share = static_cast<int64_t>(available / 32 / mib);
        if (share < req.cache_ram_mib) {
            plan.cache_ram_mib = static_cast<int32_t>(std::max<int64_t>(0, share));
            plan.notes.push_back("--cache-ram lowered from " + std::to_string(req.cache_ram_mib) + " to " +
                                 std::to_string(plan.cache_ram_mib) +
                                 " MiB (the host prompt cache counts against memory; a thirty-second of it is left to "
                                 "the cache, the rest to the arena; pass --cache-ram to choose)");
        }
    }
    if (plan.cache_ram_mib < 0) {
        plan.notes.push_back(
            "--cache-ram -1 (no limit) cannot be budgeted: the prompt cache may grow into the "
            "memory the arena was sized for");
    } else if (plan.cache_ram_mib > 0) {
        plan.needs.emplace_back("prompt cache (--cache-ram)", static_cast<uint64_t>(plan.cache_ram_mib) * mib);
    }

    // Context checkpoints: up to N per slot, each a copy of the sequence's recurrent or SWA state.
    plan.n_ctx_checkpoints = req.n_ctx_checkpoints;
    const uint64_t per = checkpoint_bytes(model);
    if (per > 0 && plan.n_ctx_checkpoints > 0) {
        if (!req.checkpoints_given) {
            const uint64_t fit = available / 16 / (per * static_cast<uint64_t>(n_parallel));
            if (fit < static_cast<uint64_t>(plan.n_ctx_checkpoints)) {
                plan.n_ctx_checkpoints = static_cast<int32_t>(fit);
                plan.notes.push_back("--ctx-checkpoints lowered from " + std::to_string(req.n_ctx_checkpoints) +
                                     " to " + std::to_string(plan.n_ctx_checkpoints) + " per slot (each is " +
                                     format_bytes(per) +
                                     " for this model; a sixteenth of the memory is left to "
                                     "them; pass --ctx-checkpoints to choose)");
            }
        }
        if (plan.n_ctx_checkpoints > 0) {
            plan.needs.emplace_back(
                "context checkpoints (" + std::to_string(n_parallel) + " slots x " +
                    std::to_string(plan.n_ctx_checkpoints) + ")",
                per * static_cast<uint64_t>(n_parallel) * static_cast<uint64_t>(plan.n_ctx_checkpoints));
        }
    }

    if (!req.draft_path.empty()) {
        plan.needs.emplace_back("draft model (-md)", file_bytes(req.draft_path, "draft model"));
        const GgufFile draft = GgufFile::open(req.draft_path);
        plan.needs.emplace_back("draft KV cache", estimate_kv_bytes(draft, static_cast<uint32_t>(plan.n_ctx)));
    }
    if (!req.mmproj_path.empty()) {
        plan.needs.emplace_back("multimodal projector (--mmproj)", file_bytes(req.mmproj_path, "projector"));
    }
    return plan;
}

}  // namespace epq::server
