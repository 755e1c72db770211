// Helpers of the MPI expert-parallel tests: one layer and its inputs built identically on every
// rank (same seed), the single-process CPU run of all tokens (the bitwise reference), and one
// rank's expert-parallel run of its share of the tokens.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "framework/framework_test_util.hpp"
#include "moekit/comm/communicator.hpp"
#include "moekit/framework/cpu.hpp"
#include "moekit/framework/fused_moe.hpp"
#include "moekit/moe/random_weights.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/prepare_finalize/ep_prepare_finalize.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit::testing {

struct EpCase {
  MoeLayerConfig layer;
  QuantConfig wq, aq;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> tokens_per_rank;  // this rank's share is [first, first + count)
  bool static_scales = false;                 // NVFP4 / FP8 per-tensor activations
};

struct EpInputs {
  MoeWeights weights;
  Tensor x, ids, topk_weights;
  std::int64_t total = 0;
};

inline EpInputs make_ep_inputs(const EpCase& c, std::uint64_t seed) {
  EpInputs in;
  for (std::int64_t n : c.tokens_per_rank) in.total += n;
  in.weights = random_moe_weights(c.layer, c.wq, seed);
  if (c.static_scales) {
    in.weights.a13_scale = Tensor(DType::kF32, Shape{c.layer.num_experts});
    in.weights.a2_scale = Tensor(DType::kF32, Shape{c.layer.num_experts});
    for (int e = 0; e < c.layer.num_experts; ++e) {
      in.weights.a13_scale.ptr<float>()[e] = 2688.0f / 4.0f;  // NVFP4 ENCODE scales
      in.weights.a2_scale.ptr<float>()[e] = 2688.0f / 2.0f;
    }
  }
  in.x = random_hidden_states(in.total, c.layer.hidden_size, c.dtype, seed + 2);
  const Tensor xf = random_hidden_states(in.total, c.layer.hidden_size, DType::kF32, seed + 2);
  const RouterWeights router = random_router_weights(c.layer, seed + 1);
  const Tensor logits = router_logits_reference(xf, router);
  RoutingResult r = route_reference(logits, router.correction_bias, c.layer.routing);
  in.ids = std::move(r.topk_ids);
  in.topk_weights = std::move(r.topk_weights);
  return in;
}

inline MoeProblem ep_problem(const EpCase& c, std::int64_t tokens) {
  MoeProblem p;
  p.num_tokens = tokens;
  p.layer = c.layer;
  p.weight_quant = c.wq;
  p.activation_quant = c.aq;
  p.activation_dtype = c.dtype;
  return p;
}

inline Tensor poisoned(DType dtype, Shape shape) {
  Tensor t(dtype, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kF32)
      t.ptr<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    else
      t.ptr<std::uint16_t>()[i] = 0x7FC1;
  }
  return t;
}

// The single-process CPU layer (NoEP + standard experts) of every token: the bitwise reference.
inline Tensor single_process_output(const EpCase& c, const EpInputs& in) {
  FusedMoEKernel k(make_cpu_no_ep_prepare_finalize(), make_cpu_standard_experts());
  k.prepare(ep_problem(c, std::max<std::int64_t>(in.total, 1)), in.weights);
  Tensor out = poisoned(c.dtype, Shape{in.total, c.layer.hidden_size});
  k.apply(in.x, in.ids, in.topk_weights, out);
  return out;
}

inline TensorView rows_of(const Tensor& t, std::int64_t first, std::int64_t n) {
  const std::int64_t width = t.numel() / std::max<std::int64_t>(t.shape()[0], 1);
  return TensorView(static_cast<char*>(t.data()) + first * width * dtype_size(t.dtype()),
                    t.dtype(), Shape{n, t.shape()[1]});
}

struct EpRun {
  Tensor out;          // this rank's output rows
  std::int64_t first;  // its first token in the full batch
};

// This rank's run: its tokens, its experts (parallel.expert_map), the EP PrepareFinalize with
// standard experts (kContiguous or kAlreadyReduced) or batched experts (low latency).
inline EpRun run_ep_rank(Communicator& world_ref, std::shared_ptr<Communicator> world,
                         const EpCase& c, const EpInputs& in, DispatchKind kind, bool batched,
                         ReducePolicy policy, const std::vector<std::int32_t>& expert_map = {}) {
  const int ranks = world_ref.size(), rank = world_ref.rank();
  std::int64_t first = 0, cap = 1;
  for (int r = 0; r < ranks; ++r) {
    if (r < rank) first += c.tokens_per_rank[static_cast<std::size_t>(r)];
    cap = std::max(cap, c.tokens_per_rank[static_cast<std::size_t>(r)]);
  }
  const std::int64_t m = c.tokens_per_rank[static_cast<std::size_t>(rank)];
  MoeProblem p = ep_problem(c, cap);
  p.parallel = ParallelConfig::expert_parallel(c.layer.num_experts, ranks, rank, ranks);
  if (!expert_map.empty()) p.parallel.expert_map = expert_map;
  p.parallel.low_latency_dispatch = batched;
  const MoeWeights local = local_weights(in.weights, p.parallel);
  std::unique_ptr<ModularExperts> experts =
      batched ? make_cpu_batched_experts(cap, ranks, ReducePolicy::kBatchedPerExpert)
              : make_cpu_standard_experts(policy);
  EpPrepareFinalizeOptions o;
  o.kind = kind;
  o.expert_reduce = resolve_reduce_policy(experts->reduce_policy(), experts->activation_format());
  FusedMoEKernel k(make_cpu_ep_prepare_finalize(std::move(world), p, o), std::move(experts));
  k.prepare(p, local);
  EpRun run{poisoned(c.dtype, Shape{m, c.layer.hidden_size}), first};
  k.apply(rows_of(in.x, first, m), rows_of(in.ids, first, m), rows_of(in.topk_weights, first, m),
          run.out);
  return run;
}

}  // namespace moekit::testing
