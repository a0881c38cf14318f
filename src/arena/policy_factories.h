// The factory of each replacement policy, one per policy_NAME.cpp; listed in policy_registry.cpp.
#pragma once

#include "arena/replacement_policy.h"

namespace epq {

std::unique_ptr<ReplacementPolicy> make_lru_policy(const PolicyContext & ctx);
std::unique_ptr<ReplacementPolicy> make_lfu_policy(const PolicyContext & ctx);
std::unique_ptr<ReplacementPolicy> make_two_queue_policy(const PolicyContext & ctx);
std::unique_ptr<ReplacementPolicy> make_forecast_policy(const PolicyContext & ctx);
std::unique_ptr<ReplacementPolicy> make_belady_policy(const PolicyContext & ctx);

}  // namespace epq
