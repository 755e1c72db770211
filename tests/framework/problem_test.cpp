// MoeProblem / ParallelConfig descriptors: validation messages, names, printing.
#include "moekit/framework/problem.hpp"

#include <gtest/gtest.h>

#include "framework/framework_test_util.hpp"
#include "framework/seed_util.hpp"
#include "moekit/framework/experts.hpp"

namespace moekit {
namespace {

using testing::expect_error;

TEST(Problem, ExpertParallelMap) {
  const ParallelConfig p = ParallelConfig::expert_parallel(8, 4, 2);
  EXPECT_EQ(p.expert_map, (std::vector<std::int32_t>{-1, -1, -1, -1, 0, 1, -1, -1}));
  EXPECT_EQ(p.num_local_experts(8), 2);
  EXPECT_FALSE(p.is_identity());
  EXPECT_TRUE(ParallelConfig{}.is_identity());
  EXPECT_EQ(ParallelConfig{}.num_local_experts(8), 8);
  EXPECT_NO_THROW(p.validate(8));
  expect_error([&] { p.validate(6); }, {"parallel.expert_map size", "6", "8"});
  ParallelConfig dup = p;
  dup.expert_map[0] = 1;
  expect_error([&] { dup.validate(8); }, {"parallel.expert_map[5]"});
  ParallelConfig missing;
  missing.ep_size = 2;
  expect_error([&] { missing.validate(8); }, {"parallel.expert_map"});
  ParallelConfig ll;
  ll.low_latency_dispatch = true;
  EXPECT_EQ(ll.activation_format(), ActivationFormat::kBatched);
}

TEST(Problem, NamesAndValidation) {
  MoeProblem p;
  p.num_tokens = 5;
  p.layer = testing::small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul);
  p.weight_quant = parse_quant_config("nvfp4");
  EXPECT_EQ(p.quant_name(), "w4a16_nvfp4");
  p.activation_quant = parse_quant_config("nvfp4");
  EXPECT_EQ(p.quant_name(), "w4a4_nvfp4");
  p.weight_quant = parse_quant_config("mxfp4");
  p.activation_quant = parse_quant_config("mxfp8");
  EXPECT_EQ(p.quant_name(), "w4a8_mxfp4");
  p.weight_quant = parse_quant_config("fp8_block");
  p.activation_quant = parse_quant_config("fp8_1x128");
  EXPECT_EQ(p.quant_name(), "w8a8_fp8_block");
  EXPECT_NO_THROW(p.validate());
  EXPECT_NE(p.str().find("M=5"), std::string::npos);
  MoeProblem bad = p;
  bad.num_tokens = -1;
  expect_error([&] { bad.validate(); }, {"problem.num_tokens"});
  bad = p;
  bad.activation_dtype = DType::kE4M3;
  expect_error([&] { bad.validate(); }, {"problem.activation_dtype", "e4m3"});
  bad = p;
  bad.weight_quant = parse_quant_config("fp8_token");
  expect_error([&] { bad.validate(); }, {"problem.weight_quant", "fp8_token"});
  EXPECT_EQ(resolve_reduce_policy(ReducePolicy::kDelegate, ActivationFormat::kStandard),
            ReducePolicy::kContiguous);
  EXPECT_EQ(resolve_reduce_policy(ReducePolicy::kDelegate, ActivationFormat::kBatched),
            ReducePolicy::kBatchedPerExpert);
  EXPECT_EQ(reduce_policy_name(ReducePolicy::kAlreadyReduced), "already_reduced");
  EXPECT_EQ((TensorSpec{DType::kBF16, Shape{3, 5}}.nbytes()), 30u);
}

}  // namespace
}  // namespace moekit
