// A MoE layer from the caller's own weights, run on the backend the oracle picks (an SM90 GPU when
// there is one, the CPU otherwise) and checked against moekit's float64 reference.
#include <cstdint>
#include <cstdio>

#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/oracle/oracle.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/routing/routing.hpp"

int main() {
  using namespace moekit;
  // The layer: 16 experts, top-2 of softmax (renormalized), H 1024, I 512, SiLU-and-mul.
  MoeProblem p;
  p.num_tokens = 32;
  p.layer.num_experts = 16;
  p.layer.hidden_size = 1024;
  p.layer.intermediate_size = 512;
  p.layer.routing.method = RoutingMethod::kRenormalizeNaive;
  p.layer.routing.top_k = 2;
  p.weight_quant = parse_quant_config("mxfp4");  // W4A16 on the GPU: bf16 activations
  p.activation_dtype = DType::kBF16;

  // "Our own" weights: bf16 masters quantized to MXFP4 with moekit's quantize op, and hidden
  // states with their router logits (a checkpoint loader would fill the same structs).
  const MoeWeights weights = random_moe_weights(p.layer, p.weight_quant, /*seed=*/7);
  const Tensor x = random_hidden_states(p.num_tokens, p.layer.hidden_size, DType::kBF16, 8);
  const Tensor logits = router_logits_reference(x, random_router_weights(p.layer, 9));

  const BackendSelection sel = select_backend(p, DeviceCapabilities::detect());
  std::printf("%s", sel.table().c_str());
  FusedMoEKernel kernel = make_moe_kernel(sel.backend, p);
  const Device dev = kernel.device();
  kernel.prepare(p, weights);  // weights are copied to the device by the backend if needed
  Tensor x_dev(DType::kBF16, x.shape(), dev), logits_dev(DType::kF32, logits.shape(), dev);
  Tensor out_dev(DType::kBF16, x.shape(), dev), out(DType::kBF16, x.shape());
  copy(x_dev, x);
  copy(logits_dev, logits);
  kernel.apply_logits(x_dev, logits_dev, out_dev);  // routing on the host by default
  copy(out, out_dev);                                // synchronizes

  // Check against the float64 layer on the same routing.
  Tensor ids(DType::kI32, Shape{p.num_tokens, 2}), w(DType::kF32, Shape{p.num_tokens, 2});
  route_reference(logits, {}, p.layer.routing, ids, w);
  Tensor out_f32(DType::kF32, x.shape());
  for (std::int64_t i = 0; i < out.numel(); ++i)
    out_f32.ptr<float>()[i] = bf16_to_float(out.ptr<std::uint16_t>()[i]);
  const auto ref = moe_reference_float64(x, ids, w, p.layer, weights);
  const ErrorStats err = compare_to_reference(out_f32.ptr<float>(), ref.data(), out_f32.numel());
  std::printf("backend %s on %s: relative L2 error %.2e\n", kernel.name().c_str(),
              dev.str().c_str(), err.relative_l2);
  return err.relative_l2 < 1e-2 ? 0 : 1;
}
