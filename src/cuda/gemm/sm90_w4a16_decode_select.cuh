// Which kernel the W4A16 launcher (sm90_w4a16_grouped_gemm.cu) runs for W4Tile::kDecode8: a
// process-wide switch for tests and benchmarks that compare the two implementations on the
// public API (host-only declarations; includable from C++ and CUDA translation units).
#pragma once

namespace moekit::gemm::sm90_w4a16 {

enum class Decode8Kernel : int {
  kAuto = 0,          // the library's choice (kDecode8BulkByDefault in the launcher)
  kRegisterRing = 1,  // sm90_w4a16_decode_gemm.cuh (v4/v5)
  kBulkRing = 2,      // sm90_w4a16_bulk_decode_gemm.cuh (register ring if w_scales misaligned)
};

// Not synchronized with launches in flight on other threads: set it between launches.
void set_decode8_kernel(Decode8Kernel kernel);
Decode8Kernel decode8_kernel();

// Sets the switch for a scope, restoring the previous value.
class ScopedDecode8Kernel {
 public:
  explicit ScopedDecode8Kernel(Decode8Kernel kernel) : previous_(decode8_kernel()) {
    set_decode8_kernel(kernel);
  }
  ~ScopedDecode8Kernel() { set_decode8_kernel(previous_); }
  ScopedDecode8Kernel(const ScopedDecode8Kernel&) = delete;
  ScopedDecode8Kernel& operator=(const ScopedDecode8Kernel&) = delete;

 private:
  Decode8Kernel previous_;
};

}  // namespace moekit::gemm::sm90_w4a16
