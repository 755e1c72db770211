// The oracle: priority lists, per-backend supports() chains, selection with override, and kernel
// construction for a selected backend.
#include "moekit/oracle/oracle.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/env_switch.hpp"
#include "moekit/core/error.hpp"
#include "moekit/moe/reference.hpp"

namespace moekit {
namespace {

using QS = QuantScheme;

bool in(QS s, std::initializer_list<QS> set) {
  for (QS x : set)
    if (x == s) return true;
  return false;
}

std::string scheme_str(QS s) { return std::string(scheme_name(s)); }

// Weight / activation schemes a backend's kernels implement.
Support quant_supported(Backend b, const MoeProblem& p) {
  const QS w = p.weight_quant.scheme, a = p.activation_quant.scheme;
  auto refuse = [&](const char* what) {
    return Support::no("quant " + p.quant_name() + " (weights " + scheme_str(w) + ", activations " +
                       scheme_str(a) + ") not supported: needs " + what);
  };
  switch (b) {
    case Backend::kCpuReference:
    case Backend::kCpuBatched:
    case Backend::kCpuMonolithic:
      return Support::yes();  // every scheme, activations emulated by quantize+dequantize
    case Backend::kCudaBf16Grouped:
      return w == QS::kBF16 && a == QS::kBF16 ? Support::yes()
                                              : refuse("bf16 weights and activations");
    case Backend::kCudaFp8BlockGrouped:
      return w == QS::kFP8Block128x128 && a == QS::kFP8Block1x128
                 ? Support::yes()
                 : refuse("fp8_block (128x128) weights with fp8_1x128 activations");
    case Backend::kCudaW4A16Grouped:
      return in(w, {QS::kNVFP4, QS::kMXFP4}) && a == QS::kBF16
                 ? Support::yes()
                 : refuse("nvfp4/mxfp4 weights with bf16 activations (W4A16)");
    case Backend::kCudaW4A8Grouped:
      return in(w, {QS::kNVFP4, QS::kMXFP4}) &&
                     in(a, {QS::kFP8PerTensor, QS::kFP8PerToken, QS::kMXFP8})
                 ? Support::yes()
                 : refuse("nvfp4/mxfp4 weights with fp8_tensor/fp8_token/mxfp8 activations (W4A8)");
  }
  return refuse("a known backend");
}

// Weight schemes a backend appears for in the priority list (its "family").
bool serves_weight_scheme(Backend b, QS w) {
  MoeProblem probe;
  probe.weight_quant.scheme = w;
  for (QS a : {QS::kBF16, QS::kFP8PerTensor, QS::kFP8PerToken, QS::kFP8Block1x128, QS::kMXFP8,
               QS::kNVFP4}) {
    probe.activation_quant.scheme = a;
    if (quant_supported(b, probe)) return true;
  }
  return false;
}

Support activation_supported(Backend b, const MoeProblem& p) {
  if (!backend_traits(b).on_cuda) return Support::yes();
  const Activation a = p.layer.activation.kind;
  if (a == Activation::kSiluAndMul || a == Activation::kSwigluOai) return Support::yes();
  return Support::no("activation " + std::string(activation_name(a)) +
                     " not implemented (supports silu, swiglu_oai)");
}

Support routing_supported(Backend b, const MoeProblem& p) {
  const RoutingMethod m = p.layer.routing.method;
  const std::string name(routing_method_name(m));
  const bool on_input = routing_weight_on_input(m);
  switch (b) {
    case Backend::kCpuMonolithic:
      if (on_input)
        return Support::no("routing " + name +
                           " scales the input by the router weight "
                           "(needs routing before quantizing the input)");
      return Support::yes();
    default:
      if (on_input && p.top_k() != 1)
        return Support::no("routing " + name +
                           " applies the weight on the input and needs top_k 1");
      return Support::yes();  // modular: routing runs outside the experts
  }
}

Support shapes_supported(Backend b, const MoeProblem& p) {
  const BackendTraits& t = backend_traits(b);
  const std::int64_t h = p.hidden_size(), i = p.intermediate_size();
  std::int64_t align = 1;
  std::string why;
  auto consider = [&](std::int64_t a, const std::string& reason) {
    if (a > align) {
      align = a;
      why = reason;
    }
  };
  const int sfw = scale_block_size(p.weight_quant.scheme),
            sfa = scale_block_size(p.activation_quant.scheme);
  if (sfw > 0 && p.weight_quant.scheme != QS::kFP8Block128x128)
    consider(sfw, std::string(scheme_name(p.weight_quant.scheme)) + " weight scale blocks");
  if (sfa > 0)
    consider(sfa, std::string(scheme_name(p.activation_quant.scheme)) + " activation scale blocks");
  if (t.on_cuda) {
    consider(8, "16-byte aligned bf16 rows of the tensor-core GEMM");
    if (p.weight_quant.scheme == QS::kFP8Block128x128) consider(128, "128x128 weight scale tiles");
  }
  if (h % align != 0 || i % align != 0) {
    return Support::no("hidden " + std::to_string(h) + " / intermediate " + std::to_string(i) +
                       " must be multiples of " + std::to_string(align) + " (" + why +
                       "); pad them in weight preparation");
  }
  return Support::yes();
}

Support parallel_supported(Backend b, const MoeProblem& p) {
  const BackendTraits& t = backend_traits(b);
  if (t.monolithic && !p.parallel.is_identity())
    return Support::no("monolithic kernels run one rank with every expert local (" +
                       p.parallel.str() + ")");
  return Support::yes();
}

Support compiled_in(Backend b) {
  if (!backend_traits(b).on_cuda) return Support::yes();
  if (BackendRegistry::instance().compiled_in(b)) return Support::yes();
#if MOEKIT_WITH_CUDA
  return Support::no("not compiled into this build (no implementation registered)");
#else
  return Support::no("not compiled into this build (CUDA backend OFF)");
#endif
}

// "<implementation>: <reason>", naming the implementation once: supports() reasons do not carry
// the name by convention, but one that already starts with "<name>: " is kept as is.
std::string named_reason(const std::string& name, const std::string& reason) {
  const std::string prefix = name + ": ";
  if (reason.compare(0, prefix.size(), prefix) == 0) return reason;
  return prefix + reason;
}

std::string override_from_env() { return env::value(kBackendEnvVar).value_or(std::string()); }

}  // namespace

Support backend_supports(Backend b, const MoeProblem& p, const DeviceCapabilities& device,
                         ActivationFormat format) {
  const BackendTraits& t = backend_traits(b);
  // 1. Device, and the hardware gate of FP4 activations (W4A4): FP4 tensor cores exist from
  //    SM100 on, and this build has no W4A4 kernel; on SM90 4-bit weights run as W4A16 or W4A8.
  if (t.on_cuda) {
    if (!device.is_cuda)
      return Support::no("needs a CUDA device (sm_" + std::to_string(t.min_sm) +
                         "), device is cpu");
    if (device.sm() != t.min_sm)
      return Support::no("built for sm_90a (Hopper wgmma) only, device is " + device.str());
    const QS a = p.activation_quant.scheme;
    if (a == QS::kNVFP4 || a == QS::kMXFP4)
      return Support::no("fp4 activations (W4A4) need FP4 tensor cores (SM100+), which this "
                         "build has no kernel for; on " + device.str() +
                         " 4-bit weights run as W4A16 (bf16 activations) or W4A8 (fp8_token)");
  }
  // 2. Activation format (follows the parallel config).
  if (t.format != format) {
    return Support::no("needs the " + std::string(activation_format_name(t.format)) +
                       " activation format, the parallel config (" + p.parallel.str() + ") gives " +
                       std::string(activation_format_name(format)));
  }
  // 3-7. Quant scheme, activation, routing, shapes, parallel config.
  for (const Support& s :
       {quant_supported(b, p), activation_supported(b, p), routing_supported(b, p),
        shapes_supported(b, p), parallel_supported(b, p)}) {
    if (!s) return s;
  }
  // 8. Compiled in.
  if (Support s = compiled_in(b); !s) return s;
  // 9. The implementation's own supports().
  if (t.on_cuda) {
    const BackendRegistration* r = BackendRegistry::instance().find(b);
    std::unique_ptr<Experts> e = r->make_experts(p);
    if (!e) return Support::no("implementation factory returned no experts");
    Support s = e->supports(p);
    if (!s) return Support::no(named_reason(e->name(), s.reason));
  }
  return Support::yes();
}

std::vector<Backend> backend_priority(const MoeProblem& p, const DeviceCapabilities& device,
                                      ActivationFormat format) {
  (void)device;
  (void)format;
  const std::vector<Backend> order = {
      Backend::kCudaW4A8Grouped, Backend::kCudaW4A16Grouped, Backend::kCudaFp8BlockGrouped,
      Backend::kCudaBf16Grouped, Backend::kCpuReference,     Backend::kCpuBatched,
      Backend::kCpuMonolithic};
  std::vector<Backend> out;
  for (Backend b : order)
    if (serves_weight_scheme(b, p.weight_quant.scheme)) out.push_back(b);
  return out;
}

std::string BackendSelection::table() const {
  std::ostringstream os;
  for (const Candidate& c : candidates) {
    const bool chosen = c.accepted && c.backend == backend;
    std::string name(moe_backend_name(c.backend));
    name.resize(std::max<std::size_t>(name.size(), 34), ' ');
    os << (chosen ? "  -> " : "     ") << name
       << (c.accepted ? (chosen ? "selected" : "accepted") : "refused: " + c.reason) << "\n";
  }
  return os.str();
}

BackendSelection select_backend(const MoeProblem& p, const DeviceCapabilities& device,
                                const SelectOptions& options) {
  p.validate();
  BackendSelection sel;
  sel.format = options.format.value_or(p.parallel.activation_format());
  auto check = [&](Backend b) {
    Support s = backend_supports(b, p, device, sel.format);
    if (s && !options.executable.empty()) {
      const std::string name = run_backend_for(b);
      bool found = false;
      for (const std::string& e : options.executable) found |= e == name;
      if (!found) s = Support::no("accepted, but not executable by this tool");
    }
    return s;
  };
  for (Backend b : backend_priority(p, device, sel.format)) {
    const Support s = check(b);
    sel.candidates.push_back({b, s.ok, s.reason});
  }
  if (!options.override_name.empty() && options.override_name != "auto") {
    const std::optional<Backend> b = find_moe_backend(options.override_name);
    if (!b) {
      // The names of this build: the registry's (the list every command shows).
      std::string valid;
      for (Backend x : BackendRegistry::instance().registered()) {
        if (!valid.empty()) valid += '|';
        valid += moe_backend_name(x);
      }
      MOEKIT_FAIL("backend override '", options.override_name, "' (from ", options.override_source,
                  ") is not a known backend; valid: ", valid);
    }
    Support s = check(*b);
    if (!s) {
      MOEKIT_FAIL("backend override '", moe_backend_name(*b), "' (from ", options.override_source,
                  ") cannot run this problem: ", s.reason, " [", p.str(), " on ", device.str(),
                  "]");
    }
    bool listed = false;
    for (Candidate& c : sel.candidates) listed |= c.backend == *b;
    if (!listed) sel.candidates.push_back({*b, true, {}});
    sel.backend = *b;
    sel.overridden = true;
    sel.override_source = options.override_source;
    return sel;
  }
  for (const Candidate& c : sel.candidates) {
    if (c.accepted) {
      sel.backend = c.backend;
      return sel;
    }
  }
  MOEKIT_FAIL("no backend can run ", p.str(), " on ", device.str(), ":\n", sel.table());
}

BackendSelection select_backend_for_run(const MoeProblem& p, const DeviceCapabilities& device,
                                        std::string_view cli_backend,
                                        const std::vector<std::string>& executable) {
  SelectOptions o;
  o.executable = executable;
  if (!cli_backend.empty() && cli_backend != "auto") {
    o.override_name = std::string(cli_backend);
    o.override_source = "--backend";
  } else {
    const std::string env = override_from_env();
    if (!env.empty()) {
      o.override_name = env;
      o.override_source = kBackendEnvVar;
    }
  }
  return select_backend(p, device, o);
}

MoeProblem cli_problem(std::string_view preset, std::string_view weight_quant, std::int64_t tokens,
                       std::string_view activation_mode, int ep_size, bool low_latency,
                       std::int64_t hidden_size, std::int64_t intermediate_size, int num_experts) {
  MoeProblem p;
  p.layer = layer_preset(preset);
  if (hidden_size > 0 || intermediate_size > 0 || num_experts > 0)
    p.layer = scaled_layer_config(p.layer, hidden_size, intermediate_size, num_experts);
  p.weight_quant = parse_quant_config(weight_quant);
  MOEKIT_CHECK_ARG(tokens >= 0, "--tokens", ">= 0", tokens);
  p.num_tokens = tokens;
  if (activation_mode == "w4a16" || activation_mode.empty()) {
    p.activation_quant = QuantConfig{};
  } else if (activation_mode == "emulate") {
    p.activation_quant = default_activation_quant(p.weight_quant.scheme);
  } else {
    try {
      p.activation_quant = parse_quant_config(activation_mode);
    } catch (const Error&) {
      throw_arg_error("cli_problem", "--mode",
                      "w4a16 | emulate | an activation quantization (e.g. fp8_token)",
                      std::string(activation_mode));
    }
  }
  p.activation_dtype = DType::kBF16;
  MOEKIT_CHECK_ARG(ep_size >= 1, "--ep", ">= 1", ep_size);
  p.parallel = ParallelConfig::expert_parallel(p.layer.num_experts, ep_size, 0);
  p.parallel.low_latency_dispatch = low_latency;
  p.validate();
  return p;
}

std::string run_backend_for(Backend backend) {
  if (backend == Backend::kCpuReference) return "reference";
  return std::string(moe_backend_name(backend));
}

FusedMoEKernel make_moe_kernel(Backend backend, const MoeProblem& p, FusedMoEOptions options) {
  // The parts are built for the chunk problem (batched parts size T_max from its tokens).
  MoeProblem chunk = p;
  chunk.num_tokens = std::max<std::int64_t>(
      options.max_chunk_tokens > 0 ? std::min(options.max_chunk_tokens, p.num_tokens)
                                   : p.num_tokens,
      1);
  const BackendRegistration* r = BackendRegistry::instance().find(backend);
  MOEKIT_CHECK(r != nullptr, "make_moe_kernel: backend '", moe_backend_name(backend),
               "' is not compiled into this build");
  MOEKIT_CHECK(static_cast<bool>(r->make_prepare_finalize), "make_moe_kernel: backend '",
               moe_backend_name(backend), "' registered no PrepareFinalize");
  return FusedMoEKernel(r->make_prepare_finalize(chunk), r->make_experts(chunk), options);
}

}  // namespace moekit
