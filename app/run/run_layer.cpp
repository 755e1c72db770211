// One layer on one backend for `moekit run` (run_job.hpp): the problem each backend runs, its
// error bound vs the float64 reference, its memory need, and the run itself through the oracle's
// kernel factory, for every backend of the build.
#include <cstring>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/routing/routing.hpp"
#include "run/run_job.hpp"
#if MOEKIT_WITH_CUDA
#include "moekit/routing/route_cuda.hpp"
#endif

namespace moekit {

namespace {

bool on_cuda(Backend b) { return backend_traits(b).on_cuda; }

// A host copy of `v` with the same dtype and shape.
Tensor host_copy(const TensorView& v) {
  Tensor t(v.dtype, v.shape);
  if (t.nbytes()) std::memcpy(t.data(), v.data, t.nbytes());
  return t;
}

// bf16 or f32 host [M, H] -> f32 (bf16 widens exactly).
Tensor to_f32(const TensorView& v) {
  if (v.dtype == DType::kF32) return host_copy(v);
  MOEKIT_CHECK_ARG(v.dtype == DType::kBF16, "hidden_states dtype", "bf16 or f32",
                   dtype_name(v.dtype));
  Tensor t(DType::kF32, v.shape);
  const auto* src = static_cast<const std::uint16_t*>(v.data);
  float* dst = t.ptr<float>();
  for (std::int64_t i = 0; i < v.numel(); ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &u, sizeof(u));
  }
  return t;
}

#if MOEKIT_WITH_CUDA
// f32 -> bf16, round to nearest even (the CUDA backends' activation dtype).
Tensor to_bf16(const TensorView& v) {
  if (v.dtype == DType::kBF16) return host_copy(v);
  Tensor t(DType::kBF16, v.shape);
  const float* src = static_cast<const float*>(v.data);
  auto* dst = t.ptr<std::uint16_t>();
  for (std::int64_t i = 0; i < v.numel(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &src[i], sizeof(u));
    dst[i] = static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
  return t;
}
#endif

// Bytes per weight element of a scheme as stored (values + block scales).
double stored_bytes_per_weight(QuantScheme s) {
  switch (s) {
    case QuantScheme::kBF16: return 2.0;
    case QuantScheme::kNVFP4: return 0.5 + 1.0 / 16;
    case QuantScheme::kMXFP4: return 0.5 + 1.0 / 32;
    default: return 1.0 + 1.0 / 128;  // fp8 (per-tensor / 128x128 blocks)
  }
}

// Host bytes per weight element while the job holds the layer: the stored weights, the
// generator's / loader's working copies, the backend's prepared copy and the float64 check's
// copies of every touched expert (8 bytes each). An upper bound: the peak RSS of
// `moekit run --hidden 1024 --intermediate 2048 --tokens 2000 --quant fp8_block` is 13.5 bytes
// per weight with its activations (/usr/bin/time -f %M), 2.5-4 bytes when few experts are touched.
constexpr double kHostBytesPerWeight = 16.0;

#if MOEKIT_WITH_CUDA
// The layer on the GPU: inputs and weights copied to device 0, routing on the device
// (route_cuda), the bf16 output copied back and widened into out [M, H] f32. copy() is
// synchronous, so the final copy waits for the layer (default stream).
void run_on_cuda(FusedMoEKernel& kernel, const LayerRunInputs& in, const TensorView& out) {
  const std::int64_t m = in.hidden_states.size(0), h = in.config->hidden_size;
  kernel.set_router(route_cuda);
  const Device gpu = Device::cuda(0);
  auto to_gpu = [&](const TensorView& v) {
    Tensor t(v.dtype, v.shape, gpu);
    copy(t, v);
    return t;
  };
  const Tensor x16 = to_bf16(in.hidden_states);
  Tensor x = to_gpu(x16.view());
  Tensor y(DType::kBF16, Shape{m, h}, gpu);
  if (in.topk_ids.defined()) {  // precomputed routing (replay files)
    Tensor ids = to_gpu(in.topk_ids), wts = to_gpu(in.topk_weights);
    kernel.apply(x, ids, wts, y);
  } else {
    Tensor logits = to_gpu(in.router_logits);
    Tensor bias = in.correction_bias.defined() ? to_gpu(in.correction_bias) : Tensor();
    kernel.apply_logits(x, logits, y, bias);
  }
  Tensor host(DType::kBF16, Shape{m, h});
  copy(host, y);
  const Tensor f = to_f32(host.view());
  std::memcpy(out.data, f.data(), f.nbytes());
}
#endif

}  // namespace

MoeProblem layer_problem(Backend backend, const MoeLayerConfig& config, const QuantConfig& weights,
                         std::int64_t tokens, const MoeReferenceOptions& options) {
  MoeProblem p;
  p.num_tokens = tokens;
  p.layer = config;
  p.weight_quant = weights;
  p.activation_quant = options.numerics == MoeNumerics::kWeightOnly
                           ? QuantConfig{}
                           : emulated_activation_quant(options, weights.scheme);
  p.activation_dtype = on_cuda(backend) ? DType::kBF16 : DType::kF32;
  p.validate();
  return p;
}

double run_error_bound(Backend backend, MoeNumerics numerics, QuantScheme activation_scheme,
                       std::int64_t requantized_elements) {
  if (!on_cuda(backend)) {
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
  return backend == Backend::kCudaFp8BlockGrouped || backend == Backend::kCudaW4A8Grouped ? 5e-2
                                                                                           : 1e-2;
}

void run_layer_on_backend(Backend backend, const LayerRunInputs& in, const TensorView& out) {
  MOEKIT_CHECK_ARG(in.config && in.weights, "inputs", "config and weights set", "null");
  const std::int64_t m = in.hidden_states.size(0);
  const MoeProblem p = layer_problem(backend, *in.config, in.weights->quant, m, in.options);
  FusedMoEKernel kernel = make_moe_kernel(backend, p);
  kernel.prepare(p, *in.weights);
  if (on_cuda(backend)) {
#if MOEKIT_WITH_CUDA
    run_on_cuda(kernel, in, out);
    return;
#else
    MOEKIT_FAIL("run_layer_on_backend: backend '", moe_backend_name(backend),
                "' needs the CUDA build");
#endif
  }
  // CPU: f32 activations in and out (out is the job's f32 [M, H]); routing on the host.
  const Tensor x = to_f32(in.hidden_states);
  if (in.topk_ids.defined()) {
    kernel.apply(x, in.topk_ids, in.topk_weights, out);
  } else {
    kernel.apply_logits(x, in.router_logits, out, in.correction_bias);
  }
}

RunMemoryNeed run_memory_need(Backend backend, const MoeLayerConfig& c, const QuantConfig& weights,
                              std::int64_t tokens, const MoeReferenceOptions& options,
                              const std::string& weight_flags, const std::string& token_flags) {
  const double e = c.num_experts, h = double(c.hidden_size), i = double(c.intermediate_size),
               k = c.top_k(), m = double(tokens);
  const double elements = e * h * i * (is_gated(c.activation.kind) ? 3 : 2);
  // Per token: hidden states (bf16 + an f32 copy), router logits, routing, the f32 output, and the
  // float64 check (its f32 inputs, the f64 intermediate and output, the re-quantized copies).
  const double per_token = 6 * h + 4 * e + 8 * k + 4 * h + (4 * k * h + 12 * k * i + 12 * h);
  const MoeProblem p = layer_problem(backend, c, weights, tokens, options);
  const double workspace = double(make_moe_kernel(backend, p).workspace_bytes(p));
  RunMemoryNeed need;
  need.host.items = {{"weights", elements * kHostBytesPerWeight, weight_flags},
                     {"activations and float64 check", m * per_token, token_flags}};
  if (on_cuda(backend)) {
    // Device: the weights and their prepared copy, x / y / logits / routing, the workspace.
    need.device.items = {
        {"weights", 2 * elements * stored_bytes_per_weight(weights.scheme), weight_flags},
        {"activations", m * (4 * h + 4 * e + 8 * k), token_flags},
        {"workspace", workspace, token_flags}};
  } else {
    need.host.items.push_back({"workspace", workspace, token_flags});
  }
  return need;
}

}  // namespace moekit
