// The job behind `moekit run` (run_job.hpp).
#include "run/run_job.hpp"

#include <chrono>
#include <map>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "moekit/io/moe_loader.hpp"
#include "moekit/io/replay.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/quant/scheme.hpp"
#include "moekit/routing/routing.hpp"
#if MOEKIT_WITH_CUDA
#include "moekit/routing/route_cuda.hpp"
#endif

namespace moekit {

namespace {

// Host memory the job needs per weight element (bf16 master + quantized copy + fp32 dequantized
// cache + float64 naive copy, rounded up); jobs above the limit are refused with advice.
constexpr double kHostBytesPerWeight = 16.0;
constexpr double kHostLimitBytes = 8.0 * (1ull << 30);

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

// The CUDA backends `moekit run` can execute (when registered with the oracle), best first.
constexpr Backend kRunCudaBackends[] = {Backend::kCudaW4A8Grouped, Backend::kCudaW4A16Grouped,
                                        Backend::kCudaFp8BlockGrouped, Backend::kCudaBf16Grouped};

std::optional<Backend> run_cuda_backend(std::string_view name) {
  for (Backend b : kRunCudaBackends)
    if (name == moe_backend_name(b)) return b;
  return std::nullopt;
}

#if MOEKIT_WITH_CUDA
// The whole layer on the GPU through the oracle's kernel (CUDA NoEP prepare/finalize + the
// backend's experts, routing on the device with route_cuda): inputs and weights are copied to
// device 0, the bf16 output back into out [M, H] f32. copy() is synchronous, so the final copy
// waits for the layer (default stream).
void run_layer_on_cuda(Backend backend, const LayerRunInputs& in, const TensorView& out) {
  const MoeLayerConfig& c = *in.config;
  const std::int64_t m = in.hidden_states.size(0), h = c.hidden_size;
  MoeProblem p;
  p.num_tokens = m;
  p.layer = c;
  p.weight_quant = in.weights->quant;
  p.activation_quant = in.options.numerics == MoeNumerics::kWeightOnly
                           ? QuantConfig{}
                           : emulated_activation_quant(in.options, in.weights->quant.scheme);
  p.activation_dtype = DType::kBF16;
  FusedMoEKernel kernel = make_moe_kernel(backend, p);
  kernel.set_router(route_cuda);
  kernel.prepare(p, *in.weights);
  const Device gpu = Device::cuda(0);
  Tensor x(DType::kBF16, in.hidden_states.shape, gpu), logits;
  copy(x, in.hidden_states);
  if (in.router_logits.defined()) {
    logits = Tensor(in.router_logits.dtype, in.router_logits.shape, gpu);
    copy(logits, in.router_logits);
  }
  Tensor bias;
  if (in.correction_bias.defined()) {
    bias = Tensor(in.correction_bias.dtype, in.correction_bias.shape, gpu);
    copy(bias, in.correction_bias);
  }
  Tensor y(DType::kBF16, Shape{m, h}, gpu);
  if (in.topk_ids.defined()) {  // precomputed routing (replay files)
    Tensor ids(DType::kI32, in.topk_ids.shape, gpu), wts(DType::kF32, in.topk_weights.shape, gpu);
    copy(ids, in.topk_ids);
    copy(wts, in.topk_weights);
    kernel.apply(x, ids, wts, y);
  } else {
    kernel.apply_logits(x, logits, y, bias);
  }
  Tensor host(DType::kBF16, Shape{m, h});
  copy(host, y);
  const std::uint16_t* src = host.ptr<std::uint16_t>();
  float* dst = static_cast<float*>(out.data);
  for (std::int64_t i = 0; i < m * h; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &u, sizeof(u));
  }
}
#endif

}  // namespace

std::vector<std::string> run_backend_names() {
  // "reference" first: resolve_run_backend("auto") without a problem stays on the CPU; run_job()
  // resolves "auto" through the oracle (select_backend_for_run), which orders by its priority.
  std::vector<std::string> names = {"reference"};
  for (Backend b : kRunCudaBackends)
    if (BackendRegistry::instance().compiled_in(b)) names.emplace_back(moe_backend_name(b));
  return names;
}

std::string resolve_run_backend(std::string_view requested) {
  const std::vector<std::string> names = run_backend_names();
  if (requested == "auto") return names.front();
  std::string valid = "auto";
  for (const auto& n : names) {
    if (n == requested) return n;
    valid += "|" + n;
  }
  throw_arg_error("run", "--backend", "one of " + valid, std::string(requested));
}

double run_error_bound(std::string_view backend, MoeNumerics numerics,
                       QuantScheme activation_scheme, std::int64_t requantized_elements) {
  if (backend == "reference") {
    // fp32 accumulation vs float64 (w4a16).
    if (numerics == MoeNumerics::kWeightOnly) return 1e-5;
    // With activation-quant emulation: a few elements rounding to neighbouring codes.
    return emulation_error_bound(activation_scheme, requantized_elements);
  }
  // CUDA backends (bounds as in tests/cuda/layer/cuda_layer_test.cpp): bf16 inputs and weights
  // exact in bf16, with the GEMM1/activation output, each expert output and the sum rounded to
  // bf16 (a few 2^-9 roundings): 1e-2. fp8_block re-quantizes the bf16-rounded intermediate to
  // e4m3 1x128 groups, moving elements near a rounding boundary by one e4m3 ulp vs the float64
  // emulation: 5e-2. W4A8 (fp8 per-token activations) likewise re-quantizes its intermediate.
  if (const auto b = run_cuda_backend(backend))
    return *b == Backend::kCudaFp8BlockGrouped || *b == Backend::kCudaW4A8Grouped ? 5e-2 : 1e-2;
  throw_arg_error("run_error_bound", "backend", "a name from run_backend_names()",
                  std::string(backend));
}

void run_layer_on_backend(std::string_view backend, const LayerRunInputs& in,
                          const TensorView& out) {
  MOEKIT_CHECK_ARG(in.config && in.weights, "inputs", "config and weights set", "null");
  if (backend == "reference") {
    if (in.topk_ids.defined()) {
      moe_reference_routed(in.hidden_states, in.topk_ids, in.topk_weights, *in.config,
                           *in.weights, out, in.options);
    } else {
      moe_reference(in.hidden_states, in.router_logits, in.correction_bias, *in.config,
                    *in.weights, out, in.options);
    }
    return;
  }
  if (const auto b = run_cuda_backend(backend)) {
#if MOEKIT_WITH_CUDA
    run_layer_on_cuda(*b, in, out);
    return;
#endif
  }
  // Backends added to run_backend_names() are dispatched here.
  throw_arg_error("run_layer_on_backend", "backend", "a name from run_backend_names()",
                  std::string(backend));
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
  // --mode: w4a16 | emulate (the weight scheme's default activation quantization) | an explicit
  // activation quantization, e.g. fp8_token (W4A8 with mxfp4 weights), emulated by the reference.
  MoeNumerics numerics = MoeNumerics::kEmulateActivationQuant;
  std::optional<QuantConfig> activation_quant;
  if (options.mode == "w4a16" || options.mode == "emulate") {
    numerics = parse_numerics(options.mode);
  } else {
    try {
      activation_quant = parse_quant_config(options.mode);
    } catch (const Error&) {
      throw_arg_error("run", "--mode",
                      "w4a16 | emulate | an activation quantization (e.g. fp8_token)",
                      options.mode);
    }
  }
  // "auto": the oracle picks among the backends run_job executes (MOEKIT_BACKEND applies, as in
  // `moekit run`); on a machine without a GPU the CUDA backends are refused and the CPU runs.
  // --quant is validated first so that a bad value gets run's message naming the flag.
  if (options.checkpoint.empty()) (void)parse_weight_quant(options.quant);
  const std::string backend =
      options.backend == "auto" && options.checkpoint.empty()
          ? run_backend_for(select_backend_for_run(
                                cli_problem(options.preset, options.quant, options.tokens,
                                            options.mode, 1, false, options.hidden_size,
                                            options.intermediate_size, options.num_experts),
                                DeviceCapabilities::detect(), "", run_backend_names())
                                .backend)
          : resolve_run_backend(options.backend);
  MOEKIT_CHECK_ARG(options.checkpoint.empty() || options.layer >= 0, "--layer",
                   ">= 0 with --checkpoint", options.layer);
  MOEKIT_CHECK_ARG(!options.checkpoint.empty() || options.layer < 0, "--checkpoint",
                   "a checkpoint directory when --layer is given", "none");

  // The layer: a real one from a checkpoint, or a preset with deterministic random weights.
  MoeLayerConfig config;
  MoeWeights weights;
  RouterWeights router;
  QuantConfig quant;
  if (!options.checkpoint.empty()) {
    io::MoeLoadOptions load_options;
    load_options.input_scales = io::InputScalePolicy::kMax;  // per-expert calibration is common
    io::MoeLayer loaded = io::load_moe_layer(options.checkpoint, options.layer, load_options);
    config = std::move(loaded.config);
    weights = std::move(loaded.weights);
    router = std::move(loaded.router);
    quant = weights.quant;
  } else {
    quant = parse_weight_quant(options.quant);
    config = layer_preset(options.preset);
    if (options.hidden_size || options.intermediate_size || options.num_experts)
      config = scaled_layer_config(config, options.hidden_size, options.intermediate_size,
                                   options.num_experts);
    const double weight_elems = double(config.num_experts) * double(config.hidden_size) *
                                double(config.intermediate_size) *
                                (is_gated(config.activation.kind) ? 3 : 2);
    if (weight_elems * kHostBytesPerWeight > kHostLimitBytes) {
      std::ostringstream os;
      os << "run: preset " << config.name << " needs about "
         << std::lround(weight_elems * kHostBytesPerWeight / (1u << 30))
         << " GiB of host memory to generate and check its weights (limit "
         << std::lround(kHostLimitBytes / (1u << 30))
         << " GiB); scale it down with --hidden / --intermediate / --experts";
      throw Error(os.str());
    }
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
  r.layer = config.str();
  r.preset = config.name;
  r.tokens = tokens;
  r.num_experts = config.num_experts;
  r.top_k = config.top_k();
  r.hidden_size = config.hidden_size;
  r.intermediate_size = config.intermediate_size;
  r.routing = config.routing.str();
  r.activation = config.activation.str();
  r.quant = quant.str();
  r.mode = activation_quant ? activation_quant->str() : std::string(numerics_name(numerics));
  r.backend = backend;
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
  in.options.numerics = numerics;
  in.options.activation_quant = activation_quant;
  r.bound = run_error_bound(backend, numerics,
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
  std::vector<char> touched(static_cast<std::size_t>(config.num_experts), 0);
  for (std::int64_t s = 0; s < routing.topk_ids.numel(); ++s)
    touched[routing.topk_ids.ptr<std::int32_t>()[s]] = 1;
  for (char t : touched) r.experts_touched += t;

  const ErrorStats err = compare_to_reference(out.ptr<float>(), ref.data(), out.numel());
  r.max_abs_error = err.max_abs;
  r.relative_l2 = err.relative_l2;
  double sq = 0;
  for (double v : ref) sq += v * v;
  r.output_rms = ref.empty() ? 0.0 : std::sqrt(sq / double(ref.size()));
  // An all-zero reference for M > 0 would make the check vacuous: count it as a failure.
  r.pass = std::isfinite(r.relative_l2) && r.relative_l2 <= r.bound && (tokens == 0 || sq > 0);
  if (!options.output.empty()) {
    std::map<std::string, std::string> meta{{"backend", backend}, {"quant", quant.str()},
                                            {"layer", config.str()}};
    if (!options.checkpoint.empty()) {
      meta["checkpoint"] = options.checkpoint;
      meta["layer_index"] = std::to_string(options.layer);
    }
    io::write_replay_outputs(options.output, out.view(), routing.topk_ids.view(),
                             routing.topk_weights.view(), meta);
  }
  return r;
}

std::string RunJobReport::text() const {
  char buf[2048];
  std::snprintf(buf, sizeof(buf),
                "moekit run: %s\n"
                "  tokens %lld  experts %d (touched %d)  top-k %d  H %lld  I %lld\n"
                "  routing %s  activation %s\n"
                "  quant %s  mode %s  backend %s  seed %llu  threads %d\n"
                "  time: layer %.3f ms  setup %.1f ms  float64 check %.1f ms\n"
                "  error vs float64 reference: max abs %.3e  relative L2 %.3e  (output rms %.3e)\n"
                "%s: relative L2 %.3e %s bound %.1e\n",
                layer.c_str(), static_cast<long long>(tokens), num_experts, experts_touched, top_k,
                static_cast<long long>(hidden_size), static_cast<long long>(intermediate_size),
                routing.c_str(), activation.c_str(), quant.c_str(), mode.c_str(), backend.c_str(),
                static_cast<unsigned long long>(seed), threads, layer_ms, setup_ms, reference_ms,
                max_abs_error, relative_l2, output_rms, pass ? "PASS" : "FAIL", relative_l2,
                pass ? "<=" : "exceeds", bound);
  return buf;
}

std::string RunJobReport::json() const {
  nlohmann::json j;
  j["layer"] = layer;
  j["preset"] = preset;
  j["tokens"] = tokens;
  j["experts"] = num_experts;
  j["experts_touched"] = experts_touched;
  j["top_k"] = top_k;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["routing"] = routing;
  j["activation"] = activation;
  j["quant"] = quant;
  j["mode"] = mode;
  j["backend"] = backend;
  j["seed"] = seed;
  j["threads"] = threads;
  j["layer_ms"] = layer_ms;
  j["setup_ms"] = setup_ms;
  j["reference_ms"] = reference_ms;
  j["max_abs_error"] = max_abs_error;
  // JSON has no Inf/NaN: a non-finite error is reported as null (and pass is false).
  j["relative_l2"] = std::isfinite(relative_l2) ? nlohmann::json(relative_l2) : nlohmann::json();
  j["output_rms"] = output_rms;
  j["bound"] = bound;
  j["pass"] = pass;
  return j.dump(2);
}

}  // namespace moekit
