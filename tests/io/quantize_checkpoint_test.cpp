// quantize_checkpoint: bf16 checkpoint -> every quantized format -> load_moe_layer gives what the
// reference quantizer produces from the same bf16 weights; pass-through tensors survive; the
// CPU reference layer gives the same output on the loaded layer as on the in-memory one.
#include "moekit/io/quantize_checkpoint.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "io/io_test_util.hpp"
#include "moekit/io/moe_export.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"

namespace moekit::io {
namespace {

using testing::expect_error;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what << " differs";
}

class QuantizeCheckpoint : public ::testing::TestWithParam<CheckpointFormat> {};

TEST_P(QuantizeCheckpoint, RoundTripsThroughTheLoader) {
  const CheckpointFormat format = GetParam();
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  MoeLayerConfig cfg;
  cfg.name = "mixtral";
  cfg.num_experts = 4;
  cfg.hidden_size = 64;
  cfg.intermediate_size = 128;
  cfg.routing.top_k = 2;
  cfg.routing.method = RoutingMethod::kRenormalizeNaive;
  MoeWeights master = random_master_weights(cfg, seed);
  RouterWeights router = random_router_weights(cfg, seed + 1);

  testing::TempDir in, out, side;
  write_text(
      in.file("config.json"),
      R"({"model_type":"mixtral","num_hidden_layers":2,"hidden_size":64,"num_local_experts":4,)"
      R"("num_experts_per_tok":2,"intermediate_size":128})");
  write_text(in.file("tokenizer.json"), "{}");
  auto tensors =
      export_moe_layer(master, router, CheckpointFormat::kBF16, 1, ExpertNaming::kMixtral);
  Tensor embed = random_hidden_states(10, 64, DType::kBF16, seed + 2);
  tensors.push_back({"model.embed_tokens.weight", std::move(embed), ""});
  write_safetensors(in.file("model.safetensors"), named_views(tensors));
  Tensor calib = random_hidden_states(5, 64, DType::kBF16, seed + 3);
  write_safetensors(side.file("calib.safetensors"), {{"hidden_states", calib.view()}});

  QuantizeCheckpointOptions o;
  o.format = format;
  o.calibration_file = side.file("calib.safetensors");
  int calls = 0;
  o.progress = [&](int done, int total, int layer) {
    ++calls;
    EXPECT_EQ(total, 1);
    EXPECT_EQ(layer, 1);
    EXPECT_EQ(done, 1);
  };
  auto r = quantize_checkpoint(in.str(), out.str(), o);
  EXPECT_EQ(r.layers, std::vector<int>{1});
  EXPECT_EQ(r.passthrough_tensors, 1u);
  EXPECT_EQ(calls, 1);

  MoeLayer loaded = load_moe_layer(out.str(), 1);
  EXPECT_EQ(loaded.format, format);
  // The reference quantizer on the same bf16 weights (with the format's global-scale recipe).
  MoeWeights want = quantize_for_checkpoint(master, format);
  expect_same_bytes(loaded.weights.w13.values, want.w13.values, "w13.values");
  expect_same_bytes(loaded.weights.w13.scales, want.w13.scales, "w13.scales");
  expect_same_bytes(loaded.weights.w13.global_scale, want.w13.global_scale, "w13.global_scale");
  expect_same_bytes(loaded.weights.w2.values, want.w2.values, "w2.values");
  expect_same_bytes(loaded.weights.w2.scales, want.w2.scales, "w2.scales");
  expect_same_bytes(loaded.router.weight, router.weight, "router.weight");
  if (format != CheckpointFormat::kBF16 && format != CheckpointFormat::kMXFP4 &&
      format != CheckpointFormat::kFP8Block) {
    ASSERT_TRUE(loaded.weights.a13_scale.defined());
    // a13 from the calibration amax: encode scale 2688 / amax(|calib|) (within fp32 rounding).
    float amax = 0;
    for (std::int64_t i = 0; i < calib.numel(); ++i) {
      std::uint32_t u = static_cast<std::uint32_t>(calib.ptr<std::uint16_t>()[i]) << 16;
      float v;
      std::memcpy(&v, &u, 4);
      amax = std::fmax(amax, std::fabs(v));
    }
    EXPECT_NEAR(loaded.weights.a13_scale.ptr<float>()[0], 2688.0f / amax, 1e-5f * 2688.0f / amax);
    EXPECT_TRUE(loaded.weights.a2_scale.defined());
  }
  auto ck = Checkpoint::open(out.str());
  EXPECT_TRUE(ck.contains("model.embed_tokens.weight"));
  EXPECT_EQ(std::memcmp(ck.view("model.embed_tokens.weight").data, tensors.back().tensor.data(),
                        tensors.back().tensor.nbytes()),
            0);
  EXPECT_TRUE(std::ifstream(out.file("tokenizer.json")).good());
  EXPECT_EQ(std::ifstream(out.file("hf_quant_config.json")).good(),
            format == CheckpointFormat::kModelOptNVFP4);

  // The CPU reference layer on the loaded weights == on the in-memory ones, bit for bit.
  Tensor x = random_hidden_states(6, 64, DType::kF32, seed + 4);
  Tensor logits = router_logits_reference(x.view(), router);
  Tensor y_loaded(DType::kF32, Shape{6, 64}), y_mem(DType::kF32, Shape{6, 64});
  moe_reference(x.view(), logits.view(), {}, loaded.config, loaded.weights, y_loaded.view());
  moe_reference(x.view(), logits.view(), {}, cfg, want, y_mem.view());
  EXPECT_EQ(std::memcmp(y_loaded.data(), y_mem.data(), y_mem.nbytes()), 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizeCheckpoint,
                         ::testing::Values(CheckpointFormat::kModelOptNVFP4,
                                           CheckpointFormat::kCompressedTensorsNVFP4,
                                           CheckpointFormat::kMXFP4, CheckpointFormat::kFP8Block),
                         [](const auto& info) {
                           return std::string(checkpoint_format_name(info.param));
                         });

TEST(QuantizeCheckpointErrors, RejectsBadRequests) {
  testing::TempDir in, out;
  write_text(
      in.file("config.json"),
      R"({"model_type":"mixtral","num_hidden_layers":1,"hidden_size":64,"num_local_experts":2,)"
      R"("num_experts_per_tok":1,"intermediate_size":96})");
  QuantizeCheckpointOptions o;
  o.format = CheckpointFormat::kBF16;
  expect_error([&] { quantize_checkpoint(in.str(), out.str(), o); }, {"format", "got bf16"});
  o.format = CheckpointFormat::kFP8Block;
  expect_error([&] { quantize_checkpoint(in.str(), out.str(), o); },
               {"intermediate_size", "multiple of 128", "got 96"});
  o.format = CheckpointFormat::kMXFP4;
  expect_error([&] { quantize_checkpoint(in.str(), in.str(), o); }, {"output_dir", "different"});
}

}  // namespace
}  // namespace moekit::io
