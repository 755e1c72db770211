// The SM90 CUDA experts of the oracle (moekit/oracle/backend.hpp), each paired with the CUDA NoEP
// PrepareFinalize (device-side activation quantize + finalize):
//   cuda_bf16_grouped       bf16 weights and activations (W16A16)
//   cuda_fp8_block_grouped  fp8 128x128 weights x fp8 1x128 activations (W8A8)
//   cuda_w4a16_grouped      NVFP4 / MXFP4 weights, bf16 activations
//   cuda_w4a8_grouped       MXFP4 weights, fp8 per-token activations
// One pipeline (sm90_grouped_experts.hpp) runs them all. The oracle's own chain (device, format,
// quant, activation, routing, shapes, parallel) runs first; its last step asks the experts'
// supports() and prefixes the implementation's name to the reason. The factories only build host
// objects (no device allocation), as the registry requires. Kernels made by make_moe_kernel()
// route on the host by default; callers that want routing on the GPU too set
// `kernel.set_router(route_cuda)` (moekit/routing/route_cuda.hpp).
#include "cuda/experts/register_backends.hpp"

#include <memory>

#include "cuda/experts/sm90_grouped_experts.hpp"
#include "moekit/prepare_finalize/cuda_prepare_finalize.hpp"

namespace moekit::cuda {

void register_backends(BackendRegistry& registry) {
  auto no_ep = [](const MoeProblem&) -> std::unique_ptr<PrepareFinalize> {
    return make_cuda_no_ep_prepare_finalize(0);
  };
  auto experts = [](gemm::GemmScheme scheme) {
    return [scheme](const MoeProblem& p) -> std::unique_ptr<Experts> {
      gemm::GemmScheme s = scheme;
      if (gemm::is_w4a16(s) && p.weight_quant.scheme == QuantScheme::kNVFP4)
        s = gemm::GemmScheme::kW4A16NVFP4;
      return make_sm90_grouped_experts(p, s);
    };
  };
  registry.add(Backend::kCudaBf16Grouped,
               {.make_experts = experts(gemm::GemmScheme::kBF16), .make_prepare_finalize = no_ep});
  registry.add(Backend::kCudaFp8BlockGrouped, {.make_experts = experts(gemm::GemmScheme::kFP8Block),
                                               .make_prepare_finalize = no_ep});
  registry.add(Backend::kCudaW4A16Grouped, {.make_experts = experts(gemm::GemmScheme::kW4A16MXFP4),
                                            .make_prepare_finalize = no_ep});
  registry.add(Backend::kCudaW4A8Grouped, {.make_experts = experts(gemm::GemmScheme::kW4A8MXFP4),
                                           .make_prepare_finalize = no_ep});
}

}  // namespace moekit::cuda
