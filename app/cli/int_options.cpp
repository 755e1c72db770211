// Checked integer and real options (int_options.hpp).
#include "cli/int_options.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "moekit/core/error.hpp"

namespace moekit::cli {

namespace {

std::string range_message(const std::string& text, const std::string& range, const char* why) {
  return "expected an integer in " + range + ", got " + (text.empty() ? "\"\"" : text) + why;
}

std::string range_str(std::int64_t min, std::int64_t max) {
  return "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

}  // namespace

std::string check_integer(const std::string& text, std::int64_t min, std::int64_t max) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range)
    return range_message(text, range_str(min, max), " (out of range)");
  if (ec != std::errc() || ptr != end || text.empty())
    return range_message(text, range_str(min, max), " (not an integer)");
  if (v < min || v > max) return range_message(text, range_str(min, max), "");
  return {};
}

std::string check_unsigned(const std::string& text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  const std::string range = "[0, 18446744073709551615]";
  if (!text.empty() && text[0] == '-') return range_message(text, range, " (negative)");
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc::result_out_of_range) return range_message(text, range, " (out of range)");
  if (ec != std::errc() || ptr != end || text.empty())
    return range_message(text, range, " (not an integer)");
  return {};
}

CLI::Option* add_seed_option(CLI::App& app, const std::string& name, std::uint64_t& target,
                             const std::string& help) {
  CLI::Option* o = app.add_option(name, target, help);
  o->check(CLI::Validator([](std::string& s) { return check_unsigned(s); },
                          "INT in [0, 2^64-1]"));
  return o;
}

CLI::Option* add_positive_real_option(CLI::App& app, const std::string& name, float& target,
                                      const std::string& help) {
  CLI::Option* o = app.add_option(name, target, help);
  o->check(CLI::Validator(
      [](std::string& s) -> std::string {
        float v = 0;
        const char* end = s.data() + s.size();
        const auto [ptr, ec] = std::from_chars(s.data(), end, v);
        if (ec != std::errc() || ptr != end || !std::isfinite(v) || !(v > 0.0f))
          return "expected a finite real number > 0 (at most 3.4e38), got " + s;
        return {};
      },
      "REAL > 0"));
  return o;
}

std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& flag,
                                             std::int64_t min, std::int64_t max) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if (const std::string bad = check_integer(item, min, max); !bad.empty())
      MOEKIT_FAIL(flag, ": ", bad, " (in the list '", text, "')");
    out.push_back(std::stoll(item));
  }
  return out;
}

}  // namespace moekit::cli
