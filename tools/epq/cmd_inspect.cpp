#include "commands.h"

#include "gguf/expert_index.h"
#include "gguf/inspect_report.h"

#include <cstdio>
#include <iostream>

namespace epq::cli {

Handler add_inspect(CLI::App & app) {
    auto * sub = app.add_subcommand("inspect", "show a MoE model's expert layout, size classes and minimum arena");
    struct Opts {
        std::string model;
        bool json = false;
        bool layers = false;
    };
    auto o = std::make_shared<Opts>();
    add_model_option(*sub, o->model, "model,-m,--model")->required();
    sub->add_flag("--json", o->json, "print JSON instead of text");
    sub->add_flag("--layers", o->layers, "also list every expert tensor (type, shape, bytes per expert, offset)");
    return [o]() {
        const GgufFile file = GgufFile::open(o->model);
        const ExpertIndex idx = ExpertIndex::build(file);
        if (o->json) {
            std::cout << inspect_json(file, idx).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else {
            std::cout << inspect_text(file, idx, o->layers);
        }
        return 0;
    };
}

}  // namespace epq::cli
