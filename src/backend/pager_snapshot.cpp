#include "backend/pager_snapshot.h"

namespace epq {

namespace {

double ratio(double a, double b) {
    return b > 0 ? a / b : 0.0;
}

}  // namespace

nlohmann::json prediction_json(const PredictionCounts & c) {
    return nlohmann::json{{"guesses", c.predictions},
                          {"guessed", c.guessed},
                          {"selected", c.selected},
                          {"correct", c.correct},
                          {"precision", c.precision()},
                          {"recall", c.recall()},
                          {"speculative_reads", c.spec_reads},
                          {"speculative_bytes", c.spec_bytes},
                          {"useful_reads", c.useful_reads},
                          {"useful_bytes", c.useful_bytes},
                          {"wasted_bytes", c.wasted_bytes}};
}

nlohmann::json PagerSnapshot::to_json() const {
    nlohmann::json j;
    j["arena_bytes"] = arena_bytes;
    j["policy"] = policy;
    j["expert_lookups"] = expert_lookups;
    j["hits"] = hits;
    j["misses"] = misses;
    j["demand_misses"] = demand_misses;
    j["speculative_reads"] = speculative_reads;
    j["readahead_reads"] = readahead_reads;  // of them, read ahead for prompt ubatches
    j["tokens"] = tokens;
    j["readahead_used"] = readahead_used;  // of those, selected by the next layer
    j["speculative_bytes"] = speculative_bytes;
    j["evictions"] = evictions;
    j["hit_rate"] = ratio(double(hits), double(expert_lookups));
    j["bytes_read"] = bytes_read;
    j["read_requests"] = read_requests;
    j["read_bandwidth_bytes_per_second"] = ratio(double(bytes_read), read_wall_seconds);
    j["read_seconds"] = read_wall_seconds;
    // What reading costs the CPU that the matmuls need: read threads' CPU time per GiB read.
    j["read_cpu_seconds"] = read_cpu_seconds;
    j["read_cpu_seconds_per_gib"] = ratio(read_cpu_seconds, double(bytes_read) / double(1ull << 30));
    j["read_wait_seconds"] = wait_seconds;
    j["decode_batch_max_tokens"] = decode_batch_max;
    j["decode_step_tokens"] = decode_tokens;
    j["decode_step_seconds"] = decode_seconds;
    j["decode_step_read_wait_seconds"] = decode_wait_seconds;
    j["decode_steps"] = decode_steps;
    j["decode_step_lookups"] = decode_lookups;
    j["decode_step_demand_misses"] = decode_demand_misses;
    j["decode_step_missed_expert_bytes"] = decode_missed_bytes;
    j["expert_compute_seconds"] = compute_seconds;
    j["direct_io"] = direct_io;
    j["missed_expert_bytes"] = missed_expert_bytes;
    j["expert_chains"] = chains;
    j["rereads_within_batch"] = rereads;
    j["whole_layer_chains"] = whole_layer_chains;           // stock's own nodes over the slots, no gather
    j["solo_expert_nodes"] = solo_experts;                  // experts given their own node to get ggml's kernel choice
    j["repacked_matrices_per_expert"] = repacked_matrices;  // summed over layers; 0 with -nr
    j["pager_scratch_bytes"] = scratch_bytes;               // besides the arena, at its peak
    j["repack_seconds"] = repack_seconds;                   // on the read threads, after the reads
    j["repacked_experts_file"] = repacked_file;             // read ready-repacked from it; "" when none
    nlohmann::json pf = prediction_json(prefetch);
    pf["mode"] = prefetch_mode_name(prefetch_mode);
    pf["state"] = prefetch_state;
    pf["wait_seconds"] = prefetch_wait_seconds;
    pf["per_layer"] = nlohmann::json::array();
    for (const auto & c : prefetch_layers) {
        pf["per_layer"].push_back(prediction_json(c));
    }
    j["prefetch"] = pf;
    return j;
}

}  // namespace epq
