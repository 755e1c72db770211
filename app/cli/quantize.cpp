// `moekit quantize IN_DIR OUT_DIR --format F`: quantize the MoE experts of a bf16 Hugging Face
// checkpoint into a ModelOpt NVFP4, compressed-tensors NVFP4, MXFP4 (gpt-oss layout) or FP8-block
// checkpoint that moekit's loaders read back (library: moekit/io/quantize_checkpoint.hpp).
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "cli/command.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/quantize_checkpoint.hpp"

namespace {

struct QuantizeArgs {
  std::string input, output, format = "modelopt_nvfp4", calibration, layers;
  float input_amax = 2688.0f;
  std::int64_t calibration_tokens = 256;
};

std::vector<int> parse_layers(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    std::size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MOEKIT_CHECK_ARG(used == item.size() && v >= 0, "--layers", "comma-separated layer indices",
                     item);
    out.push_back(v);
  }
  return out;
}

// "\r[########............] 3/32 layers (layer 7)" on stderr, a newline at the end.
void progress_bar(int done, int total, int layer) {
  constexpr int kWidth = 30;
  const int filled = total ? done * kWidth / total : kWidth;
  std::fprintf(stderr, "\r[%.*s%.*s] %d/%d layers (layer %d)", filled,
               "##############################", kWidth - filled, "..............................",
               done, total, layer);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

void setup_quantize(CLI::App& sub) {
  auto args = std::make_shared<QuantizeArgs>();
  sub.add_option("input", args->input, "bf16 checkpoint directory (config.json + safetensors)")
      ->required();
  sub.add_option("output", args->output, "output directory (created)")->required();
  sub.add_option("--format", args->format,
                 "modelopt_nvfp4 | ct_nvfp4 | mxfp4 (gpt-oss layout) | fp8_block")
      ->capture_default_str();
  sub.add_option("--calibration", args->calibration,
                 "safetensors with hidden_states [M, H] (or model.layers.{L}.hidden_states) for "
                 "NVFP4 input scales");
  sub.add_option("--input-amax", args->input_amax,
                 "activation amax used without --calibration (2688 = input_scale 1.0)")
      ->capture_default_str();
  sub.add_option("--calibration-tokens", args->calibration_tokens,
                 "rows of hidden_states pushed through every expert for the GEMM2 input scale")
      ->capture_default_str();
  sub.add_option("--layers", args->layers, "comma-separated MoE layer indices (default: all)");
  sub.callback([args] {
    moekit::io::QuantizeCheckpointOptions o;
    o.format = moekit::io::parse_checkpoint_format(args->format);
    o.calibration_file = args->calibration;
    o.default_input_amax = args->input_amax;
    o.max_calibration_tokens = args->calibration_tokens;
    o.layers = parse_layers(args->layers);
    o.progress = progress_bar;
    auto r = moekit::io::quantize_checkpoint(args->input, args->output, o);
    std::printf("quantized %zu MoE layer(s) to %s: %zu tensors written, %zu passed through -> %s\n",
                r.layers.size(), args->format.c_str(), r.tensors_written, r.passthrough_tensors,
                args->output.c_str());
  });
}

}  // namespace

MOEKIT_REGISTER_COMMAND(quantize, "Quantize a bf16 MoE checkpoint (NVFP4, MXFP4, FP8 block)",
                        setup_quantize);
