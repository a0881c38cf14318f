// The list of replacement policies: a new policy is its file and one line here.
#include "arena/policy_factories.h"

#include "util/error.h"

namespace epq {

const std::vector<PolicyInfo> & replacement_policies() {
    static const std::vector<PolicyInfo> list = {
        {"lru", "the least recently used expert", false, make_lru_policy},
        {"lfu", "the least used expert lately (use counts decay with a half-life)", false, make_lfu_policy},
        {"2q", "2Q: one-off experts pass through a FIFO, experts used again are kept least recently used first", false,
         make_two_queue_policy},
        {"forecast", "the expert expected to be needed farthest ahead (layer order x decayed use counts)", false,
         make_forecast_policy},
        {"belady", "the expert next used farthest in the future: the optimum, simulator only", true,
         make_belady_policy},
    };
    return list;
}

const PolicyInfo & find_policy(const std::string & name) {
    for (const PolicyInfo & p : replacement_policies()) {
        if (name == p.name) {
            return p;
        }
    }
    throw Error("unknown eviction policy '" + name + "'; use " + run_policy_names() +
                " (belady, the optimal one, needs the future: only epq simulate has it)");
}

std::string run_policy_names() {
    std::string names;
    for (const PolicyInfo & p : replacement_policies()) {
        if (!p.needs_future) {
            names += (names.empty() ? "" : ", ") + std::string(p.name);
        }
    }
    return names;
}

std::string parse_run_policy(const std::string & name) {
    const PolicyInfo & p = find_policy(name);
    if (p.needs_future) {
        throw Error("the " + name +
                    " eviction policy needs to know future expert use, which only epq simulate has; use " +
                    run_policy_names());
    }
    return p.name;
}

std::unique_ptr<ReplacementPolicy> make_policy(const std::string & name, const PolicyContext & ctx) {
    return find_policy(name).make(ctx);
}

}  // namespace epq
