// config.json (+ hf_quant_config.json) -> CheckpointInfo: model type, layer shape, routing,
// activation and the checkpoint's quantization format.
#include <filesystem>

#include "io/json_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/moe_loader.hpp"

namespace moekit::io {

namespace {

using nlohmann::json;

struct ConfigReader {
  const json& j;
  std::string where;

  const json* find(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
      if (j.contains(k) && !j[k].is_null()) return &j[k];
    return nullptr;
  }
  std::string names(std::initializer_list<const char*> keys) const {
    std::string s;
    for (const char* k : keys) s += (s.empty() ? "" : " | ") + std::string(k);
    return s;
  }
  std::int64_t integer(std::initializer_list<const char*> keys) const {
    const json* v = find(keys);
    if (!v) MOEKIT_FAIL(where, ": ", names(keys), ": expected an integer, got missing");
    if (!v->is_number_integer() || v->get<std::int64_t>() < 0)
      MOEKIT_FAIL(where, ": ", names(keys), ": expected a non-negative integer, got ",
                  detail::json_excerpt(*v));
    return v->get<std::int64_t>();
  }
  std::int64_t integer_or(const char* key, std::int64_t fallback) const {
    return find({key}) ? integer({key}) : fallback;
  }
  double number_or(const char* key, double fallback) const {
    const json* v = find({key});
    if (!v) return fallback;
    if (!v->is_number())
      MOEKIT_FAIL(where, ": ", key, ": expected a number, got ", detail::json_excerpt(*v));
    return v->get<double>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    const json* v = find({key});
    if (!v) return fallback;
    if (!v->is_boolean())
      MOEKIT_FAIL(where, ": ", key, ": expected true or false, got ", detail::json_excerpt(*v));
    return v->get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    const json* v = find({key});
    if (!v) return fallback;
    if (!v->is_string())
      MOEKIT_FAIL(where, ": ", key, ": expected a string, got ", detail::json_excerpt(*v));
    return v->get<std::string>();
  }
};

bool is_nvfp4_compressed_tensors(const json& q) {
  if (q.contains("format") && q["format"] == "nvfp4-pack-quantized") return true;
  if (q.contains("config_groups") && q["config_groups"].is_object())
    for (const auto& [name, group] : q["config_groups"].items())
      if (group.is_object() && group.contains("format") &&
          group["format"] == "nvfp4-pack-quantized")
        return true;
  return false;
}

CheckpointFormat detect_format(const std::string& dir, const json& config,
                               const std::string& where) {
  namespace fs = std::filesystem;
  const fs::path hf_quant = fs::path(dir) / "hf_quant_config.json";
  std::error_code ec;
  if (fs::exists(hf_quant, ec)) {
    json h = detail::read_json_file(hf_quant.string());
    const json* algo = nullptr;
    if (h.is_object() && h.contains("quantization") && h["quantization"].is_object() &&
        h["quantization"].contains("quant_algo"))
      algo = &h["quantization"]["quant_algo"];
    if (algo && *algo == "NVFP4") return CheckpointFormat::kModelOptNVFP4;
    MOEKIT_FAIL("'", hf_quant.string(), "': quantization.quant_algo: expected \"NVFP4\", got ",
                algo ? detail::json_excerpt(*algo) : std::string("missing"));
  }
  if (!config.contains("quantization_config") || config["quantization_config"].is_null())
    return CheckpointFormat::kBF16;
  const json& q = config["quantization_config"];
  if (!q.is_object())
    MOEKIT_FAIL(where, ": quantization_config: expected an object, got ", detail::json_excerpt(q));
  const std::string method = q.contains("quant_method") && q["quant_method"].is_string()
                                 ? q["quant_method"].get<std::string>()
                                 : std::string();
  if (method == "modelopt") {
    if (q.contains("quant_algo") && q["quant_algo"] == "NVFP4")
      return CheckpointFormat::kModelOptNVFP4;
    MOEKIT_FAIL(where, ": quantization_config.quant_algo: expected \"NVFP4\" (modelopt), got ",
                q.contains("quant_algo") ? detail::json_excerpt(q["quant_algo"]) : "missing");
  }
  if (method == "compressed-tensors") {
    if (is_nvfp4_compressed_tensors(q)) return CheckpointFormat::kCompressedTensorsNVFP4;
    MOEKIT_FAIL(where, ": quantization_config: expected compressed-tensors format ",
                "\"nvfp4-pack-quantized\", got another compressed-tensors scheme");
  }
  if (method == "mxfp4") return CheckpointFormat::kMXFP4;
  if (method == "fp8") {
    const json* b = q.contains("weight_block_size") ? &q["weight_block_size"] : nullptr;
    if (b && *b == json::array({128, 128})) return CheckpointFormat::kFP8Block;
    MOEKIT_FAIL(where, ": quantization_config.weight_block_size: expected [128, 128] (block FP8), ",
                "got ", b ? detail::json_excerpt(*b) : std::string("missing"));
  }
  MOEKIT_FAIL(where, ": quantization_config.quant_method: expected one of modelopt | ",
              "compressed-tensors | mxfp4 | fp8, got ",
              q.contains("quant_method") ? detail::json_excerpt(q["quant_method"]) : "missing");
}

Activation parse_hidden_act(const std::string& act, const std::string& where) {
  if (act == "silu" || act == "swish") return Activation::kSiluAndMul;
  if (act == "gelu") return Activation::kGeluErfAndMul;
  if (act == "gelu_pytorch_tanh" || act == "gelu_new") return Activation::kGeluTanhAndMul;
  MOEKIT_FAIL(where, ": hidden_act: expected silu | gelu | gelu_pytorch_tanh, got '", act, "'");
}

}  // namespace

std::string_view checkpoint_format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::kBF16:
      return "bf16";
    case CheckpointFormat::kModelOptNVFP4:
      return "modelopt_nvfp4";
    case CheckpointFormat::kCompressedTensorsNVFP4:
      return "ct_nvfp4";
    case CheckpointFormat::kMXFP4:
      return "mxfp4";
    case CheckpointFormat::kFP8Block:
      return "fp8_block";
  }
  return "?";
}

CheckpointFormat parse_checkpoint_format(std::string_view name) {
  for (auto f : {CheckpointFormat::kBF16, CheckpointFormat::kModelOptNVFP4,
                 CheckpointFormat::kCompressedTensorsNVFP4, CheckpointFormat::kMXFP4,
                 CheckpointFormat::kFP8Block})
    if (checkpoint_format_name(f) == name) return f;
  throw_arg_error("parse_checkpoint_format", "format",
                  "one of bf16|modelopt_nvfp4|ct_nvfp4|mxfp4|fp8_block", std::string(name));
}

CheckpointInfo read_checkpoint_info(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / "config.json").string();
  const std::string where = "'" + path + "'";
  json config = detail::read_json_file(path);
  if (!config.is_object()) MOEKIT_FAIL(where, ": expected a JSON object");
  ConfigReader r{config, where};

  CheckpointInfo info;
  info.dir = dir;
  info.model_type = r.string_or("model_type", "");
  info.num_hidden_layers = static_cast<int>(r.integer({"num_hidden_layers"}));
  info.format = detect_format(dir, config, where);

  MoeLayerConfig& c = info.layer;
  c.name = info.model_type;
  c.num_experts =
      static_cast<int>(r.integer({"num_local_experts", "num_experts", "n_routed_experts"}));
  c.routing.top_k = static_cast<int>(r.integer({"num_experts_per_tok", "experts_per_token"}));
  c.hidden_size = r.integer({"hidden_size"});
  c.intermediate_size = r.integer({"moe_intermediate_size", "intermediate_size"});
  const std::string& mt = info.model_type;
  if (mt == "mixtral") {
    c.routing.method = RoutingMethod::kRenormalizeNaive;  // softmax -> top-k -> renormalize
  } else if (mt == "qwen2_moe" || mt == "qwen3_moe") {
    c.routing.method = r.boolean_or("norm_topk_prob", mt == "qwen3_moe")
                           ? RoutingMethod::kRenormalizeNaive
                           : RoutingMethod::kDefault;
  } else if (mt == "deepseek_v3" || mt == "kimi_k2") {
    c.routing.method = RoutingMethod::kDeepSeekV3;
    c.routing.num_expert_groups = static_cast<int>(r.integer_or("n_group", 1));
    c.routing.topk_group = static_cast<int>(r.integer_or("topk_group", 1));
    c.routing.routed_scaling_factor = static_cast<float>(r.number_or("routed_scaling_factor", 1.0));
    c.num_shared_experts = static_cast<int>(r.integer_or("n_shared_experts", 0));
  } else if (mt == "gpt_oss") {
    c.routing.method = RoutingMethod::kRenormalize;  // top-k on logits -> softmax
    c.activation.kind = Activation::kSwigluOai;
    c.activation.swiglu_limit = static_cast<float>(r.number_or("swiglu_limit", 7.0));
    c.has_bias = true;
    c.has_router_bias = true;
  } else {
    MOEKIT_FAIL(where, ": model_type: expected one of mixtral | qwen2_moe | qwen3_moe | ",
                "deepseek_v3 | kimi_k2 | gpt_oss, got '", mt, "'");
  }
  if (mt != "gpt_oss")
    c.activation.kind = parse_hidden_act(r.string_or("hidden_act", "silu"), where);
  try {
    c.validate();
  } catch (const Error& e) {
    MOEKIT_FAIL(where, ": ", e.what());
  }
  return info;
}

}  // namespace moekit::io
