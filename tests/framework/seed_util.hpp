// Test seeds for the framework / permute / oracle / weights tests: fresh per run (random_device),
// overridable by env MOEKIT_TEST_SEED, always logged through SCOPED_TRACE and RecordProperty.
#pragma once

#include "test_seed.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <initializer_list>
#include <string>

#include "moekit/core/error.hpp"

namespace moekit::testing {

inline std::uint64_t test_seed() {
  return ::moekit::process_test_seed();
}

// Logs the seed for the current test (reproduce with MOEKIT_TEST_SEED=<seed>).
#define MOEKIT_LOG_SEED(seed)                                                        \
  SCOPED_TRACE("seed " + std::to_string(seed) + " (MOEKIT_TEST_SEED to reproduce)"); \
  ::testing::Test::RecordProperty("seed", std::to_string(seed))

// Expects `fn` to throw moekit::Error whose message contains every needle.
template <typename Fn>
std::string expect_error(Fn&& fn, std::initializer_list<const char*> needles) {
  try {
    fn();
  } catch (const moekit::Error& e) {
    const std::string msg = e.what();
    for (const char* n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected moekit::Error";
  return {};
}

}  // namespace moekit::testing
