// Shared helpers for GPU tests: skip visibly when there is no CUDA device.
#pragma once

#include <gtest/gtest.h>

#include "core/device_runtime.hpp"

#define MOEKIT_REQUIRE_GPU()                                                     \
  do {                                                                           \
    if (::moekit::device_runtime::device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)
