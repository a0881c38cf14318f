#include "engine/weight_layout.h"

#include "engine/llama_session.h"

#include "ggml-backend.h"

namespace epq {

bool gpu_host_buffer_first() {
    for (ggml_backend_dev_t dev : gpu_devices()) {
        if (ggml_backend_dev_host_buffer_type(dev) != nullptr) {
            return true;
        }
    }
    return false;
}

bool layout_repacks(WeightLayout layout, bool arena_holds_everything, bool gpu_host) {
    switch (layout) {
        case WeightLayout::repacked: return true;
        case WeightLayout::file: return false;
        case WeightLayout::automatic: break;
    }
    return arena_holds_everything && !gpu_host;
}

std::string stock_configuration(bool repack, bool gpu_host, bool remote) {
    if (remote) {
        // Stock's --cpu-moe would take the remote layers' experts too: only this machine's go to
        // the CPU.
        return gpu_host ? std::string("stock llama.cpp with --no-op-offload") + (repack ? " --no-host" : "") +
                              ", the routed experts of this machine's layers on the CPU (-ot "
                              "'blk\\.(LAYERS)\\.ffn_.*_exps=CPU') and the same --rpc, -ngl and --tensor-split"
                        : std::string("stock llama.cpp with ") + (repack ? "its default flags" : "-nr (--no-repack)") +
                              " and the same --rpc, -ngl and --tensor-split";
    }
    if (gpu_host) {
        return repack ? "stock llama.cpp with --cpu-moe --no-op-offload --no-host (and the same -ngl)"
                      : "stock llama.cpp with --cpu-moe --no-op-offload (and the same -ngl)";
    }
    return repack ? "stock llama.cpp with its default flags" : "stock llama.cpp with -nr (--no-repack)";
}

std::string layout_line(WeightLayout asked, bool repack, bool gpu_host, bool remote, const std::string & ready_file) {
    std::string why;
    switch (asked) {
        case WeightLayout::repacked: why = "--repack"; break;
        case WeightLayout::file: why = "-nr"; break;
        case WeightLayout::automatic:
            why = gpu_host ? "a GPU's host buffer holds stock's CPU weights unrepacked; --repack for --no-host's"
                  : !ready_file.empty() ? "the experts are read ready-repacked"
                  : repack              ? "the arena holds every expert, so each is repacked once"
                           : "the arena holds part of the experts: repacking after every read would take CPU from "
                             "the compute threads; --repack for stock's default layout";
            break;
    }
    if (!ready_file.empty()) {
        why += ", from " + ready_file;
    }
    return std::string(repack ? "weights repacked where ggml repacks them" : "weights in the file's layout") + " (" +
           why + "): output identical to " + stock_configuration(repack, gpu_host, remote);
}

}  // namespace epq
