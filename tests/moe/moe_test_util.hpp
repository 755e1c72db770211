// Helpers for the routing / activation / MoE layer / CLI tests: a logged, overridable seed,
// error-message expectations and float64 comparisons.
#pragma once

#include "test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit::reftest {

// Fresh per process (random_device), overridable by env MOEKIT_TEST_SEED.
inline std::uint64_t base_seed() {
  return ::moekit::process_test_seed();
}

// Logs the seed for the current test (reproduce with MOEKIT_TEST_SEED=<seed>).
#define MOEKIT_REF_SEED(var)                                                        \
  const std::uint64_t var = ::moekit::reftest::base_seed();                         \
  SCOPED_TRACE("seed " + std::to_string(var) + " (MOEKIT_TEST_SEED to reproduce)"); \
  ::testing::Test::RecordProperty("seed", std::to_string(var))

// Expects fn() to throw moekit::Error whose message contains every needle.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<const char*> needles) {
  try {
    fn();
  } catch (const moekit::Error& e) {
    const std::string msg = e.what();
    for (const char* n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << "message lacks '" << n << "': " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected moekit::Error, got " << e.what();
    return;
  }
  ADD_FAILURE() << "expected moekit::Error";
}

inline double relative_l2(const float* out, const double* ref, std::int64_t n) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline Tensor f32_tensor(const std::vector<float>& v, Shape shape) {
  Tensor t(DType::kF32, shape);
  EXPECT_EQ(static_cast<std::int64_t>(v.size()), t.numel());
  for (std::size_t i = 0; i < v.size(); ++i) t.ptr<float>()[i] = v[i];
  return t;
}

}  // namespace moekit::reftest
