#include "sim/sim_report.h"

#include "util/byte_size.h"
#include "util/error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace epq {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string trim(const std::string & s) {
    const size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) {
        return "";
    }
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

double gib_per_step(const SimResult & r, uint64_t steps) {
    return steps ? static_cast<double>(r.bytes_missed) / kGiB / static_cast<double>(steps) : 0.0;
}

const SimResult * find_result(const std::vector<SimResult> & rs, uint64_t bytes, const std::string & policy) {
    for (const auto & r : rs) {
        if (r.arena_bytes == bytes && r.policy == policy) {
            return &r;
        }
    }
    return nullptr;
}

}  // namespace

std::vector<ArenaSizeArg> parse_arena_sizes(const std::string & text) {
    std::vector<ArenaSizeArg> sizes;
    size_t pos = 0;
    while (true) {
        const size_t comma = text.find(',', pos);
        const std::string item = trim(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
        ArenaSizeArg arg;
        if (!item.empty() && item.back() == '%') {
            char * end = nullptr;
            const std::string number = item.substr(0, item.size() - 1);
            arg.share = std::strtod(number.c_str(), &end) / 100.0;
            if (number.empty() || end != number.c_str() + number.size() || !(arg.share > 0) || arg.share > 1) {
                throw Error("--arena: '" + item + "' is not a share of the expert bytes between 0% and 100%");
            }
        } else {
            const auto bytes = parse_byte_size(item);
            if (!bytes) {
                throw Error("--arena: '" + item +
                            "' is not a byte size; give sizes like 4G, 512M or 6GiB, or shares of the model's "
                            "expert bytes like 12%, separated by commas");
            }
            arg.bytes = *bytes;
        }
        sizes.push_back(arg);
        if (comma == std::string::npos) {
            return sizes;
        }
        pos = comma + 1;
    }
}

namespace {

uint64_t expert_bytes(const TraceHeader & h) {
    uint64_t total = 0;
    for (const auto & c : h.classes) {
        total += c.slot_bytes * c.total_experts;
    }
    return total;
}

uint64_t min_arena_bytes(const TraceHeader & h) {
    uint64_t largest = 0;
    for (const auto & c : h.classes) {
        largest = std::max(largest, c.slot_bytes);
    }
    return largest * h.n_expert_used;
}

}  // namespace

std::vector<uint64_t> resolve_arena_sizes(const TraceHeader & h, const std::vector<ArenaSizeArg> & args) {
    const uint64_t total = expert_bytes(h), min_bytes = min_arena_bytes(h);
    std::vector<uint64_t> sizes;
    for (const ArenaSizeArg & a : args) {
        uint64_t s = a.bytes;
        if (a.share > 0) {
            s = std::max(min_bytes, static_cast<uint64_t>(a.share * static_cast<double>(total)));
        }
        if (std::find(sizes.begin(), sizes.end(), s) == sizes.end()) {
            sizes.push_back(s);
        }
    }
    return sizes;
}

std::vector<uint64_t> default_arena_sizes(const TraceHeader & h) {
    std::vector<ArenaSizeArg> args{{min_arena_bytes(h), 0}};
    for (double share : {0.05, 0.12, 0.25, 0.50, 0.75}) {
        args.push_back({0, share});
    }
    return resolve_arena_sizes(h, args);
}

std::string sim_table(const TraceHeader & h, uint64_t steps, const std::vector<SimResult> & results) {
    std::vector<uint64_t> sizes;
    std::vector<std::string> policies;  // columns, in the order the results give them
    for (const auto & r : results) {
        if (std::find(sizes.begin(), sizes.end(), r.arena_bytes) == sizes.end()) {
            sizes.push_back(r.arena_bytes);
        }
        if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) {
            policies.push_back(r.policy);
        }
    }
    std::string out = "trace of " + h.model + ": " + std::to_string(steps) + " steps, " +
                      std::to_string(results.empty() ? 0 : results.front().accesses) +
                      " expert uses (distinct experts per step and layer)\n";
    char cell[64];
    const double experts = static_cast<double>(expert_bytes(h));
    auto row_head = [&](uint64_t bytes) {
        std::snprintf(
            cell, sizeof cell, "%12s %8s", format_bytes(bytes).c_str(),
            format_number("%.1f%%", experts > 0 ? 100.0 * static_cast<double>(bytes) / experts : 0.0).c_str());
        return std::string(cell);
    };
    std::vector<int> width;  // of each policy's column
    for (const auto & p : policies) {
        width.push_back(std::max(14, static_cast<int>(p.size())));
    }
    auto header_row = [&]() {
        std::snprintf(cell, sizeof cell, "%12s %8s", "arena", "experts");
        std::string line = cell;
        for (size_t i = 0; i < policies.size(); ++i) {
            std::snprintf(cell, sizeof cell, " %*s", width[i], policies[i].c_str());
            line += cell;
        }
        return line + "\n";
    };
    // A "+prefetch" column is a policy as a run with prediction uses it: its hit rate counts a use
    // of a guessed read as a hit (the run waits less for it), and its GiB per step adds the
    // guesses' reads.
    out += "hit rate, and its fraction of belady's (the optimum, which knows the future)\n" + header_row();
    for (uint64_t bytes : sizes) {
        const SimResult * opt = find_result(results, bytes, "belady");
        std::string line = row_head(bytes);
        for (size_t i = 0; i < policies.size(); ++i) {
            const SimResult * r = find_result(results, bytes, policies[i]);
            std::string text = "-";
            if (r) {
                text = format_number("%.1f%%", 100.0 * r->hit_rate);
                if (opt && opt->hit_rate > 0 && r != opt) {
                    text += format_number(" %.2fx", r->hit_rate / opt->hit_rate);
                }
            }
            std::snprintf(cell, sizeof cell, " %*s", width[i], text.c_str());
            line += cell;
        }
        out += line + "\n";
    }
    out += "GiB read per step (the misses; with prefetch, the guesses' reads too)\n" + header_row();
    for (uint64_t bytes : sizes) {
        std::string line = row_head(bytes);
        for (size_t i = 0; i < policies.size(); ++i) {
            const SimResult * r = find_result(results, bytes, policies[i]);
            const double read = r && steps ? gib_per_step(*r, steps) + static_cast<double>(r->speculative_bytes) /
                                                                           kGiB / static_cast<double>(steps)
                                           : 0.0;
            std::snprintf(cell, sizeof cell, " %*s", width[i], r ? format_number("%.3f", read).c_str() : "-");
            line += cell;
        }
        out += line + "\n";
    }
    return out;
}

nlohmann::json sim_json(const TraceHeader & h, uint64_t steps, const std::vector<SimResult> & results) {
    nlohmann::json j;
    j["model"] = h.model;
    j["steps"] = steps;
    j["results"] = nlohmann::json::array();
    for (const auto & r : results) {
        j["results"].push_back({{"policy", r.policy},
                                {"arena_bytes", r.arena_bytes},
                                {"accesses", r.accesses},
                                {"hits", r.hits},
                                {"misses", r.misses},
                                {"bytes_missed", r.bytes_missed},
                                {"hit_rate", r.hit_rate},
                                {"speculative_reads", r.speculative_reads},
                                {"speculative_bytes", r.speculative_bytes},
                                {"speculative_used", r.speculative_used},
                                {"gib_missed_per_step", gib_per_step(r, steps)}});
    }
    return j;
}

}  // namespace epq
