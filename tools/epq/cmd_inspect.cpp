#include "commands.h"

#include "gguf/expert_index.h"
#include "gguf/inspect_report.h"

#include "backend/expert_store.h"
#include "util/byte_size.h"
#include "util/error.h"

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

namespace epq::cli {

namespace {

nlohmann::json arena_plan_json(const ArenaPlan & p) {
    nlohmann::json pools = nlohmann::json::array();
    for (const auto & pool : p.pools) {
        pools.push_back({{"slot_bytes", pool.slot_bytes}, {"slots", pool.n_slots}});
    }
    return {{"bytes", p.bytes}, {"min_bytes", p.min_bytes}, {"holds_everything", p.holds_everything}, {"pools", pools}};
}

std::string arena_plan_text(const ArenaPlan & p, const ExpertIndex & idx) {
    std::string s =
        "arena plan:     " + format_bytes(p.bytes) + (p.holds_everything ? " (every expert fits)" : "") + "\n";
    for (const auto & pool : p.pools) {
        uint64_t experts = 0;  // of this slot size in the model
        for (const auto & c : idx.size_classes) {
            experts += c.slot_bytes == pool.slot_bytes ? c.layers.size() * idx.n_expert : 0;
        }
        char line[160];
        std::snprintf(line, sizeof line, "  %u slots of %s: %.1f%% of the %llu experts of that size\n", pool.n_slots,
                      format_bytes(pool.slot_bytes).c_str(),
                      experts ? 100.0 * pool.n_slots / static_cast<double>(experts) : 0.0,
                      static_cast<unsigned long long>(experts));
        s += line;
    }
    return s;
}

}  // namespace

Handler add_inspect(CLI::App & app) {
    auto * sub = app.add_subcommand("inspect", "show a MoE model's expert layout, size classes and minimum arena");
    struct Opts {
        std::string model;
        bool json = false;
        bool layers = false;
        std::string arena;
    };
    auto o = std::make_shared<Opts>();
    add_model_option(*sub, o->model, "model,-m,--model")->required();
    sub->add_flag("--json", o->json, "print JSON instead of text");
    sub->add_flag("--layers", o->layers, "also list every expert tensor (type, shape, bytes per expert, offset)");
    sub->add_option("--arena", o->arena,
                    "also plan an arena of this size (4G, 512M): the slots of each expert size and the share of the "
                    "experts they hold, as epq run and serve would allocate them");
    return [o]() {
        const auto t0 = std::chrono::steady_clock::now();
        const GgufFile file = GgufFile::open(o->model);
        const ExpertIndex idx = ExpertIndex::build(file);
        std::optional<ArenaPlan> plan;
        if (!o->arena.empty()) {
            const auto bytes = parse_byte_size(o->arena);
            if (!bytes) {
                throw Error("--arena expects a size such as 4G or 512M; got '" + o->arena + "'");
            }
            plan = plan_expert_arena(idx, *bytes);
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (o->json) {
            nlohmann::json j = inspect_json(file, idx);
            if (plan) {
                j["arena_plan"] = arena_plan_json(*plan);
            }
            j["seconds"] = seconds;
            std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else {
            std::cout << inspect_text(file, idx, o->layers);
            if (plan) {
                std::cout << arena_plan_text(*plan, idx);
            }
            std::printf("indexed%s in %.3f s\n", plan ? " and planned" : "", seconds);
        }
        return 0;
    };
}

}  // namespace epq::cli
