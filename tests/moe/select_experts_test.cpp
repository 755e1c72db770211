// select_experts and ParallelConfig::local_experts: what one expert-parallel rank holds. Every
// per-expert tensor of the selection is byte-equal to the chosen experts' slices, in the order
// given, for each weight scheme (bf16, fp8 block, NVFP4 with its per-expert global scale, MXFP4)
// and with biases; bad ids are refused naming the index.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/framework/problem.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/weights.hpp"

namespace moekit {
namespace {

void expect_rows(const Tensor& got, const Tensor& all, const std::vector<int>& experts,
                 const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.defined(), all.defined());
  if (!all.defined()) return;
  ASSERT_EQ(got.shape()[0], static_cast<std::int64_t>(experts.size()));
  const std::size_t per = all.nbytes() / static_cast<std::size_t>(all.shape()[0]);
  for (std::size_t i = 0; i < experts.size(); ++i)
    EXPECT_EQ(std::memcmp(static_cast<const char*>(got.data()) + i * per,
                          static_cast<const char*>(all.data()) + experts[i] * per, per),
              0)
        << "expert " << experts[i];
}

TEST(SelectExperts, SlicesEveryPerExpertTensor) {
  MoeLayerConfig layer = scaled_layer_config(layer_preset("gpt-oss-20b"), 256, 128, 8);  // biases
  const std::vector<int> experts = {5, 0, 7};  // any order
  for (QuantScheme s : {QuantScheme::kBF16, QuantScheme::kFP8Block128x128, QuantScheme::kNVFP4,
                        QuantScheme::kMXFP4}) {
    SCOPED_TRACE(std::string(scheme_name(s)));
    QuantConfig q;
    q.scheme = s;
    const MoeWeights w = random_moe_weights(layer, q, 7);
    const MoeWeights l = select_experts(w, experts);
    EXPECT_EQ(l.num_experts, 3);
    EXPECT_NO_THROW(l.validate());
    expect_rows(l.w13.values, w.w13.values, experts, "w13.values");
    expect_rows(l.w13.scales, w.w13.scales, experts, "w13.scales");
    expect_rows(l.w13.global_scale, w.w13.global_scale, experts, "w13.global_scale");
    expect_rows(l.w2.values, w.w2.values, experts, "w2.values");
    expect_rows(l.w2.scales, w.w2.scales, experts, "w2.scales");
    expect_rows(l.w13_bias, w.w13_bias, experts, "w13_bias");
    expect_rows(l.w2_bias, w.w2_bias, experts, "w2_bias");
  }
}

TEST(SelectExperts, LocalExpertsFollowTheMap) {
  const ParallelConfig p = ParallelConfig::expert_parallel(8, 4, 2);
  EXPECT_EQ(p.local_experts(8), (std::vector<int>{4, 5}));
  ParallelConfig strided;
  strided.expert_map = {-1, 1, -1, 0, -1, -1, -1, 2};
  EXPECT_EQ(strided.local_experts(8), (std::vector<int>{3, 1, 7}));
  EXPECT_EQ(ParallelConfig{}.local_experts(3), (std::vector<int>{0, 1, 2}));
}

TEST(SelectExperts, BadIdsAreRefusedNamingThem) {
  MoeLayerConfig layer = scaled_layer_config(layer_preset("mixtral-8x7b"), 256, 128, 4);
  QuantConfig q;
  q.scheme = QuantScheme::kBF16;
  const MoeWeights w = random_moe_weights(layer, q, 1);
  try {
    select_experts(w, {0, 4});
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts[1]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(select_experts(w, {}), Error);
}

}  // namespace
}  // namespace moekit
