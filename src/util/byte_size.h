// Numbers for people: byte counts in both directions ("4G", "512M", "1.5GiB" <-> uint64_t) and
// table cells.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace epq {

// Parses sizes with an optional K/M/G/T suffix (powers of 1024; "B", "iB" allowed).
// Returns nullopt for anything that is not a non-negative size.
std::optional<uint64_t> parse_byte_size(const std::string & text);

// "1.50 GiB", "12.0 MiB", "512 B" — for people, never parsed back.
std::string format_bytes(uint64_t bytes);

// One number through a printf format ("%.1f%%", "%.2fx"): the tables' cells.
std::string format_number(const char * printf_format, double v);

}  // namespace epq
