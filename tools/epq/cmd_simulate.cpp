#include "commands.h"

#include "sim/cache_sim.h"
#include "sim/sim_report.h"
#include "sim/trace.h"
#include "util/error.h"

#include <cstdio>
#include <fstream>
#include <iostream>

namespace epq::cli {

namespace {

struct SimulateOpts {
    std::string trace, arena, json;
};

int run_simulate(const SimulateOpts & o, std::vector<uint64_t> sizes, std::ofstream & json_out) {
    const Trace t = read_trace(o.trace);
    if (t.records.empty()) {
        throw Error("the trace '" + o.trace + "' has no records; record a run that generates tokens");
    }
    if (sizes.empty()) {
        sizes = default_arena_sizes(t.header);
    }
    const std::vector<SimResult> results = simulate_all(t, sizes);
    const uint64_t steps = count_steps(t);
    std::cout << sim_table(t.header, steps, results);
    if (json_out.is_open()) {
        json_out << sim_json(t.header, steps, results).dump(2) << "\n";
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
    sub->add_option("trace", o->trace, "routing trace file ('epq-trace 1') recorded by a run")
        ->type_name("TRACE")
        ->required();
    sub->add_option("--arena", o->arena,
                    "arena sizes, comma-separated, e.g. 2G,4G,6GiB (default: 25%, 50% and 75% of the model's "
                    "expert bytes)")
        ->type_name("SIZES");
    sub->add_option("--json", o->json, "also write the results as JSON to this file")->type_name("FILE");
    return [o]() {
        // Sizes first: a typo should not wait for a large trace to load.
        std::vector<uint64_t> sizes;
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
