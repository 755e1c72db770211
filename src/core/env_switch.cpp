// moekit::env (env_switch.hpp).
#include "core/env_switch.hpp"

#include <cmath>
#include <cstdlib>

#include "moekit/core/error.hpp"

namespace moekit::env {

std::optional<std::string> value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::string> choice(const char* name, const std::vector<std::string>& allowed) {
  const std::optional<std::string> v = value(name);
  if (!v) return std::nullopt;
  std::string list;
  for (const std::string& a : allowed) {
    if (*v == a) return v;
    list += (list.empty() ? "" : " | ") + a;
  }
  throw_arg_error("environment", name, "unset or one of " + list, *v);
}

std::optional<std::int64_t> integer(const char* name, std::int64_t lo, std::int64_t hi) {
  const std::optional<std::string> v = value(name);
  if (!v) return std::nullopt;
  const std::string expected =
      ::moekit::detail::concat("unset or an integer in [", lo, ", ", hi, "]");
  const std::string& s = *v;
  std::size_t i = s[0] == '-' ? 1 : 0;
  bool ok = i < s.size() && s.size() - i <= 18;
  for (std::size_t j = i; ok && j < s.size(); ++j) ok = s[j] >= '0' && s[j] <= '9';
  if (!ok) throw_arg_error("environment", name, expected, s);
  const std::int64_t x = std::stoll(s);
  if (x < lo || x > hi) throw_arg_error("environment", name, expected, s);
  return x;
}

std::optional<double> real(const char* name, double lo, double hi) {
  const std::optional<std::string> v = value(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !std::isfinite(x) || x <= lo || x > hi)
    throw_arg_error("environment", name,
                    ::moekit::detail::concat("unset or a number in (", lo, ", ", hi, "]"), *v);
  return x;
}

}  // namespace moekit::env
