#include "util/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace epq {

std::optional<uint64_t> parse_byte_size(const std::string & text) {
    size_t i = 0;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
        ++i;
    }
    if (i == 0) {
        return std::nullopt;
    }
    char * end = nullptr;
    const std::string number = text.substr(0, i);
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || !std::isfinite(value) || value < 0) {
        return std::nullopt;
    }
    std::string suffix;
    for (size_t j = i; j < text.size(); ++j) {
        suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(text[j])));
    }
    double mult = 1;
    if (suffix.empty() || suffix == "B") {
        mult = 1;
    } else {
        const char unit = suffix[0];
        const std::string rest = suffix.substr(1);
        if (!(rest.empty() || rest == "B" || rest == "IB")) {
            return std::nullopt;
        }
        switch (unit) {
            case 'K': mult = 1024.0; break;
            case 'M': mult = 1024.0 * 1024; break;
            case 'G': mult = 1024.0 * 1024 * 1024; break;
            case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
            default: return std::nullopt;
        }
    }
    const double bytes = value * mult;
    if (bytes >= 18446744073709551615.0) {
        return std::nullopt;
    }
    return static_cast<uint64_t>(std::llround(bytes));
}

std::string format_bytes(uint64_t bytes) {
    static const char * units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    if (u == 0) {
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    } else {
        std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
    }
    return buf;
}

std::string format_number(const char * printf_format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, printf_format, v);
    return buf;
}

}  // namespace epq
