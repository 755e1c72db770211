// Shared helpers for GPU tests: skip visibly when there is no CUDA device.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/device_runtime.hpp"

#define MOEKIT_REQUIRE_GPU()                                                     \
  do {                                                                           \
    if (::moekit::device_runtime::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace moekit::test {

// Environment variable `name` = `value` for the scope (the kernels' measurement overrides),
// restored after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace moekit::test
