// Registers the CUDA Experts implementations with the oracle (moekit/oracle/backend.hpp), each
// paired with the CUDA NoEP PrepareFinalize (device-side activation quantize + finalize):
//   cuda_bf16_grouped       make_bf16_grouped_experts       (W16A16, SiLU-and-mul, no biases)
//   cuda_fp8_block_grouped  make_fp8_block_grouped_experts  (W8A8 e4m3 128x128 / 1x128)
//   cuda_w4a16_grouped      make_w4a16_grouped_experts      (NVFP4 / MXFP4 weights, bf16 acts)
// The oracle's own chain (device, format, quant, activation, routing, shapes, parallel) runs
// first; its last step asks the experts' supports() (device present and SM90, exact quant pair,
// SiLU / SwiGLU-OAI, biases, E <= 512, alignment), so refusal reasons name the implementation;
// PairedExperts adds what the pairing with the NoEP prepare cannot run (see below).
// The factories only build host objects (no device allocation), as the registry requires: the
// oracle instantiates them to ask supports(). Kernels made by make_moe_kernel() route on the host
// by default; callers that want routing on the GPU too (moekit run, the layer tests) set
// `kernel.set_router(route_cuda)` (moekit/routing/route_cuda.hpp).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "cuda/experts/bf16_experts.hpp"
#include "cuda/experts/fp8_block_experts.hpp"
#include "cuda/experts/w4a16_experts.hpp"
#include "moekit/oracle/backend.hpp"
#include "moekit/prepare_finalize/cuda_prepare_finalize.hpp"

namespace moekit {
namespace {

std::unique_ptr<PrepareFinalize> cuda_no_ep(const MoeProblem&) {
  return make_cuda_no_ep_prepare_finalize(0);
}

// The experts of a registered backend, refusing what the pairing with the CUDA NoEP prepare
// cannot run (measured on an H200, 2026-11-29): with the router weight applied on the input
// (Llama4) and bf16 activations (W16A16 / W4A16), the prepare hands the experts the f32 scaled
// rows x * w, while the experts take bf16 ("in.a1q.values: expected bf16"). Quantized activations
// (fp8_block) are quantized from those f32 rows and work. Everything else is forwarded.
class PairedExperts final : public ModularExperts {
 public:
  explicit PairedExperts(std::unique_ptr<ModularExperts> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  ActivationFormat activation_format() const override { return inner_->activation_format(); }
  Device device() const override { return inner_->device(); }
  std::int64_t max_tokens_per_rank() const override { return inner_->max_tokens_per_rank(); }
  int num_dispatchers() const override { return inner_->num_dispatchers(); }
  Support supports(const MoeProblem& p) const override {
    if (p.apply_router_weight_on_input() && p.activation_quant.scheme == QuantScheme::kBF16) {
      return Support::no(
          "router weight on the input (Llama4) with bf16 activations: the CUDA NoEP prepare "
          "produces f32 scaled rows, these experts take bf16 (use fp8_block, or the CPU)");
    }
    return inner_->supports(p);
  }
  WorkspaceShapes workspace_shapes(const MoeProblem& p) const override {
    return inner_->workspace_shapes(p);
  }
  void prepare_weights(const MoeProblem& p, const MoeWeights& w, StreamHandle stream) override {
    inner_->prepare_weights(p, w, stream);
  }
  ReducePolicy reduce_policy() const override { return inner_->reduce_policy(); }
  void apply(const DispatchedActivations& in, const TensorView& output,
             const TensorView& workspace13, const TensorView& workspace2,
             StreamHandle stream) override {
    inner_->apply(in, output, workspace13, workspace2, stream);
  }

 private:
  std::unique_ptr<ModularExperts> inner_;
};

std::unique_ptr<Experts> paired(std::unique_ptr<ModularExperts> inner) {
  return std::make_unique<PairedExperts>(std::move(inner));
}

}  // namespace

MOEKIT_REGISTER_MOE_BACKEND(cuda_bf16_grouped, Backend::kCudaBf16Grouped,
                            {.make_experts = [](const MoeProblem& p)
                                 -> std::unique_ptr<Experts> {
                               return paired(cuda::make_bf16_grouped_experts(p));
                             },
                             .make_prepare_finalize = cuda_no_ep});

MOEKIT_REGISTER_MOE_BACKEND(cuda_fp8_block_grouped, Backend::kCudaFp8BlockGrouped,
                            {.make_experts = [](const MoeProblem& p)
                                 -> std::unique_ptr<Experts> {
                               return paired(cuda::make_fp8_block_grouped_experts(p));
                             },
                             .make_prepare_finalize = cuda_no_ep});

MOEKIT_REGISTER_MOE_BACKEND(cuda_w4a16_grouped, Backend::kCudaW4A16Grouped,
                            {.make_experts = [](const MoeProblem& p)
                                 -> std::unique_ptr<Experts> {
                               return paired(cuda::make_w4a16_grouped_experts(p));
                             },
                             .make_prepare_finalize = cuda_no_ep});

}  // namespace moekit
