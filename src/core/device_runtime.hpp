// Internal: the few CUDA runtime calls host code needs, behind a CUDA-free interface.
// Implemented in src/cuda/runtime/device_runtime.cpp, or by src/core/device_runtime_none.cpp
// (throwing "built without CUDA") when the CUDA backend is off.
#pragma once

#include <cstddef>
#include <string>

namespace moekit::device_runtime {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  int multiprocessors = 0;
  std::size_t global_memory_bytes = 0;
  std::size_t l2_bytes = 0;
};

bool compiled_with_cuda();
int device_count();  // 0 when built without CUDA or when no driver/device is present
DeviceInfo device_info(int index);
struct MemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};
MemoryInfo memory_info(int device);  // cudaMemGetInfo on `device`
void* allocate(std::size_t bytes, int device);
void release(void* ptr, int device) noexcept;
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
void memcpy(void* dst, const void* src, std::size_t bytes, CopyKind kind);
void synchronize();

}  // namespace moekit::device_runtime
