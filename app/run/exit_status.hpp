// The exit-code contract of the `moekit` tool (README, `moekit --help`), and the error type that
// selects the environment code. main() (app/cli/main.cpp) maps what a command throws:
//   0  success
//   1  bad input or a failed check: moekit::Error, CLI11 conversion / validation errors (the
//      message names the argument or the check)
//   2  usage: unknown subcommand or flag (named, with the closest valid one), a missing argument
//   3  environment: no GPU where one is required, a build without CUDA, out of memory
//      (EnvironmentError, std::bad_alloc)
//   4  internal error: an exception moekit did not expect (a bug: please report it)
//   130 / 143 / 129  interrupted by SIGINT / SIGTERM / SIGHUP: partial outputs removed; the
//      process exits with this code rather than dying of the signal
#pragma once

#include "moekit/core/error.hpp"

namespace moekit::app {

enum ExitCode : int {
  kExitSuccess = 0,
  kExitBadInput = 1,
  kExitUsage = 2,
  kExitEnvironment = 3,
  kExitInternal = 4,
};

// What the machine or the build cannot do, as opposed to what the user asked wrongly: exit 3.
class EnvironmentError : public Error {
 public:
  using Error::Error;
};

// One paragraph for `moekit --help`.
inline constexpr const char* kExitCodeHelp =
    "Exit codes: 0 success; 1 bad input or a failed check (the message names the argument or the "
    "check); 2 usage error (unknown subcommand or flag, missing argument); 3 environment (no GPU "
    "where one is required, a build without CUDA, out of memory); 4 internal error (a bug); "
    "130/143 interrupted by SIGINT/SIGTERM (partial outputs removed).";

}  // namespace moekit::app
