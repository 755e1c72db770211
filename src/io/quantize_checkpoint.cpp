// quantize_checkpoint: bf16 HF MoE checkpoint -> ModelOpt NVFP4 / compressed-tensors NVFP4 /
// gpt-oss-layout MXFP4 / DeepSeek FP8-block checkpoint.
#include "moekit/io/quantize_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "io/json_util.hpp"
#include "io/load_util.hpp"
#include "io/non_finite.hpp"
#include "moekit/activation/activation.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/io/moe_export.hpp"
#include "moekit/io/staged_output.hpp"

namespace moekit::io {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

float amax_of(const TensorView& v) {
  std::vector<float> f(static_cast<std::size_t>(v.numel()));
  detail::to_f32(v, f.data());
  float m = 0.0f;
  for (float x : f) m = std::fmax(m, std::fabs(x));
  return m;
}

// amax of the GEMM2 input over every token through every expert (see the header).
float gemm2_input_amax(const TensorView& x_bf16_or_f32, const MoeWeights& w,
                       const ActivationConfig& act, std::int64_t max_tokens) {
  const std::int64_t m = std::min<std::int64_t>(x_bf16_or_f32.size(0), max_tokens);
  const std::int64_t h = w.hidden_size, i = w.intermediate_size;
  if (m == 0) return 0.0f;
  std::vector<float> x(static_cast<std::size_t>(m * h));
  detail::to_f32(TensorView(x_bf16_or_f32.data, x_bf16_or_f32.dtype, Shape{m, h}), x.data());
  std::vector<float> per_expert(static_cast<std::size_t>(w.num_experts), 0.0f);
  parallel_for(w.num_experts, 1, [&](std::int64_t e0, std::int64_t e1) {
    std::vector<float> wt(static_cast<std::size_t>(2 * i * h));
    Tensor g1(DType::kF32, Shape{m, 2 * i}), out(DType::kF32, Shape{m, i});
    for (std::int64_t e = e0; e < e1; ++e) {
      detail::to_f32(TensorView(w.w13.values.ptr<std::uint16_t>() + e * 2 * i * h, DType::kBF16,
                                Shape{2 * i, h}),
                     wt.data());
      float* g = g1.ptr<float>();
      for (std::int64_t t = 0; t < m; ++t)
        for (std::int64_t r = 0; r < 2 * i; ++r) {
          float acc = 0.0f;
          for (std::int64_t k = 0; k < h; ++k)
            acc += x[static_cast<std::size_t>(t * h + k)] * wt[static_cast<std::size_t>(r * h + k)];
          g[t * 2 * i + r] = acc;
        }
      activation_reference(g1.view(), act, out.view());
      float mx = 0.0f;
      for (std::int64_t k = 0; k < m * i; ++k) mx = std::fmax(mx, std::fabs(out.ptr<float>()[k]));
      per_expert[static_cast<std::size_t>(e)] = mx;
    }
  });
  return *std::max_element(per_expert.begin(), per_expert.end());
}

json quantization_config(CheckpointFormat f, const std::vector<std::string>& excluded) {
  switch (f) {
    case CheckpointFormat::kModelOptNVFP4:
      return {{"quant_method", "modelopt"},
              {"quant_algo", "NVFP4"},
              {"group_size", 16},
              {"exclude_modules", excluded},
              {"producer", "moekit"}};
    case CheckpointFormat::kCompressedTensorsNVFP4: {
      json scheme = {{"num_bits", 4},    {"type", "float"},   {"strategy", "tensor_group"},
                     {"group_size", 16}, {"symmetric", true}, {"dynamic", false}};
      json act = scheme;
      act["dynamic"] = "local";
      return {{"quant_method", "compressed-tensors"},
              {"format", "nvfp4-pack-quantized"},
              {"config_groups",
               {{"group_0",
                 {{"format", "nvfp4-pack-quantized"},
                  {"targets", {"Linear"}},
                  {"weights", scheme},
                  {"input_activations", act}}}}},
              {"ignore", excluded}};
    }
    case CheckpointFormat::kMXFP4:
      return {{"quant_method", "mxfp4"}, {"modules_to_not_convert", excluded}};
    case CheckpointFormat::kFP8Block:
      return {{"quant_method", "fp8"},
              {"fmt", "e4m3"},
              {"activation_scheme", "dynamic"},
              {"weight_block_size", {128, 128}},
              {"modules_to_not_convert", excluded}};
    case CheckpointFormat::kBF16:
      break;
  }
  return nullptr;
}

// Whether `inner` is `outer` or lies below it (both absolute and normalized).
bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty() && std::next(o) == outer.end()) break;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) MOEKIT_FAIL("quantize_checkpoint: writing '", path.string(), "' failed");
}

}  // namespace

QuantizeCheckpointResult quantize_checkpoint(const std::string& input_dir,
                                             const std::string& output_dir,
                                             const QuantizeCheckpointOptions& options) {
  MOEKIT_CHECK_ARG(options.format != CheckpointFormat::kBF16, "format",
                   "a quantized format (modelopt_nvfp4 | ct_nvfp4 | mxfp4 | fp8_block)", "bf16");
  CheckpointInfo info = read_checkpoint_info(input_dir);
  MOEKIT_CHECK_ARG(info.format == CheckpointFormat::kBF16, "input checkpoint format", "bf16",
                   checkpoint_format_name(info.format));
  // The input is only read; the output never is the input nor holds it (--overwrite would
  // delete it with the old output).
  const fs::path in_abs = fs::weakly_canonical(input_dir);
  const fs::path out_abs = fs::weakly_canonical(output_dir);
  MOEKIT_CHECK_ARG(in_abs != out_abs, "output_dir", "different from the input directory",
                   output_dir);
  MOEKIT_CHECK_ARG(!is_within(in_abs, out_abs), "output_dir",
                   "a directory that does not contain the input directory", output_dir);
  check_output_path(output_dir, OutputKind::kDirectory,
                    {.overwrite = options.overwrite, .argument = "output_dir"});
  const MoeLayerConfig& lc = info.layer;
  // Shape requirements of the target, checked before anything is written.
  QuantConfig qc;
  qc.scheme = options.format == CheckpointFormat::kMXFP4      ? QuantScheme::kMXFP4
              : options.format == CheckpointFormat::kFP8Block ? QuantScheme::kFP8Block128x128
                                                              : QuantScheme::kNVFP4;
  infer_quant_shapes(Shape{2 * lc.intermediate_size, lc.hidden_size}, qc);
  infer_quant_shapes(Shape{lc.hidden_size, lc.intermediate_size}, qc);
  MOEKIT_CHECK_ARG(options.format != CheckpointFormat::kFP8Block || lc.intermediate_size % 128 == 0,
                   "intermediate_size", "a multiple of 128 for fp8_block", lc.intermediate_size);

  Checkpoint ck = Checkpoint::open(input_dir);
  std::vector<int> all = moe_layer_indices(ck, info);
  std::vector<int> layers = options.layers.empty() ? all : options.layers;
  for (int l : layers)
    MOEKIT_CHECK_ARG(std::find(all.begin(), all.end(), l) != all.end(), "layers",
                     "MoE layers of the checkpoint", l);
  std::optional<SafetensorsFile> calib;
  if (!options.calibration_file.empty()) calib = SafetensorsFile::open(options.calibration_file);

  // Everything is written into a hidden sibling of output_dir, renamed into place at the end:
  // a failure or an interruption leaves no partial checkpoint and no empty directory.
  StagedOutput staged(output_dir, OutputKind::kDirectory,
                      {.overwrite = options.overwrite, .argument = "output_dir"});
  const fs::path out_dir = staged.staging_path();
  const ExpertNaming naming =
      info.model_type == "mixtral" ? ExpertNaming::kMixtral : ExpertNaming::kQwen;
  QuantizeCheckpointResult result;
  result.layers = layers;
  json weight_map = json::object();
  std::set<std::string> replaced;  // input tensor names superseded by quantized ones
  std::set<std::string> excluded;  // modules left in bf16 (routers and pass-through linears)
  int done = 0;
  for (int l : layers) {
    MoeLayer layer = load_moe_layer(ck, info, l);
    for (const auto& t :
         export_moe_layer(layer.weights, layer.router, CheckpointFormat::kBF16, l, naming))
      replaced.insert(t.name);
    InputAmax amax{options.default_input_amax, options.default_input_amax};
    if (calib) {
      const std::string per_layer = "model.layers." + std::to_string(l) + ".hidden_states";
      const std::string name = calib->contains(per_layer) ? per_layer : "hidden_states";
      TensorView x = calib->view(name);
      if (x.rank() != 2 || x.size(1) != lc.hidden_size ||
          !(x.dtype == DType::kF32 || x.dtype == DType::kBF16 || x.dtype == DType::kF16))
        MOEKIT_FAIL("calibration file '", options.calibration_file, "': tensor '", name,
                    "': expected f32/bf16/f16 [M, ", lc.hidden_size, "], got ", x.str());
      if (const std::string bad = detail::non_finite_message(x); !bad.empty())
        MOEKIT_FAIL("calibration file '", options.calibration_file, "': tensor '", name, "' ",
                    bad);
      amax.amax13 = amax_of(x);
      amax.amax2 = gemm2_input_amax(x, layer.weights, layer.config.activation,
                                    options.max_calibration_tokens);
      MOEKIT_CHECK(amax.amax13 > 0.0f && amax.amax2 > 0.0f, "calibration file '",
                   options.calibration_file, "': tensor '", name,
                   "': expected non-zero activations, got amax 0");
    }
    MoeWeights q = quantize_for_checkpoint(layer.weights, options.format, &amax);
    auto tensors = export_moe_layer(q, layer.router, options.format, l, naming);
    const std::string file = "model-moe-layer-" + std::to_string(l) + ".safetensors";
    SafetensorsWriteOptions wo;
    wo.metadata = {{"format", "pt"}, {"producer", "moekit quantize"}};
    write_safetensors((out_dir / file).string(), named_views(tensors), wo);
    for (const auto& t : tensors) {
      weight_map[t.name] = file;
      for (const char* router : {".gate.weight", ".router.weight"})
        if (t.name.ends_with(router)) excluded.insert(t.name.substr(0, t.name.size() - 7));
    }
    result.tensors_written += tensors.size();
    if (options.progress) options.progress(++done, static_cast<int>(layers.size()), l);
  }

  // Everything else passes through unchanged (zero-copy views of the input mapping).
  std::vector<NamedTensor> rest;
  for (const auto& name : ck.names()) {
    if (replaced.count(name)) continue;
    const SafetensorsFile& f = ck.file_of(name);
    const SafetensorsTensorInfo& ti = f.info(name);
    std::optional<DType> dt = dtype_from_safetensors(ti.dtype);
    MOEKIT_CHECK(dt.has_value() && *dt != DType::kE2M1x2, "quantize_checkpoint: tensor '", name,
                 "': expected a dtype moekit can copy, got ", ti.dtype);
    rest.push_back({name, f.view(name), ti.dtype});
    const std::string suffix = ".weight";
    if (name.size() > suffix.size() && name.ends_with(suffix) && ti.shape.size() == 2)
      excluded.insert(name.substr(0, name.size() - suffix.size()));
  }
  if (!rest.empty()) {
    write_safetensors((out_dir / "model-rest.safetensors").string(), rest);
    for (const auto& t : rest) weight_map[t.name] = "model-rest.safetensors";
  }
  result.passthrough_tensors = rest.size();
  write_json(out_dir / "model.safetensors.index.json",
             {{"metadata", {{"producer", "moekit quantize"}}}, {"weight_map", weight_map}});

  json config = detail::read_json_file((fs::path(input_dir) / "config.json").string());
  const std::vector<std::string> excluded_list(excluded.begin(), excluded.end());
  config["quantization_config"] = quantization_config(options.format, excluded_list);
  write_json(out_dir / "config.json", config);
  if (options.format == CheckpointFormat::kModelOptNVFP4)
    write_json(
        out_dir / "hf_quant_config.json",
        {{"producer", {{"name", "moekit"}, {"version", "0.1.0"}}},
         {"quantization",
          {{"quant_algo", "NVFP4"}, {"group_size", 16}, {"exclude_modules", excluded_list}}}});
  // Small side files (tokenizer, generation config); weights and index were written above.
  for (const auto& e : fs::directory_iterator(input_dir)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" || n == "config.json" ||
        n == "hf_quant_config.json" || n == "model.safetensors.index.json" ||
        e.file_size() > (64u << 20))
      continue;
    fs::copy_file(e.path(), out_dir / n, fs::copy_options::overwrite_existing);
  }
  staged.commit();
  return result;
}

}  // namespace moekit::io
