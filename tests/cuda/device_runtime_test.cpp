#include "cuda/gpu_test_util.hpp"
#include "moekit/core/tensor.hpp"

#include <vector>

namespace moekit {
namespace {

TEST(DeviceRuntime, RoundTripCopy) {
  MOEKIT_REQUIRE_GPU();
  std::vector<float> h(1000);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(i) * 0.5f;
  Tensor d(DType::kF32, Shape{1000}, Device::cuda());
  Tensor back(DType::kF32, Shape{1000});
  copy(d.view(), TensorView(h.data(), DType::kF32, Shape{1000}));
  copy(back.view(), d.view());
  for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(back.ptr<float>()[i], h[i]);
}

}  // namespace
}  // namespace moekit
