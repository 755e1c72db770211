// MoE layer loaders: tiny checkpoints of every format written with moekit's own writer
// (export_moe_layer + write_safetensors), loaded back bit-exactly; gpt-oss interleave checked
// against the raw file; every inconsistency rejected with a message naming the tensor.
#include "moekit/io/moe_loader.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "io/io_test_util.hpp"
#include "moekit/io/moe_export.hpp"
#include "moekit/moe/random_weights.hpp"

namespace moekit::io {
namespace {

using testing::expect_error;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// E=4, k=2, H=64, I=128: the smallest shape every format accepts (FP8 tiles need I % 128).
MoeLayerConfig small_config(const std::string& model_type) {
  MoeLayerConfig c;
  c.name = model_type;
  c.num_experts = 4;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.routing.top_k = 2;
  c.routing.method = RoutingMethod::kRenormalizeNaive;
  if (model_type == "gpt_oss") {
    c.routing.method = RoutingMethod::kRenormalize;
    c.activation.kind = Activation::kSwigluOai;
    c.has_bias = c.has_router_bias = true;
  } else if (model_type == "deepseek_v3") {
    c.routing.method = RoutingMethod::kDeepSeekV3;
    c.routing.num_expert_groups = 2;
    c.routing.topk_group = 1;
    c.routing.routed_scaling_factor = 2.5f;
  }
  return c;
}

std::string config_json(const std::string& model_type, const std::string& quant_config = "") {
  std::string s =
      R"({"model_type":")" + model_type + R"(","num_hidden_layers":3,"hidden_size":64,)";
  if (model_type == "mixtral")
    s += R"("num_local_experts":4,"num_experts_per_tok":2,"intermediate_size":128)";
  if (model_type == "qwen3_moe")
    s +=
        R"("num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":128,"intermediate_size":999,"norm_topk_prob":true)";
  if (model_type == "gpt_oss")
    s +=
        R"("num_local_experts":4,"experts_per_token":2,"intermediate_size":128,"swiglu_limit":7.0)";
  if (model_type == "deepseek_v3")
    s +=
        R"("n_routed_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":128,"n_group":2,"topk_group":1,"routed_scaling_factor":2.5,"n_shared_experts":1)";
  if (!quant_config.empty()) s += R"(,"quantization_config":)" + quant_config;
  return s + "}";
}

struct Fixture {
  MoeLayerConfig config;
  MoeWeights weights;  // in the format's scheme
  RouterWeights router;
};

Fixture make_layer(const std::string& model_type, CheckpointFormat format, std::uint64_t seed) {
  Fixture f;
  f.config = small_config(model_type);
  MoeWeights master = random_master_weights(f.config, seed);
  const InputAmax amax{3.5f, 0.75f};
  f.weights = quantize_for_checkpoint(master, format, &amax);
  f.router = random_router_weights(f.config, seed + 1);
  return f;
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << what << " differs";
}

void expect_same_layer(const MoeLayer& got, const Fixture& want) {
  const MoeWeights& g = got.weights;
  const MoeWeights& w = want.weights;
  EXPECT_EQ(g.quant.scheme, w.quant.scheme);
  EXPECT_EQ(g.num_experts, w.num_experts);
  EXPECT_EQ(g.hidden_size, w.hidden_size);
  EXPECT_EQ(g.intermediate_size, w.intermediate_size);
  expect_same_bytes(g.w13.values, w.w13.values, "w13.values");
  expect_same_bytes(g.w13.scales, w.w13.scales, "w13.scales");
  expect_same_bytes(g.w13.global_scale, w.w13.global_scale, "w13.global_scale");
  expect_same_bytes(g.w2.values, w.w2.values, "w2.values");
  expect_same_bytes(g.w2.scales, w.w2.scales, "w2.scales");
  expect_same_bytes(g.w2.global_scale, w.w2.global_scale, "w2.global_scale");
  expect_same_bytes(g.w13_bias, w.w13_bias, "w13_bias");
  expect_same_bytes(g.w2_bias, w.w2_bias, "w2_bias");
  expect_same_bytes(g.a13_scale, w.a13_scale, "a13_scale");
  expect_same_bytes(g.a2_scale, w.a2_scale, "a2_scale");
  expect_same_bytes(got.router.weight, want.router.weight, "router.weight");
  expect_same_bytes(got.router.bias, want.router.bias, "router.bias");
  expect_same_bytes(got.router.correction_bias, want.router.correction_bias, "correction_bias");
  EXPECT_EQ(got.config.num_experts, want.config.num_experts);
  EXPECT_EQ(got.config.top_k(), want.config.top_k());
  EXPECT_EQ(got.config.hidden_size, want.config.hidden_size);
  EXPECT_EQ(got.config.intermediate_size, want.config.intermediate_size);
  EXPECT_EQ(got.config.routing.method, want.config.routing.method);
  EXPECT_EQ(got.config.activation.kind, want.config.activation.kind);
  EXPECT_EQ(got.config.has_bias, want.config.has_bias);
  EXPECT_EQ(got.config.has_router_bias, want.config.has_router_bias);
}

struct Case {
  const char* model_type;
  CheckpointFormat format;
  ExpertNaming naming;
  const char* quant_config;  // config.json quantization_config ("" = none)
  bool hf_quant_config;      // ModelOpt's separate file instead
};

class LoaderRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(LoaderRoundTrip, LoadsWhatWasWrittenBitExactly) {
  const Case& c = GetParam();
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  Fixture f = make_layer(c.model_type, c.format, seed);
  testing::TempDir dir;
  write_text(dir.file("config.json"), config_json(c.model_type, c.quant_config));
  if (c.hf_quant_config)
    write_text(
        dir.file("hf_quant_config.json"),
        R"({"producer":{"name":"modelopt"},"quantization":{"quant_algo":"NVFP4","group_size":16}})");
  auto tensors = export_moe_layer(f.weights, f.router, c.format, /*layer=*/1, c.naming);
  write_safetensors(dir.file("model.safetensors"), named_views(tensors));

  CheckpointInfo info = read_checkpoint_info(dir.str());
  EXPECT_EQ(info.format, c.format);
  Checkpoint ck = Checkpoint::open(dir.str());
  EXPECT_EQ(moe_layer_indices(ck, info), std::vector<int>{1});
  MoeLayer layer = load_moe_layer(ck, info, 1);
  EXPECT_EQ(layer.format, c.format);
  expect_same_layer(layer, f);
  expect_error([&] { load_moe_layer(ck, info, 0); }, {"layer 0", "expected an MoE block"});
  expect_error([&] { load_moe_layer(ck, info, 3); }, {"layer", "in [0, 3)", "got 3"});
}

INSTANTIATE_TEST_SUITE_P(
    Formats, LoaderRoundTrip,
    ::testing::Values(
        Case{"mixtral", CheckpointFormat::kBF16, ExpertNaming::kMixtral, "", false},
        Case{"qwen3_moe", CheckpointFormat::kBF16, ExpertNaming::kQwen, "", false},
        Case{"qwen3_moe", CheckpointFormat::kModelOptNVFP4, ExpertNaming::kQwen, "", true},
        Case{"mixtral", CheckpointFormat::kModelOptNVFP4, ExpertNaming::kMixtral,
             R"({"quant_method":"modelopt","quant_algo":"NVFP4"})", false},
        Case{
            "qwen3_moe", CheckpointFormat::kCompressedTensorsNVFP4, ExpertNaming::kQwen,
            R"({"quant_method":"compressed-tensors","config_groups":{"group_0":{"format":"nvfp4-pack-quantized"}}})",
            false},
        Case{"gpt_oss", CheckpointFormat::kMXFP4, ExpertNaming::kGptOss,
             R"({"quant_method":"mxfp4"})", false},
        Case{"mixtral", CheckpointFormat::kMXFP4, ExpertNaming::kMixtral,
             R"({"quant_method":"mxfp4"})", false},
        Case{"deepseek_v3", CheckpointFormat::kFP8Block, ExpertNaming::kQwen,
             R"({"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128]})", false}),
    [](const auto& info) {
      return std::string(info.param.model_type) + "_" +
             std::string(checkpoint_format_name(info.param.format));
    });

TEST(MoeLoader, ShardedCheckpointWithIndex) {
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  Fixture f = make_layer("qwen3_moe", CheckpointFormat::kBF16, seed);
  testing::TempDir dir;
  write_text(dir.file("config.json"), config_json("qwen3_moe"));
  auto tensors =
      export_moe_layer(f.weights, f.router, CheckpointFormat::kBF16, 2, ExpertNaming::kQwen);
  std::vector<ExportedTensor> a, b;
  std::string weight_map;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const char* file =
        i % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    if (i) weight_map += ',';
    weight_map += ::moekit::detail::concat('"', tensors[i].name, "\":\"", file, '"');
    (i % 2 ? b : a).push_back(std::move(tensors[i]));
  }
  write_safetensors(dir.file("model-00001-of-00002.safetensors"), named_views(a));
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), named_views(b));
  write_text(dir.file("model.safetensors.index.json"),
             R"({"metadata":{"total_size":1},"weight_map":{)" + weight_map + "}}");
  MoeLayer layer = load_moe_layer(dir.str(), 2);
  expect_same_layer(layer, f);
  EXPECT_EQ(Checkpoint::open(dir.str()).files().size(), 2u);

  // An index naming a tensor its shard does not hold, or a path outside the directory.
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map":{"nope":"model-00001-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.str()); }, {"weight_map['nope']", "without it"});
  write_text(dir.file("model.safetensors.index.json"),
             R"({"weight_map":{"x":"../etc.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir.str()); }, {"weight_map['x']", "plain file name"});
  write_text(dir.file("model.safetensors.index.json"), R"({"weight_map":{"x":"a","x":"b"}})");
  expect_error([&] { Checkpoint::open(dir.str()); }, {"duplicate key 'x'"});
}

TEST(MoeLoader, GptOssInterleaveMatchesTheRawFile) {
  // Independent of the reorder helpers: checkpoint row 2j is gate row j, row 2j+1 is up row j.
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  Fixture f = make_layer("gpt_oss", CheckpointFormat::kMXFP4, seed);
  testing::TempDir dir;
  write_text(dir.file("config.json"), config_json("gpt_oss", R"({"quant_method":"mxfp4"})"));
  write_safetensors(dir.file("model.safetensors"),
                    named_views(export_moe_layer(f.weights, f.router, CheckpointFormat::kMXFP4, 0,
                                                 ExpertNaming::kGptOss)));
  MoeLayer layer = load_moe_layer(dir.str(), 0);
  auto file = SafetensorsFile::open(dir.file("model.safetensors"));
  const auto blocks = file.bytes("model.layers.0.mlp.experts.gate_up_proj_blocks");
  const auto scales = file.bytes("model.layers.0.mlp.experts.gate_up_proj_scales");
  const std::int64_t e_n = 4, i = 128, rb = 64 / 2, sb = 64 / 32;
  const auto* v = layer.weights.w13.values.ptr<std::uint8_t>();
  const auto* s = layer.weights.w13.scales.ptr<std::uint8_t>();
  for (std::int64_t e = 0; e < e_n; ++e)
    for (std::int64_t j = 0; j < i; ++j)
      for (int half = 0; half < 2; ++half) {
        const std::int64_t ck_row = e * 2 * i + 2 * j + half, mk_row = e * 2 * i + half * i + j;
        ASSERT_EQ(std::memcmp(&blocks[ck_row * rb], v + mk_row * rb, rb), 0) << e << " " << j;
        ASSERT_EQ(std::memcmp(&scales[ck_row * sb], s + mk_row * sb, sb), 0) << e << " " << j;
      }
  const TensorView bias = file.view("model.layers.0.mlp.experts.gate_up_proj_bias");
  float b_ck = 0, b_mk = layer.weights.w13_bias.ptr<float>()[i + 5];  // up row 5 of expert 0
  std::memcpy(&b_ck, static_cast<std::uint8_t*>(bias.data) + 4 * 11, 4);
  EXPECT_EQ(b_ck, b_mk);
}

TEST(MoeLoader, QuantizedBytesAgreeWithTheReferenceQuantizer) {
  // quantize_for_checkpoint (ModelOpt recipe) -> write -> load == quantize() of one expert's
  // [2I, H] matrix with gs = 1 / (amax / 2688).
  const std::uint64_t seed = testing::test_seed();
  MOEKIT_IO_LOG_SEED(seed);
  MoeLayerConfig cfg = small_config("qwen3_moe");
  MoeWeights master = random_master_weights(cfg, seed);
  testing::TempDir dir;
  write_text(dir.file("config.json"),
             config_json("qwen3_moe", R"({"quant_method":"modelopt","quant_algo":"NVFP4"})"));
  MoeWeights q = quantize_for_checkpoint(master, CheckpointFormat::kModelOptNVFP4);
  write_safetensors(
      dir.file("model.safetensors"),
      named_views(export_moe_layer(q, random_router_weights(cfg, seed),
                                   CheckpointFormat::kModelOptNVFP4, 0, ExpertNaming::kQwen)));
  MoeLayer layer = load_moe_layer(dir.str(), 0);
  const std::int64_t rows = 2 * cfg.intermediate_size, h = cfg.hidden_size;
  for (int e = 0; e < cfg.num_experts; ++e) {
    TensorView x(master.w13.values.ptr<std::uint16_t>() + e * rows * h, DType::kBF16,
                 Shape{rows, h});
    float amax = 0;
    for (std::int64_t k = 0; k < rows * h; ++k) {
      std::uint32_t u = static_cast<std::uint32_t>(x.ptr<std::uint16_t>()[k]) << 16;
      float fv;
      std::memcpy(&fv, &u, 4);
      amax = std::fmax(amax, std::fabs(fv));
    }
    float gs = 1.0f / (amax / 2688.0f);
    Tensor gs_t(DType::kF32, Shape{1});
    gs_t.ptr<float>()[0] = gs;
    QuantConfig nv;
    nv.scheme = QuantScheme::kNVFP4;
    QuantizedTensor ref = quantize(x, nv, gs_t.view());
    EXPECT_EQ(std::memcmp(ref.values.data(),
                          layer.weights.w13.values.ptr<std::uint8_t>() + e * rows * h / 2,
                          ref.values.nbytes()),
              0)
        << "expert " << e;
    EXPECT_EQ(std::memcmp(ref.scales.data(),
                          layer.weights.w13.scales.ptr<std::uint8_t>() + e * rows * h / 16,
                          ref.scales.nbytes()),
              0)
        << "expert " << e;
    EXPECT_EQ(layer.weights.w13.global_scale.ptr<float>()[e], gs);
  }
  EXPECT_FALSE(layer.weights.a13_scale.defined());  // no input scales were written
}

}  // namespace
}  // namespace moekit::io
