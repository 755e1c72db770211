#include "core/device_runtime.hpp"

#include <cuda_runtime_api.h>

#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"

namespace moekit::device_runtime {

bool compiled_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error here
    return 0;
  }
  return n;
}

DeviceInfo device_info(int index) {
  cudaDeviceProp prop{};
  MOEKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceInfo info;
  info.index = index;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.global_memory_bytes = prop.totalGlobalMem;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  return info;
}

MemoryInfo memory_info(int device) {
  int previous = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) MOEKIT_CUDA_CHECK(cudaSetDevice(device));
  MemoryInfo info;
  const cudaError_t err = cudaMemGetInfo(&info.free_bytes, &info.total_bytes);
  if (previous != device) (void)cudaSetDevice(previous);
  MOEKIT_CUDA_CHECK(err);
  return info;
}

void* allocate(std::size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  int previous = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) MOEKIT_CUDA_CHECK(cudaSetDevice(device));
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, bytes);
  if (previous != device) (void)cudaSetDevice(previous);
  if (err != cudaSuccess) {
    MOEKIT_FAIL("cudaMalloc of ", bytes, " bytes on cuda:", device, " failed: ", cudaGetErrorString(err));
  }
  return ptr;
}

void release(void* ptr, int) noexcept {
  if (ptr) (void)cudaFree(ptr);
}

void memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind) {
  if (bytes == 0) return;
  cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                     : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                       : cudaMemcpyDeviceToDevice;
  MOEKIT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, k));
}

void synchronize() { MOEKIT_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace moekit::device_runtime
