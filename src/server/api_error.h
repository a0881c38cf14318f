// An error a route answers with: OpenAI's shape {"error":{"code","message","type"}}.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace epq::server {

struct ApiError {
    int status = 400;
    std::string type = "invalid_request_error";
    std::string message;
    nlohmann::json extra = nlohmann::json::object();  // more fields inside "error"

    nlohmann::json body() const {
        nlohmann::json e = {{"code", status}, {"message", message}, {"type", type}};
        for (auto it = extra.begin(); it != extra.end(); ++it) {
            e[it.key()] = it.value();
        }
        return {{"error", e}};
    }
};

inline ApiError bad_request(std::string message) {
    return {400, "invalid_request_error", std::move(message), nlohmann::json::object()};
}

}  // namespace epq::server
