// The one test seed of a test process: fresh per run (std::random_device), overridable by env
// MOEKIT_TEST_SEED; every suite logs it (SCOPED_TRACE + RecordProperty) so a failure reproduces.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>

namespace moekit {

inline std::uint64_t process_test_seed() {
  static const std::uint64_t seed = [] {
    if (const char* env = std::getenv("MOEKIT_TEST_SEED"); env && *env)
      return static_cast<std::uint64_t>(std::strtoull(env, nullptr, 0));
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

}  // namespace moekit
