// Renders an ExpertIndex for people (text) and for programs (JSON).
#pragma once

#include "gguf/expert_index.h"

#include <nlohmann/json.hpp>
#include <string>

namespace epq {

std::string inspect_text(const GgufFile & file, const ExpertIndex & idx, bool per_layer);
nlohmann::json inspect_json(const GgufFile & file, const ExpertIndex & idx);

// "0-19, 21, 23-25"
std::string format_ranges(const std::vector<int> & sorted);

}  // namespace epq
