// `moekit oracle`: which MoE backend runs a problem on a device, and why every other candidate
// was refused. Honours --backend and MOEKIT_BACKEND exactly like `moekit run` (the same
// choose_backend: an unknown or refused override, or a problem no backend runs, fails with the
// same message; here the table of every candidate's reason always follows it).
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "cli/int_options.hpp"
#include "moekit/core/error.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/oracle/oracle.hpp"
#include "run/backend_choice.hpp"

namespace {

struct OracleOptions {
  std::string preset = "tiny";
  std::string quant = "nvfp4";
  std::int64_t tokens = 64;
  std::string device = "detect";
  std::string mode = "w4a16";
  std::string backend;
  int ep = 1;
  bool low_latency = false;
};

void setup_oracle(CLI::App& sub) {
  auto o = std::make_shared<OracleOptions>();
  std::string presets;
  for (const auto& n : moekit::layer_preset_names()) presets += (presets.empty() ? "" : "|") + n;
  sub.add_option("--preset", o->preset, "Layer preset: " + presets)->capture_default_str();
  sub.add_option("--quant", o->quant,
                 "Weight quantization: bf16|fp8_tensor|fp8_block|nvfp4|mxfp4|mxfp8")
      ->capture_default_str();
  moekit::cli::add_integer_option(sub, "--tokens", o->tokens, "Tokens per rank M", 0,
                                  std::numeric_limits<std::int32_t>::max())
      ->capture_default_str();
  sub.add_option("--device", o->device, "detect|cpu|sm90|sm100|sm_90a|...")->capture_default_str();
  sub.add_option("--mode", o->mode,
                 "Activations: w4a16 (unquantized) | emulate (the scheme's usual activation "
                 "quant) | an activation quant such as mxfp8, fp8_tensor, nvfp4")
      ->capture_default_str();
  moekit::cli::add_integer_option(sub, "--ep", o->ep,
                                  "Expert-parallel ranks (the table is for rank 0)", 1, 1 << 16)
      ->capture_default_str();
  sub.add_flag("--low-latency", o->low_latency,
               "EP low-latency dispatch (batched activation format)");
  sub.add_option("--backend", o->backend,
                 "Override: " + moekit::app::backend_choices_help() + " (else env MOEKIT_BACKEND)");
  sub.callback([o] {
    const moekit::MoeProblem p =
        moekit::cli_problem(o->preset, o->quant, o->tokens, o->mode, o->ep, o->low_latency);
    const moekit::DeviceCapabilities dev = o->device == "detect"
                                               ? moekit::DeviceCapabilities::detect()
                                               : moekit::DeviceCapabilities::parse(o->device);
    moekit::app::BackendRequest request;
    request.name = o->backend;
    request.device_detected = o->device == "detect";
    request.verbose = true;  // explaining is this command's purpose
    const moekit::BackendSelection sel = moekit::app::choose_backend(p, dev, request);
    std::printf("problem: %s\n", p.str().c_str());
    std::printf("device:  %s (%s)\n", dev.str().c_str(), dev.name.c_str());
    std::printf("format:  %s\n", std::string(moekit::activation_format_name(sel.format)).c_str());
    std::printf("candidates (priority order for %s):\n%s", p.quant_name().c_str(),
                sel.table().c_str());
    std::printf("selected: %s%s\n", std::string(moekit::moe_backend_name(sel.backend)).c_str(),
                sel.overridden ? (" (override from " + sel.override_source + ")").c_str() : "");
  });
}

}  // namespace

MOEKIT_REGISTER_COMMAND(oracle, "Explain which MoE backend runs a problem on a device",
                        setup_oracle);
