// The CUDA PrepareFinalize implementations (framework contract: moekit/framework/
// prepare_finalize.hpp). Device tensors; asynchronous on the stream with no allocation and no host
// synchronization, so a FusedMoEKernel pairing them with CUDA experts can be graph-captured.
// Available in CUDA builds (MOEKIT_WITH_CUDA) only.
//
// NoEP (standard format), the CUDA twin of make_cpu_no_ep_prepare_finalize():
//   prepare:  x [M, H] bf16/f32 -> quantize(problem.activation_quant with LINEAR block scales,
//             backend cuda: byte-identical to the reference) into the workspace; topk passes
//             through. Llama4 (weight on input, k = 1): x * w[:, 0] in f32 first, as the CPU does.
//   finalize: kAlreadyReduced: copy / convert [M, H] into output; kContiguous: [M, k, H] expert
//             output weighted and summed in slot order (unpermute_reduce_cuda: bit-identical to
//             the CPU finalize). Workspace layout = the CPU NoEP's (same ByteCarver sequence).
//   Expert parallel maps are not supported here (supports() says so): single device, all experts.
#pragma once

#include <memory>

#include "moekit/framework/prepare_finalize.hpp"

namespace moekit {

std::unique_ptr<ModularPrepareFinalize> make_cuda_no_ep_prepare_finalize(int device = 0);

}  // namespace moekit
