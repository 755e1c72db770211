// Internal: queries of the current CUDA device for launchers (grid sizing).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_check.hpp"

namespace moekit::cuda {

// Streaming multiprocessors of the current device (cudaGetDevice).
inline int current_device_multiprocessors() {
  int dev = 0, sms = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace moekit::cuda
