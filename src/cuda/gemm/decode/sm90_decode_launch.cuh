// Host-side launch of the decode grouped GEMM (sm90_decode_grouped_gemm.cuh), shared by the W4A16
// (sm90_w4a16_grouped_gemm.cu) and bf16 (sm90_bf16_decode_grouped_gemm.cu) launchers: persistent
// grid size, the optional cluster split-K, programmatic dependent launch. Host queries are cached;
// nothing is read back from the device, so a launch is graph-capturable.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/decode_routing.hpp"
#include "cuda/gemm/decode/sm90_decode_grouped_gemm.cuh"
#include "cuda/tuning/sm90_tuning.hpp"

namespace moekit::gemm::sm90::decode {

// What the host knows of one launch (the rows per expert live on the device).
struct DecodeLaunch {
  const char* what;  // the API entry point, for errors
  int num_experts;
  std::int64_t m;  // rows (capacity: at most this many are in expert_offsets[E])
  std::int64_t n, k;
  int k_split;            // cluster size; 0 = the tuning rule (choose_k_split)
  int max_ctas;           // cap on the grid; 0 = the device
  bool overlap_previous;  // PDL (sm90_decode_grouped_gemm.cuh, kPdl)
  cudaStream_t stream;
  bool routed = false;  // fused routing (Params::topk_ids): its shared-memory tables
  int tma_ctas = 0;     // TMA ring codecs: CTAs per SM (0: the configuration's kMinBlocks)
};

// Validates a DecodeRouting of a launch with m rows and n output columns (`what` = the API entry,
// arguments named "routing.<field>") and copies it into params. plain: the launch has no gated
// epilogue (the reduce needs GEMM2's plain rows); out / ldo: where the launch writes its rows.
inline void set_decode_routing(const DecodeRouting& r, const char* what, std::int64_t m,
                               std::int64_t n, const void* expert_offsets, const void* row_index,
                               bool plain, const void* out, std::int64_t ldo, Params& params) {
  if (r.topk_ids == nullptr) {
    MOEKIT_CHECK_ARG(r.reduce_out == nullptr, "routing.reduce_out", "null without routing.topk_ids",
                     r.reduce_out);
    MOEKIT_CHECK_ARG(r.clear == nullptr, "routing.clear", "null without routing.topk_ids",
                     static_cast<const void*>(r.clear));
    return;
  }
  const auto aligned16 = [](const void* q) {
    return reinterpret_cast<std::uintptr_t>(q) % 16 == 0;
  };
  MOEKIT_CHECK_ARG(
      m <= kDecodeRoutingMaxRows, "rows",
      ::moekit::detail::concat("<= ", kDecodeRoutingMaxRows, " with routing.topk_ids (", what, ")"),
      m);
  MOEKIT_CHECK_ARG(params.num_experts <= kDecodeRoutingMaxExperts, "num_experts",
                   ::moekit::detail::concat("<= ", kDecodeRoutingMaxExperts,
                                            " with routing.topk_ids (", what, ")"),
                   params.num_experts);
  MOEKIT_CHECK_ARG(r.top_k >= 1 && m % r.top_k == 0, "routing.top_k",
                   ::moekit::detail::concat(">= 1 and dividing m = ", m), r.top_k);
  MOEKIT_CHECK_ARG(expert_offsets == nullptr, "expert_offsets", "null with routing.topk_ids",
                   expert_offsets);
  MOEKIT_CHECK_ARG(row_index == nullptr, "row_index",
                   "null with routing.topk_ids (routing.a_by_token gathers the tokens)", row_index);
  MOEKIT_CHECK_ARG(r.clear_count >= 0 && (r.clear_count == 0 || r.clear != nullptr),
                   "routing.clear_count", "0, or >= 0 with routing.clear", r.clear_count);
  if (r.reduce_out != nullptr) {
    MOEKIT_CHECK_ARG(plain, "routing.reduce_out", "null with a gated epilogue", r.reduce_out);
    MOEKIT_CHECK_ARG(aligned16(r.reduce_out), "routing.reduce_out", "16-byte aligned",
                     r.reduce_out);
    MOEKIT_CHECK_ARG(aligned16(out) && ldo % 8 == 0, "out",
                     "16-byte aligned with a row stride % 8 == 0 (routing.reduce_out reads it)",
                     ::moekit::detail::concat(out, ", stride ", ldo));
    MOEKIT_CHECK_ARG(r.counters != nullptr, "routing.counters",
                     ::moekit::detail::concat("a device pointer (", decode_routing_counters(n),
                                              " ints, zero) with routing.reduce_out"),
                     "null");
    MOEKIT_CHECK_ARG(r.reduce_bias == nullptr || aligned16(r.reduce_bias), "routing.reduce_bias",
                     "16-byte aligned", r.reduce_bias);
  }
  params.topk_ids = r.topk_ids;
  params.top_k = r.top_k;
  params.a_by_token = r.a_by_token ? 1 : 0;
  params.reduce_out = static_cast<__nv_bfloat16*>(r.reduce_out);
  params.topk_weights = r.topk_weights;
  params.reduce_bias = r.reduce_bias;
  params.counters = r.counters;
  params.clear = r.clear;
  params.clear_count = r.clear_count;
}

inline int multiprocessors() { return cuda::current_device_multiprocessors(); }

inline cudaLaunchConfig_t cluster_launch_config(unsigned grid, int threads, int smem, int csize,
                                                cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid, 1, 1);
  cfg.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  cfg.dynamicSmemBytes = static_cast<std::size_t>(smem);
  cfg.stream = stream;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(csize);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Appends the programmatic-dependent-launch attribute to cfg (cfg->attrs must
// point into `attrs`, which has room for one more).
inline void add_pdl_attribute(cudaLaunchConfig_t* cfg, cudaLaunchAttribute* attrs) {
  cudaLaunchAttribute& a = attrs[cfg->numAttrs];
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  cfg->attrs = attrs;
  ++cfg->numAttrs;
}

// Co-resident clusters of `csize` CTAs of `kernel` on this device (host-side
// occupancy query, cached: no stream work, graph-capture safe).
template <typename Kernel>
int max_active_clusters(Kernel kernel, int threads, int smem, int csize) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, int> cache;
  int dev = 0;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), smem, csize * 64 + dev);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_launch_config(
      static_cast<unsigned>(csize * multiprocessors()), threads, smem, csize, nullptr, &attr);
  int clusters = 0;
  MOEKIT_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
  cache[key] = clusters;
  return clusters;
}

// Dynamic shared memory of at least `smem` bytes with which at most `ctas` blocks fit on one SM
// (the smallest such size, 128-byte rounded): (size + reserved) * (ctas + 1) > the SM's bytes.
inline int smem_for_at_most_ctas(int ctas, int smem) {
  const int per_sm = cuda::current_device_smem_per_sm();
  const int reserved = cuda::current_device_reserved_smem_per_block();
  const int least = per_sm / (ctas + 1) - reserved + 1;
  return std::max(smem, (least + 127) / 128 * 128);
}

// CTAs per SM of a kernel on the TMA ring (Codec::kTma): its registers (~95) would let a fifth
// CTA onto an SM, and under PDL the CTAs of a one-round launch (mixtral's GEMM2 at one token: 512
// units) then pile onto the SMs that the previous kernel frees first. The cap (DecodeLaunch::
// tma_ctas, by default the configuration's occupancy target Cfg::kMinBlocks) is kept by padding
// the dynamic shared memory. H200, 2026-12-05: mixtral-8x7b bf16 at one token 176.5 us capped,
// 191.4 without the cap.

// Expected work units of a launch (tuning::sm90::decode_units).
inline double estimated_units(const DecodeLaunch& l, int tokens, int rows) {
  return tuning::sm90::decode_units(l.num_experts, l.m, l.n, tokens, rows);
}

// CTA slots the persistent grid may use.
inline int cta_slots(const DecodeLaunch& l, int per_sm) {
  const int slots = per_sm * multiprocessors();
  return l.max_ctas > 0 ? std::min(slots, l.max_ctas) : slots;
}

// Cluster size for the split-K: the config's, or the tuning rule (tuning::sm90::decode_k_split)
// on this kernel's occupancy.
template <typename Cfg>
int choose_k_split(const DecodeLaunch& l, int per_sm) {
  if (l.k_split > 0) return l.k_split;
  return tuning::sm90::decode_k_split(estimated_units(l, Cfg::kTokens, Cfg::kRows),
                                      cta_slots(l, per_sm), l.k, Cfg::kWarpsK);
}

// kPdl: launched as a programmatic dependent of the previous kernel (l.overlap_previous).
// kRouted: the fused routing (l.routed); kRoutable = false: this configuration has no routed
// kernel (l.routed is then an error: the caller resolves its configuration first).
template <typename Cfg, typename Codec, int kEpi, bool kRoutable = true, bool kPdl = false,
          bool kRouted = false>
void launch_decode(const DecodeLaunch& l, const Params& params, const DecodeMaps& maps = {}) {
  if constexpr (!kPdl) {
    if (l.overlap_previous)
      return launch_decode<Cfg, Codec, kEpi, kRoutable, true>(l, params, maps);
  }
  if constexpr (!kRouted) {
    if (l.routed) {
      if constexpr (kRoutable)
        return launch_decode<Cfg, Codec, kEpi, kRoutable, kPdl, true>(l, params, maps);
      else
        MOEKIT_FAIL(l.what, ": routing.topk_ids: this decode configuration (", Cfg::kRows, " x ",
                    Cfg::kTokens, ") has no fused routing");
    }
  }
  auto kernel = decode_grouped_gemm_kernel<Cfg, Codec, kEpi, kPdl, kRouted>;
  int smem = decode_smem_bytes<Cfg, Codec>(l.num_experts, kRouted);
  if constexpr (requires { Codec::kTma; })
    smem = smem_for_at_most_ctas(l.tma_ctas > 0 ? l.tma_ctas : Cfg::kMinBlocks, smem);
  MOEKIT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  MOEKIT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, smem));
  MOEKIT_CHECK(per_sm > 0, l.what, ": the decode kernel (", Cfg::kRows, " x ", Cfg::kTokens,
               ") does not fit on this device (shared memory ", smem, " bytes)");
  // Upper bound of the units the kernel finds on the device: every expert adds
  // at most one partial token tile.
  const std::int64_t token_tiles =
      (l.m + Cfg::kTokens - 1) / Cfg::kTokens + std::min<std::int64_t>(l.num_experts, l.m);
  const std::int64_t row_tiles = (l.n + Cfg::kRows - 1) / Cfg::kRows;
  const int csize = choose_k_split<Cfg>(l, per_sm);
  if (csize > 1) {
    const int clusters = max_active_clusters(kernel, Cfg::kThreads, smem, csize);
    MOEKIT_CHECK(clusters > 0, l.what, ": k_split ", csize, " does not fit on this device");
    std::int64_t n_clusters = std::min<std::int64_t>(token_tiles * row_tiles, clusters);
    if (l.max_ctas > 0)
      n_clusters =
          std::max<std::int64_t>(1, std::min<std::int64_t>(n_clusters, l.max_ctas / csize));
    cudaLaunchAttribute attrs[2];
    cudaLaunchConfig_t cfg = cluster_launch_config(static_cast<unsigned>(n_clusters * csize),
                                                   Cfg::kThreads, smem, csize, l.stream, &attrs[0]);
    if (kPdl) add_pdl_attribute(&cfg, attrs);
    MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, params, maps));
    return;
  }
  std::int64_t grid = std::min<std::int64_t>(token_tiles * row_tiles,
                                             static_cast<std::int64_t>(per_sm) * multiprocessors());
  if (l.max_ctas > 0) grid = std::min<std::int64_t>(grid, l.max_ctas);
  if constexpr (kPdl) {
    cudaLaunchAttribute attrs[1];
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(grid), 1, 1);
    cfg.blockDim = dim3(static_cast<unsigned>(Cfg::kThreads), 1, 1);
    cfg.dynamicSmemBytes = static_cast<std::size_t>(smem);
    cfg.stream = l.stream;
    cfg.attrs = attrs;
    add_pdl_attribute(&cfg, attrs);
    MOEKIT_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, params, maps));
  } else {
    kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem, l.stream>>>(params, maps);
    MOEKIT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace moekit::gemm::sm90::decode
