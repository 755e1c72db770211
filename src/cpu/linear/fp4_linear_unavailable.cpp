// Builds without the CUDA backend: the FP4-linear entry points exist and say why they cannot run
// (the implementation lives in src/cuda/linear).
#include "moekit/core/error.hpp"
#include "moekit/linear/fp4_linear.hpp"

#if !MOEKIT_WITH_CUDA
namespace moekit::linear {
std::string fp4_linear_unsupported_reason(QuantScheme, std::int64_t, std::int64_t) {
  return "moekit was built without the CUDA backend";
}
void fp4_linear_prepare_weights(QuantScheme, std::int64_t, std::int64_t, const std::uint8_t*,
                                const std::uint8_t*, std::uint8_t*, std::uint8_t*) {
  MOEKIT_FAIL("fp4_linear_prepare_weights: moekit was built without the CUDA backend");
}
std::size_t fp4_linear_workspace_bytes(std::int64_t m, std::int64_t k) {
  return static_cast<std::size_t>(m * k) * 2;
}
void fp4_linear(const Fp4LinearArgs&) {
  MOEKIT_FAIL("fp4_linear: moekit was built without the CUDA backend");
}
}  // namespace moekit::linear
#endif
