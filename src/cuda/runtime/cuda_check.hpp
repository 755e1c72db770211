// Internal: CUDA error checking for launchers. Every runtime call and every launch is checked.
#pragma once

#include <cuda_runtime_api.h>

#include "moekit/core/error.hpp"

#define MOEKIT_CUDA_CHECK(expr)                                                             \
  do {                                                                                      \
    cudaError_t moekit_err_ = (expr);                                                       \
    if (moekit_err_ != cudaSuccess)                                                         \
      MOEKIT_FAIL(#expr, " failed: ", cudaGetErrorName(moekit_err_), " (",                 \
                  cudaGetErrorString(moekit_err_), ") at ", __FILE__, ":", __LINE__);      \
  } while (0)

// After a <<<>>> launch: catches configuration errors without synchronizing (graph-capture safe).
#define MOEKIT_CUDA_CHECK_LAUNCH() MOEKIT_CUDA_CHECK(cudaGetLastError())
