// The SM90 CUDA experts: one modular-experts pipeline for every weight scheme (bf16, fp8 block,
// W4A16 NVFP4 / MXFP4, W4A8 MXFP4), standard activation format, ReducePolicy::kAlreadyReduced.
// apply() runs, all on the stream and graph-capturable (no host sync, no allocation):
//   permute by expert (permute/)                    expert_offsets, sorted rows, permuted_row
//   -> the GEMM1 input rows: the router-weighted f32 rows of the NoEP prepare rounded to bf16
//      (Llama4), gathered in expert order (permute/; W4A16 wgmma: in its K order), or read by
//      GEMM1 itself through row_index
//   -> GEMM1 [R, 2I] (gemm/) with the gated activation in its epilogue, or the activation kernel
//      after it (activation/; fp8: quantized to 1x128 groups; W4A8: the per-token quantize op)
//   -> GEMM2 [R, H] -> the weighted top-k reduce into [M, H] bf16 (finalize/).
// At decode sizes on the decode kernels both GEMMs sort the rows by expert themselves and GEMM2
// runs the weighted reduce (gemm/decode_routing.hpp): two kernels, the same bits. What runs for a
// call is decided once, by the tuning rules (tuning/sm90_tuning.hpp: experts_plan).
// With an expert map (expert parallelism) the experts hold E_local experts; assignments of other
// ranks' experts are dropped (permuted_row -1) and contribute nothing.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda/gemm/grouped_gemm.hpp"
#include "moekit/framework/experts.hpp"

namespace moekit::cuda {

// The GEMM scheme of a problem's (weight, activation) quantization, or nullopt-like kBF16 with
// `ok` false when no SM90 kernel runs that pair.
struct SchemeChoice {
  bool ok = false;
  gemm::GemmScheme scheme = gemm::GemmScheme::kBF16;
};
SchemeChoice gemm_scheme_of(const MoeProblem& problem);

// The experts for `scheme` (the registered backends: cuda_bf16_grouped, cuda_fp8_block_grouped,
// cuda_w4a16_grouped, cuda_w4a8_grouped). Cheap: no device allocation until prepare_weights.
std::unique_ptr<ModularExperts> make_sm90_grouped_experts(const MoeProblem& problem,
                                                          gemm::GemmScheme scheme);

}  // namespace moekit::cuda
