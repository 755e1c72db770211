// The CPU implementations of the framework contracts (host tensors; the reference backend).
//   PrepareFinalize: NoEP (standard), batched (scatter into [E_local, T_max, H]), monolithic.
//   Experts: standard (permute + grouped loop), batched, monolithic (routing + experts + reduce).
// Their arithmetic: weights and activations are dequantized to f32 by the quant reference (the
// quantized values are what the GPU sees), GEMMs accumulate in f32 in K order, activations come
// from activation_reference; see src/cpu/experts/ for the exact order (it is the CPU reference
// layer's, so outputs are bitwise equal to moe_reference*). CPU experts use the MoeWeights passed
// to prepare_weights in place (no copy): the weights must outlive the kernel.
#pragma once

#include <cstdint>
#include <memory>

#include "moekit/framework/experts.hpp"
#include "moekit/framework/prepare_finalize.hpp"

namespace moekit {

std::unique_ptr<ModularPrepareFinalize> make_cpu_no_ep_prepare_finalize();
std::unique_ptr<ModularPrepareFinalize> make_cpu_batched_prepare_finalize(
    std::int64_t max_tokens_per_rank, int num_dispatchers = 1);
std::unique_ptr<MonolithicPrepareFinalize> make_cpu_monolithic_prepare_finalize();

// reduce: the policy the experts report (and implement): kContiguous / kDelegate output
// [M, k, H], kAlreadyReduced output [M, H]. kBatchedPerExpert is refused (standard format).
std::unique_ptr<ModularExperts> make_cpu_standard_experts(
    ReducePolicy reduce = ReducePolicy::kContiguous);
// reduce: kBatchedPerExpert / kDelegate ([E_local, T_max, H]) or kAlreadyReduced ([M, H]).
std::unique_ptr<ModularExperts> make_cpu_batched_experts(
    std::int64_t max_tokens_per_rank, int num_dispatchers = 1,
    ReducePolicy reduce = ReducePolicy::kBatchedPerExpert);
std::unique_ptr<MonolithicExperts> make_cpu_monolithic_experts();

}  // namespace moekit
