// MoE loaders on broken checkpoints: each inconsistency throws moekit::Error naming the tensor
// (or the config key).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "io/io_test_util.hpp"
#include "moekit/io/moe_export.hpp"
#include "moekit/io/moe_loader.hpp"
#include "moekit/moe/random_weights.hpp"

namespace moekit::io {
namespace {

using testing::expect_error;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

const char* kQwenConfig =
    R"({"model_type":"qwen3_moe","num_hidden_layers":1,"hidden_size":64,"num_experts":4,)"
    R"("num_experts_per_tok":2,"moe_intermediate_size":128%s})";

std::string qwen_config(const std::string& extra = "") {
  std::string s = kQwenConfig;
  return s.replace(s.find("%s"), 2, extra);
}

class BrokenCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::test_seed();
    config_.name = "qwen3_moe";
    config_.num_experts = 4;
    config_.hidden_size = 64;
    config_.intermediate_size = 128;
    config_.routing.top_k = 2;
    config_.routing.method = RoutingMethod::kRenormalizeNaive;
    master_ = random_master_weights(config_, seed_);
    router_ = random_router_weights(config_, seed_ + 1);
  }
  // Exports in `format`, lets `edit` break the tensor list, writes, and loads layer 0.
  template <typename Edit>
  void load_edited(CheckpointFormat format, const std::string& quant_config, Edit edit,
                   MoeLoadOptions options = {}) {
    const InputAmax amax{2.0f, 1.0f};
    MoeWeights w = quantize_for_checkpoint(master_, format, &amax);
    auto tensors = export_moe_layer(w, router_, format, 0, ExpertNaming::kQwen);
    edit(tensors);
    write_text(dir_.file("config.json"), qwen_config(quant_config));
    write_safetensors(dir_.file("model.safetensors"), named_views(tensors));
    loaded_ = load_moe_layer(dir_.str(), 0, options);
  }
  static ExportedTensor* find(std::vector<ExportedTensor>& ts, const std::string& name) {
    for (auto& t : ts)
      if (t.name == name) return &t;
    ADD_FAILURE() << "no tensor " << name;
    return nullptr;
  }
  static void set_scalar(std::vector<ExportedTensor>& ts, const std::string& name, float v) {
    if (auto* t = find(ts, name)) t->tensor.ptr<float>()[0] = v;
  }
  std::uint64_t seed_ = 0;
  MoeLayerConfig config_;
  MoeWeights master_;
  RouterWeights router_;
  testing::TempDir dir_;
  MoeLayer loaded_;
};

const char* kModelOpt =
    R"(,"quantization_config":{"quant_method":"modelopt","quant_algo":"NVFP4"})";
const std::string kP = "model.layers.0.mlp.experts.";

TEST_F(BrokenCheckpoint, MissingExpertTensor) {
  MOEKIT_IO_LOG_SEED(seed_);
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16, "", [](auto& ts) {
          std::erase_if(ts, [](auto& t) { return t.name == kP + "2.down_proj.weight"; });
        });
      },
      {"tensor '" + kP + "2.down_proj.weight'", "expected present", "got missing"});
}

TEST_F(BrokenCheckpoint, WrongShapeAndDtype) {
  MOEKIT_IO_LOG_SEED(seed_);
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16, "", [](auto& ts) {
          find(ts, kP + "1.up_proj.weight")->tensor = Tensor(DType::kBF16, Shape{128, 32});
        });
      },
      {"tensor '" + kP + "1.up_proj.weight' shape", "expected [128, 64]", "got [128, 32]"});
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16, "", [](auto& ts) {
          find(ts, kP + "0.gate_proj.weight")->tensor = Tensor::zeros(DType::kI32, Shape{128, 64});
        });
      },
      {"tensor '" + kP + "0.gate_proj.weight' dtype", "expected bf16 or f32 or f16", "got I32"});
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16, "", [](auto& ts) {
          find(ts, "model.layers.0.mlp.gate.weight")->tensor =
              Tensor::zeros(DType::kF32, Shape{5, 64});
        });
      },
      {"tensor 'model.layers.0.mlp.gate.weight' shape", "expected [4, 64]"});
}

TEST_F(BrokenCheckpoint, GateAndUpMustShareWeightScale2) {
  MOEKIT_IO_LOG_SEED(seed_);
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kModelOptNVFP4, kModelOpt,
                    [](auto& ts) { set_scalar(ts, kP + "3.up_proj.weight_scale_2", 0.125f); });
      },
      {"tensor '" + kP + "3.up_proj.weight_scale_2' value",
       "equal to '" + kP + "3.gate_proj.weight_scale_2'", "got 0.125"});
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kModelOptNVFP4, kModelOpt,
                    [](auto& ts) { set_scalar(ts, kP + "0.gate_proj.weight_scale_2", 0.0f); });
      },
      {"tensor '" + kP + "0.gate_proj.weight_scale_2' value", "finite positive"});
}

TEST_F(BrokenCheckpoint, InputScalesMustAgreeUnlessPolicySaysMax) {
  MOEKIT_IO_LOG_SEED(seed_);
  auto edit = [](auto& ts) { set_scalar(ts, kP + "2.up_proj.input_scale", 0.5f); };
  expect_error([&] { load_edited(CheckpointFormat::kModelOptNVFP4, kModelOpt, edit); },
               {"tensor '" + kP + "2.up_proj.input_scale' value",
                "equal to '" + kP + "0.gate_proj.input_scale'", "kMax", "got 0.5"});
  MoeLoadOptions max;
  max.input_scales = InputScalePolicy::kMax;
  load_edited(CheckpointFormat::kModelOptNVFP4, kModelOpt, edit, max);
  ASSERT_TRUE(loaded_.weights.a13_scale.defined());
  EXPECT_EQ(loaded_.weights.a13_scale.ptr<float>()[1], 1.0f / 0.5f);  // the largest decode scale
  MoeLoadOptions ignore;
  ignore.input_scales = InputScalePolicy::kIgnore;
  load_edited(CheckpointFormat::kModelOptNVFP4, kModelOpt, edit, ignore);
  EXPECT_FALSE(loaded_.weights.a13_scale.defined());
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kModelOptNVFP4, kModelOpt, [](auto& ts) {
          std::erase_if(ts, [](auto& t) { return t.name == kP + "1.down_proj.input_scale"; });
        });
      },
      {"tensor '" + kP + "1.down_proj.input_scale'", "other experts have it", "missing"});
}

TEST_F(BrokenCheckpoint, NonScalarGlobalScale) {
  MOEKIT_IO_LOG_SEED(seed_);
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kModelOptNVFP4, kModelOpt, [](auto& ts) {
          find(ts, kP + "0.down_proj.weight_scale_2")->tensor =
              Tensor::zeros(DType::kF32, Shape{2});
        });
      },
      {"tensor '" + kP + "0.down_proj.weight_scale_2' shape", "a scalar", "got [2]"});
}

TEST_F(BrokenCheckpoint, Fp8BlockScaleShape) {
  MOEKIT_IO_LOG_SEED(seed_);
  const char* fp8 =
      R"(,"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]})";
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kFP8Block, fp8, [](auto& ts) {
          find(ts, kP + "0.gate_proj.weight_scale_inv")->tensor =
              Tensor::zeros(DType::kF32, Shape{1, 2});
        });
      },
      {"tensor '" + kP + "0.gate_proj.weight_scale_inv' shape", "expected [1, 1]", "got [1, 2]"});
}

TEST_F(BrokenCheckpoint, ConfigErrorsNameTheKey) {
  MOEKIT_IO_LOG_SEED(seed_);
  auto none = [](auto&) {};
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16,
                    R"(,"quantization_config":{"quant_method":"modelopt","quant_algo":"FP8"})",
                    none);
      },
      {"quantization_config.quant_algo", "NVFP4", "\"FP8\""});
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16, R"(,"quantization_config":{"quant_method":"awq"})",
                    none);
      },
      {"quantization_config.quant_method", "\"awq\""});
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16,
                    R"(,"quantization_config":{"quant_method":"fp8","weight_block_size":[64,64]})",
                    none);
      },
      {"weight_block_size", "[128, 128]"});
  // The checkpoint has bf16 tensors but config.json claims MXFP4.
  expect_error(
      [&] {
        load_edited(CheckpointFormat::kBF16, R"(,"quantization_config":{"quant_method":"mxfp4"})",
                    none);
      },
      {"layer 0", "mxfp4"});
  write_text(dir_.file("config.json"), R"({"model_type":"llama","num_hidden_layers":1})");
  expect_error([&] { read_checkpoint_info(dir_.str()); },
               {"config.json", "num_local_experts | num_experts | n_routed_experts", "missing"});
  write_text(dir_.file("config.json"),
             R"({"model_type":"llama","num_hidden_layers":1,"hidden_size":8,"num_experts":2,)"
             R"("num_experts_per_tok":1,"intermediate_size":8})");
  expect_error([&] { read_checkpoint_info(dir_.str()); }, {"model_type", "'llama'"});
  write_text(dir_.file("config.json"), qwen_config(R"(,"num_experts_per_tok":9)"));
  expect_error([&] { read_checkpoint_info(dir_.str()); }, {"duplicate key 'num_experts_per_tok'"});
  write_text(
      dir_.file("config.json"),
      R"({"model_type":"qwen3_moe","num_hidden_layers":1,)"
      R"("hidden_size":64,"num_experts":4,"num_experts_per_tok":5,"moe_intermediate_size":128})");
  expect_error([&] { read_checkpoint_info(dir_.str()); }, {"config.json", "top_k"});
}

}  // namespace
}  // namespace moekit::io
