#include "commands.h"

#include "backend/repacked_experts.h"
#include "engine/llama_log.h"
#include "gguf/expert_index.h"
#include "gguf/gguf_file.h"
#include "util/byte_size.h"
#include "util/progress.h"

#include <cstdio>
#include <memory>

namespace epq::cli {

Handler add_repack(CLI::App & app) {
    auto * sub = app.add_subcommand(
        "repack",
        "rewrite a model's routed experts once into ggml's repacked CPU layout, in a file beside it "
        "(MODEL.epq-repacked): runs whose arena holds part of the experts then read them ready for stock's "
        "default kernels (output identical to stock llama.cpp with its default flags) instead of -nr's");
    struct Opts {
        std::string model;
        std::string out;
    };
    auto o = std::make_shared<Opts>();
    add_model_option(*sub, o->model)->required();
    sub->add_option("-o,--output", o->out,
                    "where to write it (default: beside the model, where epq run and serve look for it; elsewhere, "
                    "name it with --repacked-experts)");
    return [o]() {
        set_llama_verbosity(false);  // ggml logs every matrix it repacks
        const GgufFile file = GgufFile::open(o->model);
        file.require_tensor_data();
        const ExpertIndex index = ExpertIndex::build(file);
        const std::string out = o->out.empty() ? repacked_experts_path(index) : o->out;
        std::fprintf(stderr, "epq: rewriting the %s of routed experts of %s for this CPU (%s) into %s\n",
                     format_bytes(index.expert_bytes).c_str(), o->model.c_str(), cpu_features().c_str(), out.c_str());
        Progress progress("repacking experts", index.expert_bytes);
        uint64_t shown = 0;
        const RepackWriteReport r = write_repacked_experts(index, out, [&](uint64_t done) {
            progress.advance(done - shown);
            shown = done;
        });
        progress.finish();
        std::printf(
            "wrote %s: %s on disk for %s of experts (%.1f%% more: each matrix starts on its own page), "
            "%zu matrices per expert repacked, in %.1f s (%.0f MiB/s)\n",
            out.c_str(), format_bytes(r.file_bytes).c_str(), format_bytes(r.expert_bytes).c_str(),
            r.expert_bytes ? 100.0 * (double(r.file_bytes) / double(r.expert_bytes) - 1.0) : 0.0, r.repacked_matrices,
            r.seconds, r.seconds > 0 ? double(r.expert_bytes) / r.seconds / (1 << 20) : 0.0);
        std::printf(
            "epq run and epq serve read it when it sits beside the model and was made for this CPU: capped "
            "runs then match stock llama.cpp's default flags\n");
        return 0;
    };
}

}  // namespace epq::cli
