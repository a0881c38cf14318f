#include "arena/routing_script.h"

#include "util/error.h"

#include <map>
#include <string>
#include <unordered_map>

namespace epq {

RoutingScript::RoutingScript(const Trace & trace, size_t n_layers, uint32_t n_expert, uint32_t n_expert_used)
    : n_layers_(n_layers), k_(n_expert_used) {
    const TraceHeader & h = trace.header;
    if (h.layers.size() != n_layers || h.n_expert != n_expert || h.n_expert_used != n_expert_used) {
        throw Error("the routing trace has " + std::to_string(h.layers.size()) + " MoE layers of " +
                    std::to_string(h.n_expert) + " experts (top-" + std::to_string(h.n_expert_used) + "), the model " +
                    std::to_string(n_layers) + " of " + std::to_string(n_expert) + " (top-" +
                    std::to_string(n_expert_used) +
                    "): use a trace of a model of this shape (epq synth has presets "
                    "of real models' shapes)");
    }
    std::unordered_map<uint32_t, size_t> position;  // layer number -> MoE layer position
    for (size_t i = 0; i < h.layers.size(); ++i) {
        position[h.layers[i].first] = i;
    }
    // step -> token -> [layer][k]; a step of one token is a decode step.
    std::map<uint64_t, std::map<uint64_t, std::vector<uint32_t>>> steps;
    for (const TraceRecord & r : trace.records) {
        auto & row = steps[r.step][r.token];
        row.resize(stride(), n_expert);  // n_expert marks a layer not seen yet
        const auto at = position.find(r.layer);
        if (at == position.end() || r.experts.size() != k_) {
            throw Error("routing trace: a record of step " + std::to_string(r.step) + " has layer " +
                        std::to_string(r.layer) + " with " + std::to_string(r.experts.size()) + " experts");
        }
        std::copy(r.experts.begin(), r.experts.end(), row.begin() + static_cast<std::ptrdiff_t>(at->second * k_));
    }
    for (auto & [step, tokens] : steps) {
        // A prompt's last layer is computed for the rows an output needs only (llama.cpp skips
        // the others), so most tokens lack it: they take the experts of the one that has it.
        std::vector<uint32_t> known(stride(), n_expert);
        for (const auto & [token, row] : tokens) {
            for (size_t i = 0; i < row.size(); ++i) {
                known[i] = row[i] < n_expert ? row[i] : known[i];
            }
        }
        for (auto & [token, row] : tokens) {
            for (size_t i = 0; i < row.size(); ++i) {
                row[i] = row[i] < n_expert ? row[i] : known[i];
                if (row[i] >= n_expert) {
                    throw Error("routing trace: step " + std::to_string(step) + " has no token with layer " +
                                std::to_string(h.layers[i / k_].first) + " (a trace cut short?)");
                }
            }
            std::vector<uint32_t> & into = tokens.size() == 1 ? decode_ : prompt_;
            into.insert(into.end(), row.begin(), row.end());
        }
    }
    if (decode_.empty()) {
        throw Error("the routing trace has no decode steps to time");
    }
    if (prompt_.empty()) {
        prompt_ = decode_;
    }
}

const uint32_t * RoutingScript::prompt(size_t li, uint64_t i) const {
    return prompt_.data() + (i % prompt_tokens()) * stride() + li * k_;
}

const uint32_t * RoutingScript::decode(size_t li, uint64_t i) const {
    return decode_.data() + (i % decode_steps()) * stride() + li * k_;
}

}  // namespace epq
