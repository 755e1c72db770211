// Internal: queries of the current CUDA device for launchers (grid sizing, shared-memory limits).
// Cached per device (a process may drive several GPUs, e.g. one per expert-parallel rank thread),
// so a launch is host work only after the first one on a device.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>

#include "cuda/runtime/cuda_check.hpp"

namespace moekit::cuda {

namespace detail {
// attr of the current device (cudaGetDevice), cached per (attribute slot, device).
template <int kSlot>
inline int cached_current_device_attribute(cudaDeviceAttr attr) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0: not queried yet (both values are > 0)
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  const bool cached = dev >= 0 && dev < kMaxDevices;
  if (cached) {
    if (const int v = cache[dev].load(std::memory_order_relaxed); v != 0) return v;
  }
  int v = 0;
  MOEKIT_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, dev));
  if (cached) cache[dev].store(v, std::memory_order_relaxed);
  return v;
}
}  // namespace detail

// Streaming multiprocessors of the current device.
inline int current_device_multiprocessors() {
  return detail::cached_current_device_attribute<0>(cudaDevAttrMultiProcessorCount);
}

// Largest dynamic shared memory one block may opt in to on the current device (bytes).
inline int current_device_max_smem_optin() {
  return detail::cached_current_device_attribute<1>(cudaDevAttrMaxSharedMemoryPerBlockOptin);
}

// Shared memory of one SM, and what the hardware reserves of it per resident block (bytes).
inline int current_device_smem_per_sm() {
  return detail::cached_current_device_attribute<2>(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
}
inline int current_device_reserved_smem_per_block() {
  return detail::cached_current_device_attribute<3>(cudaDevAttrReservedSharedMemoryPerBlock);
}

}  // namespace moekit::cuda
