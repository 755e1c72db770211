// The one parser of moekit's environment switches (every MOEKIT_* variable; docs/tuning.md lists
// them). Unset or empty means "not given"; any other value must be one of the allowed ones, or the
// call throws moekit::Error naming the variable, the allowed values and the value given. Values are
// read at each call (decisions are taken once per layer call, on the host).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moekit::env {

// The raw value of `name`, or nullopt when unset or empty.
std::optional<std::string> value(const char* name);

// One of `allowed` (exact spelling), or nullopt when unset / empty.
std::optional<std::string> choice(const char* name, const std::vector<std::string>& allowed);

// A decimal integer in [lo, hi] (no sign for lo >= 0, no trailing characters), or nullopt.
std::optional<std::int64_t> integer(const char* name, std::int64_t lo, std::int64_t hi);

// A decimal number in (lo, hi] (strtod syntax, finite, no trailing characters), or nullopt.
std::optional<double> real(const char* name, double lo, double hi);

}  // namespace moekit::env
