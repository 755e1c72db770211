// The CUDA Experts implementations of the oracle (moekit/oracle/backend.hpp), each paired with
// the CUDA NoEP PrepareFinalize (device-side activation quantize + finalize):
//   cuda_bf16_grouped       make_bf16_grouped_experts       (W16A16, SiLU-and-mul, no biases)
//   cuda_fp8_block_grouped  make_fp8_block_grouped_experts  (W8A8 e4m3 128x128 / 1x128)
//   cuda_w4a16_grouped      make_w4a16_grouped_experts      (NVFP4 / MXFP4 weights, bf16 acts)
//   cuda_w4a8_grouped       make_w4a8_grouped_experts       (MXFP4 weights, fp8 per-token acts)
// The oracle's own chain (device, format, quant, activation, routing, shapes, parallel) runs
// first; its last step asks the experts' supports() (device present and SM90, exact quant pair,
// SiLU / SwiGLU-OAI, biases, E <= 512, alignment) and prefixes the implementation's name to the
// reason (supports() reasons do not repeat it). Llama4's router weight on the input is supported
// by every pairing: the NoEP prepare hands f32 rows x * w, which the bf16-activation experts
// round to bf16 (detail::round_input_rows) and the fp8 scheme quantizes in the prepare.
// The factories only build host objects (no device allocation), as the registry requires: the
// oracle instantiates them to ask supports(). Kernels made by make_moe_kernel() route on the host
// by default; callers that want routing on the GPU too (moekit run, the layer tests) set
// `kernel.set_router(route_cuda)` (moekit/routing/route_cuda.hpp).
#include <memory>

#include "cuda/experts/bf16_experts.hpp"
#include "cuda/experts/fp8_block_experts.hpp"
#include "cuda/experts/w4a16_experts.hpp"
#include "cuda/experts/w4a8_experts.hpp"
#include "cuda/experts/register_backends.hpp"
#include "moekit/prepare_finalize/cuda_prepare_finalize.hpp"

namespace moekit::cuda {

void register_backends(BackendRegistry& registry) {
  auto no_ep = [](const MoeProblem&) -> std::unique_ptr<PrepareFinalize> {
    return make_cuda_no_ep_prepare_finalize(0);
  };
  registry.add(Backend::kCudaBf16Grouped,
               {.make_experts = [](const MoeProblem& p) -> std::unique_ptr<Experts> {
                  return make_bf16_grouped_experts(p);
                },
                .make_prepare_finalize = no_ep});
  registry.add(Backend::kCudaFp8BlockGrouped,
               {.make_experts = [](const MoeProblem& p) -> std::unique_ptr<Experts> {
                  return make_fp8_block_grouped_experts(p);
                },
                .make_prepare_finalize = no_ep});
  registry.add(Backend::kCudaW4A16Grouped,
               {.make_experts = [](const MoeProblem& p) -> std::unique_ptr<Experts> {
                  return make_w4a16_grouped_experts(p);
                },
                .make_prepare_finalize = no_ep});
  registry.add(Backend::kCudaW4A8Grouped,
               {.make_experts = [](const MoeProblem& p) -> std::unique_ptr<Experts> {
                  return make_w4a8_grouped_experts(p);
                },
                .make_prepare_finalize = no_ep});
}

}  // namespace moekit::cuda
