// The weighted top-k sum of one token over 8 consecutive columns, shared by the experts' reduce
// kernel (weighted_reduce_bf16, cuda/experts/bf16_experts.cu) and the decode GEMM's fused reduce
// (sm90_decode_grouped_gemm.cuh): the same operations in the same order, so both give the same
// bits. Slots in order, kTopkReduceUnroll at a time with all their loads issued first; separate
// multiply and add (no FMA), the sum in slot order: unpermute_reduce's arithmetic.
#pragma once

#include <cuda_bf16.h>

namespace moekit::cuda {

constexpr int kTopkReduceUnroll = 4;

// out[t, c .. c + 7] = RN_bf16(sum_j RN(w[t, j] * v_j)) over the slots j with
// permuted_row[t * top_k + j] >= 0, where v_j = the bf16 row permuted_row[...] of expert_out
// (row stride ld) at columns c .. c + 7, plus (kBias) bias[topk_ids[t, j], c ..] (row stride
// bias_ld) rounded once; w = 1 without topk_weights. kCoherent: expert_out was written by other
// CTAs of the running grid (loads through L2, not L1).
template <bool kBias, bool kCoherent>
__device__ __forceinline__ uint4 topk_reduce8(const __nv_bfloat16* expert_out, long long ld,
                                              const int* permuted_row, const float* topk_weights,
                                              int top_k, long long t, long long c,
                                              const float* bias, long long bias_ld,
                                              const int* topk_ids) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int j0 = 0; j0 < top_k; j0 += kTopkReduceUnroll) {
    int r[kTopkReduceUnroll];
    float w[kTopkReduceUnroll];
    uint4 raw[kTopkReduceUnroll];
#pragma unroll
    for (int u = 0; u < kTopkReduceUnroll; ++u) {
      const int j = j0 + u;
      r[u] = j < top_k ? permuted_row[t * top_k + j] : -1;
      w[u] = j < top_k && topk_weights != nullptr ? topk_weights[t * top_k + j] : 1.0f;
    }
#pragma unroll
    for (int u = 0; u < kTopkReduceUnroll; ++u) {
      const uint4* src = reinterpret_cast<const uint4*>(expert_out + r[u] * ld + c);
      if (r[u] < 0)
        raw[u] = make_uint4(0u, 0u, 0u, 0u);
      else if constexpr (kCoherent)
        raw[u] = __ldcg(src);
      else
        raw[u] = *src;
    }
#pragma unroll
    for (int u = 0; u < kTopkReduceUnroll; ++u) {
      if (r[u] < 0) continue;
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw[u]);
      float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if constexpr (kBias) {
        const float4* bp = reinterpret_cast<const float4*>(
            bias + static_cast<long long>(topk_ids[t * top_k + j0 + u]) * bias_ld + c);
        const float4 b0 = bp[0], b1 = bp[1];
        b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w;
        b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float2 v = __bfloat1622float2(h[i]);
        if constexpr (kBias) {
          v.x = __fadd_rn(v.x, b[2 * i]);
          v.y = __fadd_rn(v.y, b[2 * i + 1]);
        }
        acc[2 * i] = __fadd_rn(acc[2 * i], __fmul_rn(w[u], v.x));
        acc[2 * i + 1] = __fadd_rn(acc[2 * i + 1], __fmul_rn(w[u], v.y));
      }
    }
  }
  uint4 res;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&res);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return res;
}

}  // namespace moekit::cuda
