// The one exception type epq throws for problems a user can act on. Its message is a single
// line that names the problem and, where there is one, what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace epq {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string & msg) : std::runtime_error(msg) {}
};

}  // namespace epq
