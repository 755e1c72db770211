// Builds without the CUDA backend: the W4A16 / W4A8 / FP4-linear entry points exist and say why
// they cannot run (the implementations live in src/cuda/gemm and src/cuda/linear).
#include "moekit/core/error.hpp"
#include "moekit/gemm/w4a16.hpp"
#include "moekit/gemm/w4a8.hpp"
#include "moekit/linear/fp4_linear.hpp"

#if !MOEKIT_WITH_CUDA
namespace moekit::gemm {
bool w4a16_available() { return false; }
void w4a16_grouped_gemm(const W4A16GemmArgs&) {
  MOEKIT_FAIL("w4a16_grouped_gemm: moekit was built without the CUDA backend");
}
bool w4a8_available() { return false; }
void w4a8_grouped_gemm(const W4A8GemmArgs&) {
  MOEKIT_FAIL("w4a8_grouped_gemm: moekit was built without the CUDA backend");
}
}  // namespace moekit::gemm
namespace moekit::linear {
std::string fp4_linear_unsupported_reason(W4Format, std::int64_t, std::int64_t) {
  return "moekit was built without the CUDA backend";
}
void fp4_linear(const Fp4LinearArgs&) {
  MOEKIT_FAIL("fp4_linear: moekit was built without the CUDA backend");
}
}  // namespace moekit::linear
#endif
