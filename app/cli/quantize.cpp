// `moekit quantize IN_DIR OUT_DIR --format F`: quantize the MoE experts of a bf16 Hugging Face
// checkpoint into a ModelOpt NVFP4, compressed-tensors NVFP4, MXFP4 (gpt-oss layout) or FP8-block
// checkpoint that moekit's loaders read back (library: moekit/io/quantize_checkpoint.hpp).
// OUT_DIR appears complete or not at all; an existing non-empty one is replaced only with
// --overwrite; the host memory and the disk space it needs are checked before it starts.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "cli/command.hpp"
#include "cli/int_options.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/io/checkpoint.hpp"
#include "moekit/io/quantize_checkpoint.hpp"
#include "run/memory_budget.hpp"

namespace {

namespace fs = std::filesystem;

struct QuantizeArgs {
  std::string input, output, format = "modelopt_nvfp4", calibration, layers;
  float input_amax = 2688.0f;
  std::int64_t calibration_tokens = 256;
  bool overwrite = false;
};

std::vector<int> parse_layers(const std::string& s) {
  std::vector<int> out;
  for (std::int64_t v : moekit::cli::parse_integer_list(s, "--layers", 0,
                                                        std::numeric_limits<std::int32_t>::max()))
    out.push_back(static_cast<int>(v));
  return out;
}

// Host bytes per expert weight element of the layer being quantized: its bf16 copy, the f32
// conversion the quantizer works on, the quantized tensors and their per-expert export slices.
constexpr double kHostBytesPerWeight = 10.0;

// Stored bytes per weight element of the output format, relative to bf16 input.
double output_ratio(moekit::io::CheckpointFormat f) {
  using F = moekit::io::CheckpointFormat;
  switch (f) {
    case F::kModelOptNVFP4:
    case F::kCompressedTensorsNVFP4: return (0.5 + 1.0 / 16) / 2;
    case F::kMXFP4: return (0.5 + 1.0 / 32) / 2;
    default: return (1.0 + 4.0 / (128 * 128)) / 2;
  }
}

bool in_quantized_layer(const std::string& name, const std::vector<int>& layers) {
  if (name.find(".experts.") == std::string::npos) return false;
  if (layers.empty()) return true;
  for (int l : layers)
    if (name.rfind("model.layers." + std::to_string(l) + ".", 0) == 0) return true;
  return false;
}

// Up front: one layer's working memory (+ the calibration pass) against the host's, and the
// output's size against the free space of the file system that will hold it.
void check_resources(const QuantizeArgs& a, const moekit::io::QuantizeCheckpointOptions& o) {
  const moekit::io::CheckpointInfo info = moekit::io::read_checkpoint_info(a.input);
  const moekit::MoeLayerConfig& c = info.layer;
  const double h = double(c.hidden_size), i = double(c.intermediate_size);
  const double layer_elements = double(c.num_experts) * 3 * h * i;
  moekit::app::MemoryNeed need;
  need.items.push_back({"one MoE layer's experts", layer_elements * kHostBytesPerWeight,
                        a.input + " (E " + std::to_string(c.num_experts) + ", H " +
                            std::to_string(c.hidden_size) + ", I " +
                            std::to_string(c.intermediate_size) + ")"});
  if (!a.calibration.empty()) {
    const double m = double(a.calibration_tokens);
    need.items.push_back({"calibration", moekit::num_threads() * (8 * h * i + 12 * m * i) + 4 * m * h,
                          "--calibration-tokens " + std::to_string(a.calibration_tokens)});
  }
  moekit::app::check_host_memory("quantize", need);

  const moekit::io::Checkpoint ck = moekit::io::Checkpoint::open(a.input);
  double out_bytes = 0;
  for (const std::string& n : ck.names()) {
    const double b = double(ck.info(n).nbytes());
    out_bytes += in_quantized_layer(n, o.layers) ? b * output_ratio(o.format) : b;
  }
  fs::path parent = fs::path(a.output).parent_path();
  if (parent.empty()) parent = ".";
  struct statvfs st {};
  if (::statvfs(parent.c_str(), &st) != 0) return;  // check_output_path reports a bad parent
  const double free_bytes = double(st.f_bavail) * double(st.f_frsize);
  if (out_bytes > free_bytes) {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "quantize: output '%s' needs about %.0f bytes (%s) of disk space, %.0f bytes "
                  "(%s) free on the file system of '%s'",
                  a.output.c_str(), out_bytes, moekit::app::gib(out_bytes).c_str(), free_bytes,
                  moekit::app::gib(free_bytes).c_str(), parent.c_str());
    throw moekit::Error(buf);
  }
}

// Test hook (tests/cli): MOEKIT_TEST_QUANTIZE_FAULT=throw:N fails after N layers, pause:N
// stops there for a minute (the test then signals the process), so that an interrupted or
// failed run can be checked to leave nothing behind. Unset in normal use.
void test_fault_after_layer(int done) {
  const char* env = std::getenv("MOEKIT_TEST_QUANTIZE_FAULT");
  if (!env) return;
  const std::string spec = env;
  const auto colon = spec.find(':');
  if (colon == std::string::npos || std::atoi(spec.c_str() + colon + 1) != done) return;
  if (spec.compare(0, colon, "throw") == 0)
    MOEKIT_FAIL("quantize: injected fault after ", done, " layer(s) (MOEKIT_TEST_QUANTIZE_FAULT)");
  if (spec.compare(0, colon, "pause") == 0) {
    std::fprintf(stderr, "\nmoekit: paused after %d layer(s) (MOEKIT_TEST_QUANTIZE_FAULT)\n", done);
    std::fflush(stderr);
    for (int s = 0; s < 60; ++s) ::sleep(1);
  }
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
  test_fault_after_layer(done);
}

void setup_quantize(CLI::App& sub) {
  auto args = std::make_shared<QuantizeArgs>();
  sub.add_option("input", args->input, "bf16 checkpoint directory (config.json + safetensors)")
      ->required();
  sub.add_option("output", args->output,
                 "output directory: a new path in an existing directory, or an empty directory "
                 "(an existing non-empty one only with --overwrite)")
      ->required();
  sub.add_option("--format", args->format,
                 "modelopt_nvfp4 | ct_nvfp4 | mxfp4 (gpt-oss layout) | fp8_block")
      ->capture_default_str();
  sub.add_option("--calibration", args->calibration,
                 "safetensors with hidden_states [M, H] (or model.layers.{L}.hidden_states) for "
                 "NVFP4 input scales");
  moekit::cli::add_positive_real_option(
      sub, "--input-amax", args->input_amax,
      "activation amax used without --calibration (2688 = input_scale 1.0)")
      ->capture_default_str();
  moekit::cli::add_integer_option(
      sub, "--calibration-tokens", args->calibration_tokens,
      "rows of hidden_states pushed through every expert for the GEMM2 input scale", 1,
      std::numeric_limits<std::int32_t>::max())
      ->capture_default_str();
  sub.add_option("--layers", args->layers, "comma-separated MoE layer indices (default: all)");
  sub.add_flag("--overwrite", args->overwrite,
               "Replace an existing non-empty output directory (its old files are deleted once "
               "the new checkpoint is complete; a directory with subdirectories is refused)");
  sub.callback([args] {
    if (!fs::is_directory(args->input))
      moekit::throw_arg_error("quantize", "input", "an existing checkpoint directory", args->input);
    moekit::io::QuantizeCheckpointOptions o;
    o.format = moekit::io::parse_checkpoint_format(args->format);
    o.calibration_file = args->calibration;
    o.default_input_amax = args->input_amax;
    o.max_calibration_tokens = args->calibration_tokens;
    o.layers = parse_layers(args->layers);
    o.overwrite = args->overwrite;
    o.progress = progress_bar;
    check_resources(*args, o);
    moekit::io::QuantizeCheckpointResult r;
    try {
      r = moekit::io::quantize_checkpoint(args->input, args->output, o);
    } catch (...) {
      std::fputc('\n', stderr);  // end the progress bar's line before main() prints the error
      throw;
    }
    std::printf("quantized %zu MoE layer(s) to %s: %zu tensors written, %zu passed through -> %s\n",
                r.layers.size(), args->format.c_str(), r.tensors_written, r.passthrough_tensors,
                args->output.c_str());
  });
}

}  // namespace

MOEKIT_REGISTER_COMMAND(quantize, "Quantize a bf16 MoE checkpoint (NVFP4, MXFP4, FP8 block)",
                        setup_quantize);
