#include "commands.h"

#include "sim/cache_sim.h"
#include "sim/routing_stats.h"
#include "sim/sim_report.h"
#include "arena/trace.h"
#include "util/error.h"

#include <cstdio>
#include <fstream>
#include <iostream>

namespace epq::cli {

namespace {

struct SimulateOpts {
    std::string trace, arena, json;
};

int run_simulate(const SimulateOpts & o, const std::vector<ArenaSizeArg> & args, std::ofstream & json_out) {
    const Trace t = read_trace(o.trace);
    if (t.records.empty()) {
        throw Error("the trace '" + o.trace + "' has no records; record a run that generates tokens");
    }
    const std::vector<uint64_t> sizes =
        args.empty() ? default_arena_sizes(t.header) : resolve_arena_sizes(t.header, args);
    const std::vector<SimResult> results = simulate_all(t, sizes);
    const uint64_t steps = count_steps(t);
    std::cout << sim_table(t.header, steps, results);
    nlohmann::json routing;
    std::cout << "\n" << routing_report(t, t.header.arch, routing);
    if (json_out.is_open()) {
        nlohmann::json j = sim_json(t.header, steps, results);
        j["routing"] = routing;
        json_out << j.dump(2) << "\n";
        json_out.close();
        if (!json_out) {
            throw Error("cannot write '" + o.json + "'; check that its directory exists and is writable");
        }
    }
    return 0;
}

}  // namespace

Handler add_simulate(CLI::App & app) {
    auto * sub = app.add_subcommand(
        "simulate", "replay a routing trace against arenas of several sizes: lru, lfu and the optimal belady");
    auto o = std::make_shared<SimulateOpts>();
    sub->add_option("trace", o->trace, "routing trace file ('epq-trace' 1 or 2) recorded by a run's --trace")
        ->type_name("TRACE")
        ->required();
    sub->add_option("--arena", o->arena,
                    "arena sizes, comma-separated: bytes (2G, 6GiB) or shares of the model's expert bytes "
                    "(12%) (default: the minimum, 5%, 12%, 25%, 50% and 75%)")
        ->type_name("SIZES");
    sub->add_option("--json", o->json, "also write the results as JSON to this file")->type_name("FILE");
    return [o]() {
        // Sizes first: a typo should not wait for a large trace to load.
        std::vector<ArenaSizeArg> sizes;
        if (!o->arena.empty()) {
            sizes = parse_arena_sizes(o->arena);
        }
        // And the JSON file: a bad path should not wait for the simulation either.
        std::ofstream json_out;
        if (!o->json.empty()) {
            json_out.open(o->json);
            if (!json_out) {
                throw Error("cannot create '" + o->json + "'; check that its directory exists and is writable");
            }
        }
        try {
            return run_simulate(*o, sizes, json_out);
        } catch (...) {
            if (json_out.is_open()) {
                json_out.close();
                std::remove(o->json.c_str());  // no empty results file left behind
            }
            throw;
        }
    };
}

}  // namespace epq::cli
