// The job behind `moekit run` (run_job.hpp).
#include "moekit/moe/run_job.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cpu/moe/naive_reference.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/quant/scheme.hpp"
#include "moekit/routing/routing.hpp"

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

}  // namespace

std::vector<std::string> run_backend_names() { return {"reference"}; }

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

double run_error_bound(std::string_view backend, MoeNumerics numerics) {
  // reference: fp32 accumulation vs float64 (w4a16); with activation-quant emulation the fp32
  // and float64 intermediates may round to different FP4/FP8 codes at a few elements.
  if (backend == "reference") return numerics == MoeNumerics::kWeightOnly ? 1e-5 : 2e-3;
  throw_arg_error("run_error_bound", "backend", "a name from run_backend_names()",
                  std::string(backend));
}

void run_layer_on_backend(std::string_view backend, const LayerRunInputs& in,
                          const TensorView& out) {
  MOEKIT_CHECK_ARG(in.config && in.weights, "inputs", "config and weights set", "null");
  if (backend == "reference") {
    moe_reference(in.hidden_states, in.router_logits, in.correction_bias, *in.config, *in.weights,
                  out, in.options);
    return;
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
  const MoeNumerics numerics = parse_numerics(options.mode);
  const QuantConfig quant = parse_weight_quant(options.quant);
  const std::string backend = resolve_run_backend(options.backend);
  MoeLayerConfig config = layer_preset(options.preset);
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

  const MoeWeights weights = random_moe_weights(config, quant, options.seed);
  const RouterWeights router = random_router_weights(config, options.seed + 1);
  const Tensor hidden =
      random_hidden_states(options.tokens, config.hidden_size, DType::kBF16, options.seed + 2);
  const Tensor logits = router_logits_reference(hidden, router);

  RunJobReport r;
  r.layer = config.str();
  r.preset = config.name;
  r.tokens = options.tokens;
  r.num_experts = config.num_experts;
  r.top_k = config.top_k();
  r.hidden_size = config.hidden_size;
  r.intermediate_size = config.intermediate_size;
  r.routing = config.routing.str();
  r.activation = config.activation.str();
  r.quant = quant.str();
  r.mode = std::string(numerics_name(numerics));
  r.backend = backend;
  r.seed = options.seed;
  r.threads = num_threads();
  r.bound = run_error_bound(backend, numerics);
  r.setup_ms = ms_since(t_setup);

  LayerRunInputs in;
  in.config = &config;
  in.weights = &weights;
  in.hidden_states = hidden.view();
  in.router_logits = logits.view();
  in.correction_bias = router.correction_bias.view();
  in.options.numerics = numerics;
  Tensor out(DType::kF32, Shape{options.tokens, config.hidden_size});
  const auto t_layer = std::chrono::steady_clock::now();
  run_layer_on_backend(backend, in, out);
  r.layer_ms = ms_since(t_layer);

  const auto t_ref = std::chrono::steady_clock::now();
  const RoutingResult routing = route_reference(logits, router.correction_bias, config.routing);
  const std::vector<double> ref = cpu::moe_naive_reference(
      hidden, routing.topk_ids, routing.topk_weights, config, weights, in.options);
  r.reference_ms = ms_since(t_ref);
  std::vector<char> touched(static_cast<std::size_t>(config.num_experts), 0);
  for (std::int64_t s = 0; s < routing.topk_ids.numel(); ++s)
    touched[routing.topk_ids.ptr<std::int32_t>()[s]] = 1;
  for (char t : touched) r.experts_touched += t;

  const cpu::ErrorStats err = cpu::compare_to_reference(out.ptr<float>(), ref.data(), out.numel());
  r.max_abs_error = err.max_abs;
  r.relative_l2 = err.relative_l2;
  double sq = 0;
  for (double v : ref) sq += v * v;
  r.output_rms = ref.empty() ? 0.0 : std::sqrt(sq / double(ref.size()));
  // An all-zero reference for M > 0 would make the check vacuous: count it as a failure.
  r.pass =
      std::isfinite(r.relative_l2) && r.relative_l2 <= r.bound && (options.tokens == 0 || sq > 0);
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
