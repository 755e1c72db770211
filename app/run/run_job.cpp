// The job behind `moekit run` (run_job.hpp): options checked, the backend chosen and the memory
// checked before anything large is allocated; then the layer, its inputs, the run, the float64
// check and the optional replay output.
#include "run/run_job.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/io/moe_loader.hpp"
#include "moekit/io/replay.hpp"
#include "moekit/io/safetensors.hpp"
#include "moekit/io/staged_output.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/quant/scheme.hpp"
#include "moekit/routing/routing.hpp"
#include "run/backend_choice.hpp"

namespace moekit {

namespace {

// Random weights beyond this are refused even when the machine has the memory: generating them
// and the float64 check would take many minutes; the presets scale down instead.
constexpr double kRandomWeightLimitBytes = 8.0 * (1ull << 30);

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

bool is_weight_scheme(QuantScheme s) {
  return s == QuantScheme::kBF16 || s == QuantScheme::kFP8PerTensor ||
         s == QuantScheme::kFP8Block128x128 || s == QuantScheme::kNVFP4 || s == QuantScheme::kMXFP4;
}

QuantConfig parse_weight_quant(const std::string& text) {
  QuantConfig q;
  try {
    q = parse_quant_config(text);
  } catch (const Error&) {
    throw_arg_error("run", "--quant", "one of bf16|fp8_tensor|fp8_block|nvfp4|mxfp4", text);
  }
  MOEKIT_CHECK_ARG(is_weight_scheme(q.scheme), "--quant",
                   "one of bf16|fp8_tensor|fp8_block|nvfp4|mxfp4", text);
  return q;
}

QuantConfig checkpoint_quant(io::CheckpointFormat f) {
  QuantConfig q;
  switch (f) {
    case io::CheckpointFormat::kBF16: q.scheme = QuantScheme::kBF16; break;
    case io::CheckpointFormat::kModelOptNVFP4:
    case io::CheckpointFormat::kCompressedTensorsNVFP4: q.scheme = QuantScheme::kNVFP4; break;
    case io::CheckpointFormat::kMXFP4: q.scheme = QuantScheme::kMXFP4; break;
    case io::CheckpointFormat::kFP8Block: q.scheme = QuantScheme::kFP8Block128x128; break;
  }
  return q;
}

// --mode: w4a16 | emulate (the weight scheme's default activation quantization) | an explicit
// activation quantization, e.g. fp8_token (W4A8 with mxfp4 weights), emulated by the reference.
MoeReferenceOptions parse_mode(const std::string& mode) {
  MoeReferenceOptions o;
  if (mode == "w4a16" || mode == "emulate") {
    o.numerics = parse_numerics(mode);
    return o;
  }
  o.numerics = MoeNumerics::kEmulateActivationQuant;
  try {
    o.activation_quant = parse_quant_config(mode);
  } catch (const Error&) {
    throw_arg_error("run", "--mode", "w4a16 | emulate | an activation quantization (e.g. fp8_token)",
                    mode);
  }
  return o;
}

// What the replay file's header says, read before any tensor is copied.
struct ReplayShape {
  std::int64_t tokens = 0;
  bool precomputed_routing = false;
};

ReplayShape peek_replay(const std::string& path) {
  ReplayShape r;
  const io::SafetensorsFile f = io::SafetensorsFile::open(path);
  if (f.contains("hidden_states") && !f.info("hidden_states").shape.empty())
    r.tokens = f.info("hidden_states").shape[0];
  r.precomputed_routing = f.contains("topk_ids");
  return r;
}

// "--preset tiny --hidden 512" / "--checkpoint DIR --layer 3": what sizes the weights.
std::string weight_flags(const RunJobOptions& o) {
  if (!o.checkpoint.empty()) return "--checkpoint " + o.checkpoint + " --layer " + std::to_string(o.layer);
  std::string s = "--preset " + o.preset;
  if (o.hidden_size) s += " --hidden " + std::to_string(o.hidden_size);
  if (o.intermediate_size) s += " --intermediate " + std::to_string(o.intermediate_size);
  if (o.num_experts) s += " --experts " + std::to_string(o.num_experts);
  return s;
}

}  // namespace

void describe_layer(RunJobReport& r, const MoeLayerConfig& config, std::int64_t tokens) {
  r.layer = config.str();
  r.preset = config.name;
  r.tokens = tokens;
  r.num_experts = config.num_experts;
  r.top_k = config.top_k();
  r.hidden_size = config.hidden_size;
  r.intermediate_size = config.intermediate_size;
  r.routing = config.routing.str();
  r.activation = config.activation.str();
}

int experts_touched(const Tensor& topk_ids, int num_experts) {
  std::vector<char> touched(static_cast<std::size_t>(num_experts), 0);
  for (std::int64_t s = 0; s < topk_ids.numel(); ++s)
    touched[static_cast<std::size_t>(topk_ids.ptr<std::int32_t>()[s])] = 1;
  int n = 0;
  for (char t : touched) n += t;
  return n;
}

void check_against_reference(RunJobReport& r, const Tensor& out,
                             const std::vector<double>& ref) {
  const ErrorStats err = compare_to_reference(out.ptr<float>(), ref.data(), out.numel());
  r.max_abs_error = err.max_abs;
  r.relative_l2 = err.relative_l2;
  double sq = 0;
  for (double v : ref) sq += v * v;
  r.output_rms = ref.empty() ? 0.0 : std::sqrt(sq / double(ref.size()));
  r.pass = std::isfinite(r.relative_l2) && r.relative_l2 <= r.bound && (r.tokens == 0 || sq > 0);
}

RunJobReport run_job(const RunJobOptions& options) {
  const auto t_setup = std::chrono::steady_clock::now();
  MOEKIT_CHECK_ARG(options.tokens >= 0, "--tokens", ">= 0", options.tokens);
  MOEKIT_CHECK_ARG(options.hidden_size >= 0, "--hidden", ">= 0 (0 = the preset's)",
                   options.hidden_size);
  MOEKIT_CHECK_ARG(options.intermediate_size >= 0, "--intermediate", ">= 0 (0 = the preset's)",
                   options.intermediate_size);
  MOEKIT_CHECK_ARG(options.num_experts >= 0, "--experts", ">= 0 (0 = the preset's)",
                   options.num_experts);
  MOEKIT_CHECK_ARG(options.checkpoint.empty() || options.layer >= 0, "--layer",
                   ">= 0 with --checkpoint", options.layer);
  MOEKIT_CHECK_ARG(!options.checkpoint.empty() || options.layer < 0, "--checkpoint",
                   "a checkpoint directory when --layer is given", "none");
  MOEKIT_CHECK_ARG(options.checkpoint.empty() || std::filesystem::is_directory(options.checkpoint),
                   "--checkpoint", "an existing checkpoint directory", options.checkpoint);
  MOEKIT_CHECK_ARG(options.input.empty() || std::filesystem::is_regular_file(options.input),
                   "--input", "an existing safetensors file", options.input);
  const MoeReferenceOptions numerics = parse_mode(options.mode);
  // A bad --output fails now, not after the layer ran.
  if (!options.output.empty())
    io::check_output_path(options.output, io::OutputKind::kFile,
                          {.overwrite = options.overwrite, .argument = "--output"});

  // The layer's shape and scheme (config.json only, for a checkpoint), and the token count (the
  // replay file's header): enough to choose the backend and size the job.
  MoeLayerConfig config;
  QuantConfig quant;
  if (!options.checkpoint.empty()) {
    const io::CheckpointInfo info = io::read_checkpoint_info(options.checkpoint);
    MOEKIT_CHECK_ARG(options.layer < info.num_hidden_layers, "--layer",
                     "a layer of the checkpoint, in [0, " +
                         std::to_string(info.num_hidden_layers) + ")",
                     options.layer);
    config = info.layer;
    quant = checkpoint_quant(info.format);
  } else {
    quant = parse_weight_quant(options.quant);
    config = layer_preset(options.preset);
    if (options.hidden_size || options.intermediate_size || options.num_experts)
      config = scaled_layer_config(config, options.hidden_size, options.intermediate_size,
                                   options.num_experts);
  }
  ReplayShape replay_shape{options.tokens, false};
  if (!options.input.empty()) replay_shape = peek_replay(options.input);
  const std::string token_flags = options.input.empty()
                                      ? "--tokens " + std::to_string(options.tokens)
                                      : "--input " + options.input + " (" +
                                            std::to_string(replay_shape.tokens) + " tokens)";

  MoeProblem problem = layer_problem(Backend::kCpuReference, config, quant, replay_shape.tokens,
                                     numerics);
  problem.activation_dtype = DType::kBF16;  // what the oracle judges (the model's dtype)
  app::BackendRequest request;
  request.name = options.backend;
  request.precomputed_routing = replay_shape.precomputed_routing;
  request.verbose = options.verbose;
  const Backend backend =
      app::choose_backend(problem, DeviceCapabilities::detect(), request).backend;
  const RunMemoryNeed need = run_memory_need(backend, config, quant, replay_shape.tokens, numerics,
                                             weight_flags(options), token_flags);
  if (options.checkpoint.empty()) {
    // Random weights: also within run's own limit (need.host's first item is the weights).
    const app::MemoryAvailable host = app::host_memory_available();
    if (host.bytes > kRandomWeightLimitBytes)
      app::check_host_memory("run", app::MemoryNeed{{need.host.items.front()}},
                             {kRandomWeightLimitBytes,
                              "moekit run's limit for random weights, whose generation and "
                              "float64 check take many minutes beyond it; scale the preset down "
                              "with --hidden / --intermediate / --experts"});
  }
  app::check_host_memory("run", need.host);
  if (backend_traits(backend).on_cuda) app::check_device_memory("run", need.device, 0);

  // The layer: a real one from a checkpoint, or a preset with deterministic random weights.
  MoeWeights weights;
  RouterWeights router;
  if (!options.checkpoint.empty()) {
    io::MoeLoadOptions load_options;
    load_options.input_scales = io::InputScalePolicy::kMax;  // per-expert calibration is common
    io::MoeLayer loaded = io::load_moe_layer(options.checkpoint, options.layer, load_options);
    config = std::move(loaded.config);
    weights = std::move(loaded.weights);
    router = std::move(loaded.router);
    quant = weights.quant;
  } else {
    weights = random_moe_weights(config, quant, options.seed);
    router = random_router_weights(config, options.seed + 1);
  }

  // The inputs: a replay file, or random hidden states; routing from the file when it has it.
  Tensor hidden, logits, given_ids, given_weights;
  if (!options.input.empty()) {
    io::ReplayInputs replay =
        io::read_replay_inputs(options.input, config.hidden_size, config.num_experts);
    hidden = std::move(replay.hidden_states);
    given_ids = std::move(replay.topk_ids);
    given_weights = std::move(replay.topk_weights);
    if (given_ids.defined()) {
      MOEKIT_CHECK_ARG(given_ids.shape()[1] == config.top_k(), "topk_ids (--input) columns",
                       config.top_k(), given_ids.shape()[1]);
    } else if (replay.router_logits.defined()) {
      logits = std::move(replay.router_logits);
    }
  } else {
    hidden = random_hidden_states(options.tokens, config.hidden_size, DType::kBF16,
                                  options.seed + 2);
  }
  const std::int64_t tokens = hidden.shape()[0];
  if (!given_ids.defined() && !logits.defined()) {
    MOEKIT_CHECK(router.weight.defined(), "run: the layer has no router weight and ",
                 options.input.empty() ? "no replay file" : options.input,
                 " has neither router_logits nor topk_ids/topk_weights");
    logits = router_logits_reference(hidden, router);
  }

  RunJobReport r;
  describe_layer(r, config, tokens);
  r.quant = quant.str();
  r.mode = numerics.activation_quant ? numerics.activation_quant->str()
                                     : std::string(numerics_name(numerics.numerics));
  r.backend = std::string(moe_backend_name(backend));
  r.seed = options.seed;
  r.threads = num_threads();
  r.setup_ms = ms_since(t_setup);

  LayerRunInputs in;
  in.config = &config;
  in.weights = &weights;
  in.hidden_states = hidden.view();
  in.router_logits = logits.view();
  in.correction_bias = router.correction_bias.view();
  in.topk_ids = given_ids.view();
  in.topk_weights = given_weights.view();
  in.options = numerics;
  r.bound = run_error_bound(backend, numerics.numerics,
                            emulated_activation_quant(in.options, weights.quant.scheme).scheme,
                            tokens * config.top_k() * config.intermediate_size);
  Tensor out(DType::kF32, Shape{tokens, config.hidden_size});
  const auto t_layer = std::chrono::steady_clock::now();
  run_layer_on_backend(backend, in, out);
  r.layer_ms = ms_since(t_layer);

  const auto t_ref = std::chrono::steady_clock::now();
  RoutingResult routing;
  if (given_ids.defined()) {
    routing.topk_ids = std::move(given_ids);
    routing.topk_weights = std::move(given_weights);
  } else {
    routing = route_reference(logits, router.correction_bias, config.routing);
  }
  const std::vector<double> ref = moe_reference_float64(
      hidden, routing.topk_ids, routing.topk_weights, config, weights, in.options);
  r.reference_ms = ms_since(t_ref);
  r.experts_touched = experts_touched(routing.topk_ids, config.num_experts);
  check_against_reference(r, out, ref);
  if (!options.output.empty()) {
    std::map<std::string, std::string> meta{{"backend", r.backend}, {"quant", quant.str()},
                                            {"layer", config.str()}};
    if (!options.checkpoint.empty()) {
      meta["checkpoint"] = options.checkpoint;
      meta["layer_index"] = std::to_string(options.layer);
    }
    io::write_replay_outputs(options.output, out.view(), routing.topk_ids.view(),
                             routing.topk_weights.view(), meta, options.overwrite);
  }
  return r;
}

}  // namespace moekit
