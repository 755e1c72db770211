// The weighted top-k sum of one token over 8 consecutive columns: the arithmetic of permute.hpp's
// unpermute_reduce, shared by the weighted reduce kernel (weighted_reduce.cu) and the decode GEMM's
// fused reduce (gemm/decode/sm90_decode_grouped_gemm.cuh), so both give the same bits. Slots in
// order, kTopkReduceUnroll at a time with all their loads issued first; separate multiply and add
// (no FMA), the sum in slot order.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

namespace moekit::cuda {

constexpr int kTopkReduceUnroll = 4;

// 8 values of a row from column c: bf16 (one 16-byte load) or f32 (two); kVec false: element by
// element, columns >= cols read as 0. kCoherent: written by other CTAs of the running grid (loads
// through L2, not L1).
template <typename TIn, bool kVec, bool kCoherent>
struct RowLoad8 {
  static_assert(std::is_same_v<TIn, __nv_bfloat16> || std::is_same_v<TIn, float>, "input dtype");
  using Raw = std::conditional_t<std::is_same_v<TIn, float>, float4[2], uint4>;
  __device__ __forceinline__ static void load(const TIn* p, int cols, Raw& raw) {
    if constexpr (std::is_same_v<TIn, float>) {
      if constexpr (kVec) {
        const float4* q = reinterpret_cast<const float4*>(p);
        raw[0] = kCoherent ? __ldcg(q) : q[0];
        raw[1] = kCoherent ? __ldcg(q + 1) : q[1];
      } else {
        float* f = reinterpret_cast<float*>(&raw[0]);
        for (int i = 0; i < 8; ++i) f[i] = i < cols ? p[i] : 0.0f;
      }
    } else if constexpr (kVec) {
      const uint4* src = reinterpret_cast<const uint4*>(p);
      if constexpr (kCoherent) raw = __ldcg(src);
      else raw = *src;
    } else {
      __nv_bfloat16* h = reinterpret_cast<__nv_bfloat16*>(&raw);
      for (int i = 0; i < 8; ++i) h[i] = i < cols ? p[i] : __float2bfloat16_rn(0.0f);
    }
  }
  __device__ __forceinline__ static void zero(Raw& raw) {
    if constexpr (std::is_same_v<TIn, float>) {
      raw[0] = raw[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
      raw = make_uint4(0u, 0u, 0u, 0u);
    }
  }
  // Values 2i and 2i + 1.
  __device__ __forceinline__ static float2 pair(const Raw& raw, int i) {
    if constexpr (std::is_same_v<TIn, float>) {
      const float* f = reinterpret_cast<const float*>(&raw[0]);
      return make_float2(f[2 * i], f[2 * i + 1]);
    } else {
      return __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&raw)[i]);
    }
  }
};

// acc[i] = sum_j RN(w[t, j] * v_j[i]) over the slots j with permuted_row[t * top_k + j] >= 0,
// where v_j = the row permuted_row[...] of expert_out (row stride ld) at columns c .. c + 7 (of
// `cols` valid ones), plus (kBias) bias[topk_ids[t, j], c ..] (row stride bias_ld) rounded once;
// w = 1 without topk_weights.
template <bool kBias, bool kCoherent, typename TIn = __nv_bfloat16, bool kVec = true>
__device__ __forceinline__ void topk_reduce8_acc(const TIn* expert_out, long long ld,
                                                 const int* permuted_row,
                                                 const float* topk_weights, int top_k, long long t,
                                                 long long c, int cols, const float* bias,
                                                 long long bias_ld, const int* topk_ids,
                                                 float (&acc)[8]) {
  using Load = RowLoad8<TIn, kVec, kCoherent>;
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
  for (int j0 = 0; j0 < top_k; j0 += kTopkReduceUnroll) {
    int r[kTopkReduceUnroll];
    float w[kTopkReduceUnroll];
    typename Load::Raw raw[kTopkReduceUnroll];
#pragma unroll
    for (int u = 0; u < kTopkReduceUnroll; ++u) {
      const int j = j0 + u;
      r[u] = j < top_k ? permuted_row[t * top_k + j] : -1;
      w[u] = j < top_k && topk_weights != nullptr ? topk_weights[t * top_k + j] : 1.0f;
    }
#pragma unroll
    for (int u = 0; u < kTopkReduceUnroll; ++u) {
      if (r[u] < 0)
        Load::zero(raw[u]);
      else
        Load::load(expert_out + r[u] * ld + c, cols, raw[u]);
    }
#pragma unroll
    for (int u = 0; u < kTopkReduceUnroll; ++u) {
      if (r[u] < 0) continue;
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
        float2 v = Load::pair(raw[u], i);
        if constexpr (kBias) {
          v.x = __fadd_rn(v.x, b[2 * i]);
          v.y = __fadd_rn(v.y, b[2 * i + 1]);
        }
        acc[2 * i] = __fadd_rn(acc[2 * i], __fmul_rn(w[u], v.x));
        acc[2 * i + 1] = __fadd_rn(acc[2 * i + 1], __fmul_rn(w[u], v.y));
      }
    }
  }
}

// The 8 sums as bf16 (RN-even), one 16-byte store's worth.
__device__ __forceinline__ uint4 pack_bf16x8(const float (&acc)[8]) {
  uint4 res;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&res);
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return res;
}

// out[t, c .. c + 7] = RN_bf16(topk_reduce8_acc(...)) of bf16 expert rows (all 8 columns valid).
template <bool kBias, bool kCoherent>
__device__ __forceinline__ uint4 topk_reduce8(const __nv_bfloat16* expert_out, long long ld,
                                              const int* permuted_row, const float* topk_weights,
                                              int top_k, long long t, long long c,
                                              const float* bias, long long bias_ld,
                                              const int* topk_ids) {
  float acc[8];
  topk_reduce8_acc<kBias, kCoherent>(expert_out, ld, permuted_row, topk_weights, top_k, t, c, 8,
                                     bias, bias_ld, topk_ids, acc);
  return pack_bf16x8(acc);
}

}  // namespace moekit::cuda
