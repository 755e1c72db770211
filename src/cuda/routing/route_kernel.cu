// The CUDA router (include/moekit/routing/route_cuda.hpp): one warp per token.
//
// Each lane holds the selection scores of experts lane, lane+32, ... in registers (kPerLane of
// them, E <= 32*kPerLane). Top-k is k rounds of a warp arg-max under the reference's strict order
// (higher first, NaN last, ties to the lower index), so ids are exactly the reference's. Weights
// follow src/cpu/routing/route_reference.cpp formula by formula: float64 math, sums accumulated
// sequentially in the reference's order by one lane (k or E terms), rounded once to fp32.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/routing/route_cuda.hpp"

namespace moekit {

namespace {

constexpr int kWarps = 4;          // tokens per CTA
constexpr int kMaxExperts = 512;
constexpr int kMaxTopK = 32;
constexpr int kMaxGroups = 32;

struct RouteArgs {
  const void* logits = nullptr;
  bool logits_bf16 = false;
  const float* bias = nullptr;
  std::int32_t* ids = nullptr;
  float* weights = nullptr;
  std::int64_t m = 0;
  int e = 0, k = 0;
  RoutingMethod method = RoutingMethod::kRenormalize;
  int groups = 1, topk_group = 1;
  float scaling = 1.0f;
};

__device__ __forceinline__ bool ranks_before(float a, int ia, float b, int ib) {
  const bool na = isnan(a), nb = isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

// The reference's fp32 sigmoid 1/(1+expf(-x)): expf as RN(exp(double)) (see route_cuda.hpp).
__device__ __forceinline__ float sigmoid_f32(float x) {
  const float e = static_cast<float>(exp(-static_cast<double>(x)));
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
}

__device__ __forceinline__ double sigmoid_f64(double x) {
  return __ddiv_rn(1.0, __dadd_rn(1.0, exp(-x)));
}

// An unsigned key whose order is ranks_before's: larger key = ranks first; NaN (key 1) after
// every number; -0 and +0 equal. Key 0 = no candidate.
__device__ __forceinline__ unsigned rank_key(float v) {
  unsigned u = __float_as_uint(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 1u;
  if ((u & 0x7FFFFFFFu) == 0u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Warp arg-max under ranks_before: the largest key, then the lowest index among lanes holding it
// (two single-instruction warp reductions). Returns -1 when no lane has a candidate (key 0).
__device__ __forceinline__ int warp_best(unsigned key, int idx) {
  const unsigned best = __reduce_max_sync(0xFFFFFFFFu, key);
  if (best == 0u) return -1;
  const unsigned cand = key == best ? static_cast<unsigned>(idx) : 0xFFFFFFFFu;
  return static_cast<int>(__reduce_min_sync(0xFFFFFFFFu, cand));
}

// rank_key's inverse up to the sign of zero and the NaN payload (key 1 -> a NaN, both zeros ->
// +0), which cannot change a group's rank: see kept_groups_wide.
__device__ __forceinline__ float key_value(unsigned key) {
  if (key == 1u) return __uint_as_float(0x7FC00000u);
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// Top-2 of keys as a pair (first >= second), merged with another disjoint pair.
__device__ __forceinline__ void merge_top2(unsigned& a1, unsigned& a2, unsigned b1, unsigned b2) {
  const unsigned n2 = a1 >= b1 ? max(a2, b1) : max(a1, b2);
  a1 = max(a1, b1);
  a2 = n2;
}

// (top-1, top-2) key pairs of single registers: the valid ones' keys and "no candidate".
template <int kPerLane>
__device__ __forceinline__ void init_top2(const float (&score)[kPerLane], std::uint32_t valid,
                                          unsigned (&t1)[kPerLane], unsigned (&t2)[kPerLane]) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    t1[i] = ((valid >> i) & 1u) ? rank_key(score[i]) : 0u;
    t2[i] = 0u;
  }
}

// DeepSeek-V3 group selection without shared memory, for a power-of-two group size pg = 2^lg.
// Expert e = lane + 32 i (register i of lane) is in group e >> lg. The group score is v1 + v2 of
// its two largest keys (v1 alone when pg == 1) in fp32, as the reference's s[b0] + s[b1]: equal
// keys have equal values except +-0 (and NaN payloads), whose sums have the same rank_key, so the
// kept groups are the reference's. Kept: topk_group rounds of arg-max over (score key, lower
// group). Shifts only (no integer division by the runtime group size).
//
// pg >= 32 (DeepSeek-V3: 256 / 8 = 32): group i >> (lg - 5) for every lane. The c = pg / 32
// registers of a group are merged in-lane; then the warp's top-1 is one __reduce_max_sync, and the
// top-2 another after the lowest lane holding the top-1 offers its second key instead. Every lane
// ends with every group's score, so the kept-group rounds run in-lane.
template <int kPerLane>
__device__ __forceinline__ std::uint32_t kept_groups_wide(const float (&score)[kPerLane],
                                                          std::uint32_t valid, int lg, int keep,
                                                          int lane) {
  const int lc = lg - 5;  // log2(registers per group)
  const int c = 1 << lc;
  unsigned t1[kPerLane], t2[kPerLane];
  init_top2<kPerLane>(score, valid, t1, t2);
#pragma unroll
  for (int st = 1; st < kPerLane; st *= 2) {
    if (st < c) {
#pragma unroll
      for (int i = 0; i + st < kPerLane; i += 2 * st) merge_top2(t1[i], t2[i], t1[i + st], t2[i + st]);
    }
  }
  unsigned gkey[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    gkey[i] = 0u;
    // Uniform over the warp: E is a multiple of 32 here, so register i is valid in every lane.
    if ((i & (c - 1)) == 0 && ((valid >> i) & 1u)) {
      const unsigned m1 = __reduce_max_sync(0xFFFFFFFFu, t1[i]);
      const int holder = __ffs(__ballot_sync(0xFFFFFFFFu, t1[i] == m1)) - 1;
      const unsigned m2 = __reduce_max_sync(0xFFFFFFFFu, lane == holder ? t2[i] : t1[i]);
      gkey[i] = rank_key(__fadd_rn(key_value(m1), key_value(m2)));
    }
  }
  std::uint32_t kept = 0;
  for (int j = 0; j < keep; ++j) {
    unsigned bk = 0u;
    int bi = -1;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (gkey[i] > bk) {  // ascending i = ascending group: ties keep the lower group
        bk = gkey[i];
        bi = i;
      }
    }
    if (bi < 0) break;
    kept |= 1u << (bi >> lc);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (i == bi) gkey[i] = 0u;
  }
  return kept;
}

// pg < 32: group (lane + 32 i) >> lg = i * (32 / pg) + (lane >> lg). A butterfly over the xor
// offsets below pg (the lanes of one aligned segment) merges (top-1, top-2) key pairs of disjoint
// sets, leaving each lane with its segment's top-2 per register; then warp arg-max rounds.
template <int kPerLane>
__device__ __forceinline__ std::uint32_t kept_groups_narrow(const float (&score)[kPerLane],
                                                            std::uint32_t valid, int lg, int keep,
                                                            int lane) {
  const int pg = 1 << lg;
  unsigned t1[kPerLane], t2[kPerLane];
  init_top2<kPerLane>(score, valid, t1, t2);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    if (off < pg) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const unsigned o1 = __shfl_xor_sync(0xFFFFFFFFu, t1[i], off);
        const unsigned o2 = __shfl_xor_sync(0xFFFFFFFFu, t2[i], off);
        merge_top2(t1[i], t2[i], o1, o2);
      }
    }
  }
  unsigned gkey[kPerLane];
  int gidx[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    gidx[i] = (lane + 32 * i) >> lg;
    const float gs = pg >= 2 ? __fadd_rn(key_value(t1[i]), key_value(t2[i])) : key_value(t1[i]);
    gkey[i] = ((valid >> i) & 1u) ? rank_key(gs) : 0u;
  }
  std::uint32_t kept = 0;
  for (int j = 0; j < keep; ++j) {
    unsigned bk = 0u;
    int bg = -1;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (gkey[i] > bk) {  // ascending i = ascending group: ties keep the lower group
        bk = gkey[i];
        bg = gidx[i];
      }
    }
    const int g = warp_best(bk, bg);
    if (g < 0) break;
    kept |= 1u << g;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (gidx[i] == g) gkey[i] = 0u;
  }
  return kept;
}

// The general group selection (any group size): lane g < groups scans its group's scores in
// shared memory for the top-2 (the reference's order), then topk_group rounds of arg-max.
__device__ __forceinline__ std::uint32_t kept_groups_smem(const float* s_score, int groups,
                                                          int per_group, int keep, int lane) {
  __syncwarp();
  float gs = 0.0f;
  int gi = -1;
  if (lane < groups) {
    const float* s = s_score + lane * per_group;
    int b0 = 0;
    for (int i = 1; i < per_group; ++i)
      if (ranks_before(s[i], i, s[b0], b0)) b0 = i;
    gs = s[b0];
    if (per_group >= 2) {
      int b1 = -1;
      for (int i = 0; i < per_group; ++i)
        if (i != b0 && (b1 < 0 || ranks_before(s[i], i, s[b1], b1))) b1 = i;
      gs = __fadd_rn(gs, s[b1]);
    }
    gi = lane;
  }
  std::uint32_t kept = 0;
  unsigned gkey = gi >= 0 ? rank_key(gs) : 0u;
  for (int j = 0; j < keep; ++j) {
    const int g = warp_best(gkey, gi);
    kept |= 1u << g;
    if (g == lane) gkey = 0u;
  }
  return kept;
}

// k rounds of arg-max over the lane's eligible, not yet taken experts; lane j < k gets the j-th
// id (the others 0).
template <int kPerLane>
__device__ __forceinline__ int select_top(const float (&score)[kPerLane], std::uint32_t eligible,
                                          int k, int lane) {
  unsigned key[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) key[i] = ((eligible >> i) & 1u) ? rank_key(score[i]) : 0u;
  int mine = 0;
  for (int j = 0; j < k; ++j) {
    // The lane's best: the largest key; ascending i keeps the lowest index among equal keys.
    unsigned bk = 0u;
    int bi = -1;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (key[i] > bk) {
        bk = key[i];
        bi = lane + 32 * i;
      }
    }
    const int best = warp_best(bk, bi);
    if (best >= 0 && (best & 31) == lane) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (i == (best >> 5)) key[i] = 0u;
    }
    if (lane == j) mine = best;
  }
  return mine;
}

template <int kPerLane>
__global__ void __launch_bounds__(kWarps * 32) route_kernel(RouteArgs a) {
  __shared__ float s_logit[kWarps][kMaxExperts];
  __shared__ float s_score[kWarps][kMaxExperts];  // biased scores (general group selection)
  __shared__ float s_sig[kWarps][kMaxExperts];    // fp32 sigmoids (DeepSeek-V3 / MiniMax-2)
  __shared__ double s_ex[kWarps][kMaxExperts];
  __shared__ double s_w[kWarps][kMaxTopK];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  // Let a programmatic dependent (the permutation) launch now: it waits in-kernel for this
  // grid's completion before reading the ids, so only its launch latency and prologue overlap.
  asm volatile("griddepcontrol.launch_dependents;");
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= a.m) return;  // whole warps only; no CTA-wide barrier below
  float* logit = s_logit[warp];
  const bool biased = a.method == RoutingMethod::kDeepSeekV3 || a.method == RoutingMethod::kMiniMax2;

  // All global loads first (logits and, when used, the bias), so their latencies overlap.
  float l[kPerLane], score[kPerLane], bias[kPerLane];
  std::uint32_t valid = 0;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    l[i] = 0.0f;
    bias[i] = 0.0f;
    if (e < a.e) {
      valid |= 1u << i;
      l[i] = a.logits_bf16
                 ? bf16_to_float(static_cast<const std::uint16_t*>(a.logits)[t * a.e + e])
                 : static_cast<const float*>(a.logits)[t * a.e + e];
      if (biased) bias[i] = a.bias[e];
    }
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    if (e < a.e) logit[e] = l[i];
    score[i] = l[i];
  }
  std::uint32_t eligible = valid;
  if (biased) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < a.e) {
        const float sg = sigmoid_f32(l[i]);
        score[i] = __fadd_rn(sg, bias[i]);
        s_sig[warp][e] = sg;
        s_score[warp][e] = score[i];
      }
    }
    const int groups = a.method == RoutingMethod::kDeepSeekV3 ? a.groups : 1;
    if (groups > 1 && a.topk_group < groups) {
      const int per_group = a.e / groups;
      eligible = 0;
      if ((per_group & (per_group - 1)) == 0) {
        const int lg = __ffs(per_group) - 1;
        const std::uint32_t kept =
            per_group >= 32 ? kept_groups_wide<kPerLane>(score, valid, lg, a.topk_group, lane)
                            : kept_groups_narrow<kPerLane>(score, valid, lg, a.topk_group, lane);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
          if (((valid >> i) & 1u) && ((kept >> ((lane + 32 * i) >> lg)) & 1u)) eligible |= 1u << i;
      } else {
        const std::uint32_t kept =
            kept_groups_smem(s_score[warp], groups, per_group, a.topk_group, lane);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int e = lane + 32 * i;
          if (e < a.e && ((kept >> (e / per_group)) & 1u)) eligible |= 1u << i;
        }
      }
    }
  }
  const int id = select_top<kPerLane>(score, eligible, a.k, lane);
  __syncwarp();  // the shared-memory logits / sigmoids written above are read below

  // Weights (float64, the reference's formulas and summation order). Sums over the k picks run in
  // every lane in pick order from shuffled terms (the reference's sequential order, no smem).
  const int k = a.k;
  double wd = 0.0;
  const double lj = lane < k ? static_cast<double>(logit[id]) : 0.0;
  switch (a.method) {
    case RoutingMethod::kTopK:
      wd = lj;
      break;
    case RoutingMethod::kSigmoid:
    case RoutingMethod::kLlama4:
      wd = sigmoid_f64(lj);
      break;
    case RoutingMethod::kSigmoidRenorm:
    case RoutingMethod::kDeepSeekV3:
    case RoutingMethod::kMiniMax2: {
      const bool renorm = a.method == RoutingMethod::kSigmoidRenorm;
      const double wj = lane < k ? (renorm ? sigmoid_f64(lj) : static_cast<double>(s_sig[warp][id]))
                                 : 0.0;
      double sum = 0.0;
      for (int j = 0; j < k; ++j) sum = __dadd_rn(sum, __shfl_sync(0xFFFFFFFFu, wj, j));
      if (lane < k) {
        if (renorm) {
          wd = __ddiv_rn(wj, sum);
        } else {
          const double scale = __ddiv_rn(static_cast<double>(a.scaling), __dadd_rn(sum, 1e-20));
          wd = __dmul_rn(wj, scale);
        }
      }
      break;
    }
    case RoutingMethod::kRenormalize: {
      const double mx = __shfl_sync(0xFFFFFFFFu, lj, 0);  // logit of the first pick
      const double ej = lane < k ? exp(__dsub_rn(lj, mx)) : 0.0;
      double denom = 0.0;
      for (int j = 0; j < k; ++j) denom = __dadd_rn(denom, __shfl_sync(0xFFFFFFFFu, ej, j));
      if (lane < k) wd = __ddiv_rn(ej, denom);
      break;
    }
    case RoutingMethod::kDefault:
    case RoutingMethod::kRenormalizeNaive: {
      double mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if ((valid >> i) & 1u) mx = fmax(mx, static_cast<double>(l[i]));
#pragma unroll
      for (int off = 16; off > 0; off /= 2) mx = fmax(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        if (e < a.e) s_ex[warp][e] = exp(__dsub_rn(static_cast<double>(l[i]), mx));
      }
      __syncwarp();
      double denom = 0.0;
      if (lane == 0)
        for (int e = 0; e < a.e; ++e) denom = __dadd_rn(denom, s_ex[warp][e]);
      denom = __shfl_sync(0xFFFFFFFFu, denom, 0);
      if (lane < k) s_w[warp][lane] = __ddiv_rn(s_ex[warp][id], denom);
      __syncwarp();
      if (a.method == RoutingMethod::kRenormalizeNaive) {
        double chosen = 0.0;
        if (lane == 0)
          for (int j = 0; j < k; ++j) chosen = __dadd_rn(chosen, s_w[warp][j]);
        chosen = __shfl_sync(0xFFFFFFFFu, chosen, 0);
        if (lane < k) wd = __ddiv_rn(s_w[warp][lane], chosen);
      } else if (lane < k) {
        wd = s_w[warp][lane];
      }
      break;
    }
  }
  if (lane < k) {
    a.ids[t * k + lane] = id;
    a.weights[t * k + lane] = __double2float_rn(wd);
  }
}

void check_device_tensor(const TensorView& t, const char* name, DType dtype, const Shape& shape) {
  MOEKIT_CHECK_ARG(t.defined(), name, "a tensor", "absent");
  MOEKIT_CHECK_ARG(t.dtype == dtype, std::string(name) + " dtype", dtype_name(dtype), dtype_name(t.dtype));
  MOEKIT_CHECK_ARG(t.shape == shape, std::string(name) + " shape", shape.str(), t.shape.str());
  MOEKIT_CHECK_ARG(t.device.is_cuda(), std::string(name) + " device", "cuda", t.device.str());
  MOEKIT_CHECK_ARG(t.is_contiguous(), std::string(name) + " layout", "contiguous", "strided");
}

}  // namespace

void route_cuda(const TensorView& logits, const TensorView& correction_bias,
                const RoutingConfig& config, const TensorView& topk_ids,
                const TensorView& topk_weights, StreamHandle stream) {
  MOEKIT_CHECK_ARG(logits.rank() == 2, "logits rank", 2, logits.rank());
  MOEKIT_CHECK_ARG(logits.dtype == DType::kF32 || logits.dtype == DType::kBF16, "logits dtype",
                   "f32 or bf16", dtype_name(logits.dtype));
  MOEKIT_CHECK_ARG(logits.device.is_cuda(), "logits device", "cuda", logits.device.str());
  MOEKIT_CHECK_ARG(logits.is_contiguous(), "logits layout", "contiguous", "strided");
  const std::int64_t m = logits.size(0);
  const std::int64_t e = logits.size(1);
  MOEKIT_CHECK_ARG(e >= 1 && e <= kMaxExperts, "logits.shape[1] (num_experts)",
                   "in [1, " + std::to_string(kMaxExperts) + "] on cuda", e);
  config.validate(static_cast<int>(e));
  MOEKIT_CHECK_ARG(config.top_k <= kMaxTopK, "top_k", "<= " + std::to_string(kMaxTopK) + " on cuda",
                   config.top_k);
  if (config.method == RoutingMethod::kDeepSeekV3) {
    MOEKIT_CHECK_ARG(config.num_expert_groups <= kMaxGroups, "num_expert_groups",
                     "<= " + std::to_string(kMaxGroups) + " on cuda", config.num_expert_groups);
  }
  const Shape out_shape{m, config.top_k};
  check_device_tensor(topk_ids, "topk_ids", DType::kI32, out_shape);
  check_device_tensor(topk_weights, "topk_weights", DType::kF32, out_shape);
  const bool needs_bias = routing_uses_bias(config.method);
  if (needs_bias) {
    check_device_tensor(correction_bias, "correction_bias", DType::kF32, Shape{e});
  } else {
    MOEKIT_CHECK_ARG(!correction_bias.defined(), "correction_bias",
                     std::string("absent for routing method ") +
                         std::string(routing_method_name(config.method)),
                     correction_bias.str());
  }
  if (m == 0) return;
  RouteArgs a;
  a.logits = logits.data;
  a.logits_bf16 = logits.dtype == DType::kBF16;
  a.bias = needs_bias ? static_cast<const float*>(correction_bias.data) : nullptr;
  a.ids = static_cast<std::int32_t*>(topk_ids.data);
  a.weights = static_cast<float*>(topk_weights.data);
  a.m = m;
  a.e = static_cast<int>(e);
  a.k = config.top_k;
  a.method = config.method;
  a.groups = config.num_expert_groups;
  a.topk_group = config.topk_group;
  a.scaling = config.routed_scaling_factor;
  const unsigned int blocks = static_cast<unsigned int>((m + kWarps - 1) / kWarps);
  auto s = static_cast<cudaStream_t>(stream);
  if (e <= 32) {
    route_kernel<1><<<blocks, kWarps * 32, 0, s>>>(a);
  } else if (e <= 64) {
    route_kernel<2><<<blocks, kWarps * 32, 0, s>>>(a);
  } else if (e <= 128) {
    route_kernel<4><<<blocks, kWarps * 32, 0, s>>>(a);
  } else if (e <= 256) {
    route_kernel<8><<<blocks, kWarps * 32, 0, s>>>(a);
  } else {
    route_kernel<16><<<blocks, kWarps * 32, 0, s>>>(a);
  }
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit
