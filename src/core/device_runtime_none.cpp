#include "core/device_runtime.hpp"

#if !MOEKIT_WITH_CUDA
#include "moekit/core/error.hpp"

namespace moekit::device_runtime {

bool compiled_with_cuda() { return false; }
int device_count() { return 0; }
DeviceInfo device_info(int index) {
  MOEKIT_FAIL("device_info(", index, "): moekit was built without CUDA (MOEKIT_CUDA=OFF)");
}
MemoryInfo memory_info(int device) {
  MOEKIT_FAIL("memory_info(", device, "): moekit was built without CUDA (MOEKIT_CUDA=OFF)");
}
void* allocate(std::size_t bytes, int device) {
  MOEKIT_FAIL("cannot allocate ", bytes, " bytes on cuda:", device,
              ": moekit was built without CUDA (MOEKIT_CUDA=OFF)");
}
void release(void*, int) noexcept {}
void memcpy(void*, const void*, std::size_t, CopyKind) {
  MOEKIT_FAIL("device copy: moekit was built without CUDA (MOEKIT_CUDA=OFF)");
}
void synchronize() {}

}  // namespace moekit::device_runtime
#endif
