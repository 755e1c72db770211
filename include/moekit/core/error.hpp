// moekit::Error and the argument-checking helpers every public entry point uses.
// A message always names the argument, the expected value and the actual value.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace moekit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

// Throws moekit::Error("<where>: <argument>: expected <expected>, got <actual>").
template <typename Expected, typename Actual>
[[noreturn]] void throw_arg_error(const char* where, const std::string& argument,
                                  const Expected& expected, const Actual& actual) {
  throw Error(detail::concat(where, ": ", argument, ": expected ", expected, ", got ", actual));
}

}  // namespace moekit

// MOEKIT_CHECK_ARG(cond, "argument name", expected, actual): validation of user input.
#define MOEKIT_CHECK_ARG(cond, argument, expected, actual)                          \
  do {                                                                              \
    if (!(cond)) ::moekit::throw_arg_error(__func__, (argument), (expected), (actual)); \
  } while (0)

// MOEKIT_FAIL(parts...): throw moekit::Error with the streamed parts.
#define MOEKIT_FAIL(...) throw ::moekit::Error(::moekit::detail::concat(__VA_ARGS__))

// MOEKIT_CHECK(cond, parts...): internal invariant / generic validation with a message.
#define MOEKIT_CHECK(cond, ...)                  \
  do {                                           \
    if (!(cond)) MOEKIT_FAIL(__VA_ARGS__);       \
  } while (0)
