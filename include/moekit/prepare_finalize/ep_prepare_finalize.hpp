// Expert-parallel PrepareFinalize over a Communicator (docs/expert_parallel.md): the tokens of
// every rank reach the ranks that own their experts, and the expert outputs come back.
//
//   naive (AgRs): prepare quantizes this rank's tokens (quantize-then-dispatch: 4/8-bit bytes and
//     their per-row scales travel) into a block padded to the per-rank capacity C =
//     problem.num_tokens, and all-gathers blocks, top-k ids and weights; the experts compute their
//     local experts for all ranks' tokens (the expert_map masks the others); finalize
//     reduce-scatters (sum) the expert outputs back to each rank's block. Padding rows are zero
//     tokens with zero weights. Asynchronous and CUDA-graph capturable on the GPU.
//   all-to-all (a2a): each token goes only to the ranks owning one of its experts (counts
//     exchanged first, then one all_to_all_v per tensor), in the standard format [R, H] or, with
//     problem.parallel.low_latency_dispatch, the batched format [E_local, T_max = C * ep_size, H]
//     with expert_num_tokens; combine returns each (token, slot) result to the token's rank. The
//     routing plan is computed on the host (a device->host copy of the ids on the GPU): not
//     graph-capturable.
//
// THE REDUCTION ORDER (why outputs are bitwise equal to the single-process layer): with experts
// whose policy keeps the k slots apart (kContiguous / kBatchedPerExpert), every slot's unweighted
// output row comes home unchanged (naive: summed with zeros only, exact in any order; a2a: moved)
// and the token's own rank weights and sums its k slots in slot order, exactly as the NoEP
// finalize (unpermute_reduce). Experts that reduce themselves (kAlreadyReduced) give one partial
// sum per rank instead, summed in rank order: deterministic, but reassociated (not bitwise).
//
// Activations with a DYNAMIC per-tensor scale (fp8_tensor, nvfp4 without a static a13_scale)
// would be quantized with a different scale on each rank: prepare refuses them; pass static
// scales. Every rank must call FusedMoEKernel::prepare (collective handshake: problem fields and
// expert ownership) and then apply() once per step with <= problem.num_tokens rows, even none.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "moekit/comm/communicator.hpp"
#include "moekit/framework/experts.hpp"
#include "moekit/framework/prepare_finalize.hpp"

namespace moekit {

enum class DispatchKind : std::uint8_t { kNaive, kAllToAll };
std::string_view dispatch_kind_name(DispatchKind k);  // "naive", "a2a"

struct EpPrepareFinalizeOptions {
  DispatchKind kind = DispatchKind::kAllToAll;
  // The policy of the paired experts (after resolve_reduce_policy): sizes the combine buffers.
  ReducePolicy expert_reduce = ReducePolicy::kContiguous;
};

// CPU ranks over an mpi (host) communicator. problem: the chunk problem (num_tokens = tokens per
// rank C, parallel config of this rank; low_latency_dispatch selects the batched format).
std::unique_ptr<ModularPrepareFinalize> make_cpu_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, const MoeProblem& problem,
    EpPrepareFinalizeOptions options = {});

// GPU ranks over an nccl communicator on CUDA device `device` (CUDA builds with NCCL).
std::unique_ptr<ModularPrepareFinalize> make_cuda_ep_prepare_finalize(
    std::shared_ptr<Communicator> comm, const MoeProblem& problem,
    EpPrepareFinalizeOptions options = {}, int device = 0);

// The owner rank of every global expert, from every rank's expert_map (all-gathered): refuses a
// map leaving an expert unowned or owned by two ranks, naming the expert and the ranks. Collective.
std::vector<int> expert_owners(Communicator& comm, const ParallelConfig& parallel,
                               int num_experts);

// Collective: throws moekit::Error on EVERY rank when the ranks' problems differ, naming the
// first differing field and the two values ("hidden_size: 128 on rank 0, 256 on rank 1").
void check_ranks_agree(Communicator& comm, const MoeProblem& problem, DispatchKind kind);

}  // namespace moekit
