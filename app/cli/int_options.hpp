// Integer (and positive real) command-line options that reject what does not fit, naming the
// flag: "--tokens: expected an integer in [0, 2147483647], got 99999999999999999999 (out of
// range)", "--seed: ... got -1" (CLI11 alone wraps -1 into 2^64 - 1 for an unsigned target and
// clamps overflow). Parsed with std::from_chars before CLI11 converts the (then valid) text.
// A rejected value is a CLI::ValidationError: main() exits 1 with the message.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace moekit::cli {

// "" when `text` is a decimal integer in [min, max], else the reason.
std::string check_integer(const std::string& text, std::int64_t min, std::int64_t max);
std::string check_unsigned(const std::string& text);  // [0, 2^64 - 1]

// Adds `name` storing into `target` (int, std::int64_t or std::uint64_t) within [min, max].
template <typename T>
CLI::Option* add_integer_option(CLI::App& app, const std::string& name, T& target,
                                const std::string& help, std::int64_t min, std::int64_t max) {
  CLI::Option* o = app.add_option(name, target, help);
  o->check(CLI::Validator(
      [min, max](std::string& s) { return check_integer(s, min, max); },
      "INT in [" + std::to_string(min) + ", " + std::to_string(max) + "]"));
  return o;
}
CLI::Option* add_seed_option(CLI::App& app, const std::string& name, std::uint64_t& target,
                             const std::string& help);
// A finite real > 0.
CLI::Option* add_positive_real_option(CLI::App& app, const std::string& name, float& target,
                                      const std::string& help);

// A comma-separated list of integers in [min, max] ("1,8,64"); `flag` names it in errors
// (moekit::Error). Empty items are skipped.
std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& flag,
                                             std::int64_t min, std::int64_t max);

}  // namespace moekit::cli
