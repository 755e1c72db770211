// SM90 grouped GEMM for bf16 and fp8-block experts on warpgroup MMA with both operands in shared
// memory (GemmKernel::kWgmma for bf16 / fp8 block; launchers: sm90_{bf16,fp8_block}_wgmma_grouped_gemm.cu, design and
// measurements: docs/kernels/bf16_fp8.md "wgmma config"). Hand-written for many rows per expert
// (prefill), on the warp-specialized ring of the 4-bit wgmma kernels (sm90_wgmma_pipeline.cuh).
//
// Swap-AB: the weights are the MMA's M side (CTA tile = kRows weight rows: 2 consumer warpgroups
// x kMTiles x m64), an expert's rows its N side (token tiles of kTokens; each unit runs the
// narrowest token class, 32 / 64 / 96 / 112 / 128 / 144 / 160 columns, that holds its rows: the
// MMAs and B-operand reads follow the rows an expert has, not the tile). A stage holds 128 bytes
// of K per row of both operands (bf16 64, e4m3 128 elements), each loaded by one TMA box with the
// 128-byte swizzle straight into its wgmma slot, on the slot's full mbarrier:
//   activations: [rows][k] in expert order (gathered beforehand), box 128 B x the class's rows;
//     or, with a row index (GroupedGemmArgs::row_index: GEMM1 gathers its rows itself), the
//     unpermuted rows [tokens][k] by 16-byte cp.async of two producer warps into the same
//     swizzled places (their completion arrives on the full mbarrier; the consumers fence the
//     generic-proxy writes before their wgmma reads them);
//   weights [E][N][K] (the checkpoint layout, read in place):
//     plain:  a 3-D map (k, n, expert), box 128 B x kRows rows;
//     gated (bf16 GEMM1 with the activation in the epilogue, N = 2I, gate | up halves): a 5-D map
//       (k, row in 8, half, 8-row group, expert) whose box puts 8 gate rows then the same 8 up rows
//       in each 16-row tile, so lane (g, t) holds gate row 8 rt + g and up row I + 8 rt + g of one
//       output column.
// Out-of-bounds box elements are zeros (K tails, rows past N or past the activations).
//
// One producer thread issues every stage of the CTA's units into the ring (across units), with a
// row index two more producer warps the activation rows; for fp8 one producer warp writes each
// stage's scale products into the stage's scale slot (past the ring): s[j] = sa[row j, kb] *
// sb[e, row block, kb] for the stage's kb = the stage index (its 32 lanes arrive on the scale
// slot's mbarrier after their stores; the consumers wait for it and the full one). The consumers
// per stage: wait, 4 wgmma k-steps per m64 tile,
//   bf16: commit, retire the previous stage (wait 1) and release its slot; the accumulators carry
//     across the whole K;
//   fp8: the two warpgroups issue in turn (named barriers 2 / 3; one copy of the loop per
//     warpgroup), commit, wait 0 (DeepGEMM's promotion every 128 K: the tensor core's e4m3 sums
//     keep ~14 bits), tot += acc * s[column] with the stage's scale products (tot starts at -0:
//     one FFMA per accumulator in every stage), release the slot.
// The epilogue (store_unit) stages the bf16 output tile transposed (stmatrix) in the unit's last
// slot and writes it in 16-byte row pieces: plain, or for gated GEMM1 act(gate + bias, up + bias)
// with the per-expert bias (rows below the expert's end, columns below N).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/activation/gated_math.cuh"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/runtime/current_device.hpp"
#include "cuda/runtime/sm90_bulk_copy.cuh"
#include "cuda/runtime/sm90_tensor_map.hpp"
#include "cuda/gemm/common/sm90_grouped_gemm_common.cuh"
#include "cuda/gemm/common/sm90_wgmma_pipeline.cuh"
#include "cuda/gemm/common/sm90_wgmma_rs_bf16_ops.cuh"
#include "cuda/gemm/common/sm90_wgmma_ss_ops.cuh"
#include "cuda/gemm/grouped_gemm.hpp"
#include "moekit/core/error.hpp"

namespace moekit::gemm::sm90::wgmma {

using cuda::sm90::tma_load_2d;
using cuda::sm90::tma_load_3d;
using cuda::sm90::tma_load_5d;
using sm90::expert_prefix_bytes;
using sm90::fence_operand;
using sm90::fence_proxy_async_smem;
using sm90::grouped_units_bound;
using sm90::lds128;
using sm90::mbar_arrive;
using sm90::mbar_arrive_expect_tx;
using sm90::mbar_wait;
using sm90::Params;
using sm90::persistent_grid;
using sm90::prefix_token_tiles;
using sm90::release_slot;
using sm90::run_wgmma_producer;
using sm90::setmaxnreg_dec;
using sm90::setmaxnreg_inc;
using sm90::smem_addr;
using sm90::smem_desc_k_major_sw128;
using sm90::wgmma_commit;
using sm90::wgmma_fence;
using sm90::wgmma_unit_at;
using sm90::wgmma_wait;
using sm90::WgmmaRing;
using sm90::WgmmaStageCursor;
using sm90::WgmmaUnit;
// Token classes (sm90_wgmma_pipeline.cuh).
using sm90::kMaxTokenClasses;
using sm90::token_class;
using sm90::token_class_width;
using sm90::with_token_class;

struct WgmmaGemmParams {
  Params p;               // expert_offsets, out / ldo, bias (gated), n, k, num_experts, swiglu
  const float* a_scales;  // fp8: [rows][k / 128] (the activations' 1x128 scales; with row_index
                          // indexed like the activations: by row_index[row])
  const std::int32_t* row_index;  // null, or row r reads activation row row_index[r] (gather):
  const std::uint8_t* gather_a;   //   the unpermuted rows, row stride gather_lda bytes
  std::int64_t gather_lda;
  const float* b_scales;  // fp8: [E][ceil(n / 128)][k / 128]
  int fp8_in_turn;        // fp8: the warpgroups issue their stages in turn (else in step)
  int token_classes;      // units run the narrowest token class that holds their rows (else the
                          // whole tile, or the 32-wide one for a kNarrowTails tile's short tail)
};

// The TMA descriptors of one launch (encoded by the launcher). a[c]: the activations, box 128 B x
// the width of token class c (classes past the tile's last repeat its box; unused with a row
// index); w: the weights (3-D plain or 5-D gated, above).
struct WgmmaGemmMaps {
  CUtensorMap a[kMaxTokenClasses], w;
};

// kFp8: e4m3 x e4m3 with the DeepSeek-V3 block scales (else bf16). kTokens: the token tile (the
// widest wgmma N, one of the token class widths). kMTiles: m64 tiles per consumer warpgroup (weight
// rows per CTA = 128 kMTiles; fp8: 1, its promotion keeps a second accumulator set).
// kNarrowTails: without token classes (WgmmaGemmParams::token_classes = 0, a measurement
// override), token tiles of at most 32 rows run a 32-wide wgmma (class 0) and the others the
// whole tile.
template <bool kFp8_, int kTokens_, int kMTiles_, bool kNarrowTails_>
struct WgmmaGemmConfig {
  static constexpr bool kFp8 = kFp8_, kNarrowTails = kNarrowTails_;
  using Elem = std::conditional_t<kFp8, WgmmaE4m3, WgmmaBf16>;
  static constexpr int kTokens = kTokens_, kMTiles = kMTiles_, kNarrow = 32;
  static_assert(token_class_width(0) == kNarrow, "class 0: the narrow tail");
  static constexpr int kThreads = 384, kConsumers = 256;  // + the producer warpgroup
  static constexpr int kRows = 128 * kMTiles;
  static constexpr int kStageK = kFp8 ? 128 : 64;  // elements: 128 bytes per row
  // setmaxnreg: the consumers get what the producer warpgroup gives up (x 128 + y x 256 <= 64 K;
  // fp8: the scale warp keeps two stages of scales and two cursors).
  static constexpr int kProducerRegs = kFp8 ? 56 : 40, kConsumerRegs = kFp8 ? 224 : 232;
  // Stage slot: the activations (kTokens rows x 128 B), the weights (kRows x 128 B);
  // 1024-aligned (the swizzle atom).
  static constexpr int kWOffset = kTokens * 128;
  static constexpr int kStageBytes = (kWOffset + kRows * 128 + 1023) / 1024 * 1024;
  // fp8: per stage the kTokens scale products (f32), their full mbarrier (the scale warp's 32
  // lanes arrive on it: a barrier of thread arrivals only, apart from the TMA's full one) and
  // their empty one (one arrival per consumer warp once it promoted the stage), in a scale slot of
  // their own past the ring (WgmmaGemmSmem::scales). Kept out of the stage slot, (1) they leave
  // the 160 tile's slot at 36 KB instead of 38 KB after the 1024 alignment: 6 stages instead of
  // 5, and (2) the consumers can give the stage slot back to the TMA once their chain retired,
  // before the promotion, which reads only the scale slot.
  static constexpr int kScaleSlotBytes = kFp8 ? kTokens * 4 + 16 : 0;
  // As many stages as fit next to the expert prefix of up to 512 experts (at most 8).
  static constexpr int kSmemBudget = 227 * 1024 - 1024 - expert_prefix_bytes(512);
  static constexpr int kStages =
      std::min(8, kSmemBudget / (kStageBytes + 16 + kScaleSlotBytes));
  static_assert(kTokens % 8 == 0 && kTokens >= 32 && kTokens <= 256, "wgmma N");
  static_assert(!kFp8 || kMTiles == 1, "fp8: one m64 tile per warpgroup");
  static_assert(!kFp8 || kTokens % 16 == 0,
                "fp8: the scale products go in 16-column groups (and the scale slots' barriers "
                "stay 16-byte aligned)");
  static_assert(kStages >= 3, "ring");

  static constexpr int smem_bytes(int num_experts) {
    return expert_prefix_bytes(num_experts) + 1024 + WgmmaRing<kStages, kStageBytes>::kBytes +
           kStages * kScaleSlotBytes;
  }
};

// The ring, and (fp8) past its barriers the stages' scale slots: scales(s) the kTokens scale
// products of stage slot s, scales_bar(s) / scales_empty(s) their full / empty mbarriers
// (16-byte aligned slots: the promotion reads them 16 bytes at a time).
template <typename Cfg>
struct WgmmaGemmSmem : WgmmaRing<Cfg::kStages, Cfg::kStageBytes> {
  using Ring = WgmmaRing<Cfg::kStages, Cfg::kStageBytes>;
  __device__ explicit WgmmaGemmSmem(std::uint32_t ring) : Ring(ring) {}
  __device__ std::uint32_t scales(std::uint32_t s) const {
    return this->slots + Ring::kBytes + s * Cfg::kScaleSlotBytes;
  }
  __device__ std::uint32_t scales_bar(std::uint32_t s) const {
    return scales(s) + Cfg::kTokens * 4;
  }
  __device__ std::uint32_t scales_empty(std::uint32_t s) const {
    return scales(s) + Cfg::kTokens * 4 + 8;
  }
};

__device__ __forceinline__ float4 lds_f4(std::uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts_f32(std::uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
// Transposing stores of 8x8 b16 matrices: register q of lane l is row l / 4, columns 2 (l % 4)
// + {0, 1} of matrix q; lane 8 q + j gives the shared address of row j of matrix q's transpose
// (16 bytes: column j of the matrix).
__device__ __forceinline__ void stmatrix_x4_trans(std::uint32_t addr, std::uint32_t r0,
                                                  std::uint32_t r1, std::uint32_t r2,
                                                  std::uint32_t r3) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r0), "r"(r1), "r"(r2), "r"(r3)
      : "memory");
}
__device__ __forceinline__ void stmatrix_x2_trans(std::uint32_t addr, std::uint32_t r0,
                                                  std::uint32_t r1) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(addr),
               "r"(r0), "r"(r1)
               : "memory");
}
// The 256 consumer threads only (named barrier 1; the producer warpgroup never joins it).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}
// fp8 issue order (named barriers 2 and 3, 256 threads: one warpgroup arrives, the other waits):
// warpgroup 0 issues stage s after warpgroup 1 issued stage s - 1, warpgroup 1 stage s after
// warpgroup 0 issued it, over the CTA's whole stage sequence (across units).
__device__ __forceinline__ void issued_arrive(int bar) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void issued_wait(int bar) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(bar) : "memory");
}
// The epilogue of a unit, staged through its last stage slot (both consumer warpgroups are done
// with it: the caller synchronized them): the bf16 output tile [tokens][the CTA tile's columns]
// (plain: kRows columns, one per weight row; gated: kRows / 2, act(gate + bias, up + bias) of the
// row pairs) is written transposed by stmatrix, in passes of as many 8-token blocks as the slot
// holds, then copied out in 16-byte row pieces (rows below the expert's end, columns below N).
// 8-token blocks past the expert's end are neither staged nor copied (their accumulators may be
// past the unit's token class). Rows of the staging buffer are kOutCols * 2 bytes; their 16-byte
// chunks are XOR-swizzled by the token (conflict-free for the stmatrix rows and the row-wise
// reads).
template <typename Cfg, int kEpi, typename Acc>
__device__ __forceinline__ void store_unit(const Params& p, const Acc& acc, std::uint32_t stage,
                                           const WgmmaUnit& un) {
  constexpr bool kGated = kEpi != 0;
  constexpr int kOutCols = kGated ? Cfg::kRows / 2 : Cfg::kRows;
  constexpr int kRowBytes = kOutCols * 2, kChunks = kRowBytes / 16;
  constexpr int kN = Cfg::kTokens;
  constexpr int kPassTokens = std::min(kN, Cfg::kStageBytes / kRowBytes / 16 * 16);
  static_assert(kPassTokens >= 16 && kChunks >= 8, "staging rows");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int g = lane / 4, t = lane % 4, q = lane / 8, j = lane % 8;
  const int out_cols = kGated ? p.n / 2 : p.n;
  const int col0 = un.cta_rt * kOutCols;
  const float* bias = kGated && p.bias ? p.bias + static_cast<std::int64_t>(un.e) * p.n : nullptr;
  const int unit_rows = un.row_end - un.row_begin;  // > 0; may exceed kN (the expert's end)
#pragma unroll
  for (int pass = 0; pass < (kN + kPassTokens - 1) / kPassTokens; ++pass) {
    const int tok0 = pass * kPassTokens;
    if (tok0 >= unit_rows) break;    // uniform over the consumers
    if (pass > 0) consumers_sync();  // the previous pass's reads are done
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
      const int tile16 = (wg * Cfg::kMTiles + mt) * 4 + warp % 4;  // of the CTA tile
      if constexpr (!kGated) {
        // Matrices (rows g: tile16's low 8 weight rows, g + 8: its high 8) x 8-token blocks i,
        // i + 1; lane 8 q + j addresses token 8 (i + q / 2) + j, chunk 2 tile16 + q % 2.
#pragma unroll
        for (int i = tok0 / 8; i < std::min(kN, tok0 + kPassTokens) / 8; i += 2) {
          if (8 * i >= unit_rows) break;  // uniform
          const int tok = 8 * (i + q / 2) + j - tok0, ch = 2 * tile16 + q % 2;
          stmatrix_x4_trans(stage + tok * kRowBytes + 16 * (ch ^ (tok % 8)),
                            pack_bf16x2(acc[mt][i][0], acc[mt][i][1]),
                            pack_bf16x2(acc[mt][i][2], acc[mt][i][3]),
                            pack_bf16x2(acc[mt][i + 1][0], acc[mt][i + 1][1]),
                            pack_bf16x2(acc[mt][i + 1][2], acc[mt][i + 1][3]));
        }
      } else {
        // One output column per lane row: 8 columns (col0 + 8 tile16 + g) x 8-token blocks i,
        // i + 1; lane 8 q + j (q < 2) addresses token 8 (i + q) + j, chunk tile16.
        const int col = col0 + 8 * tile16 + g;
        const bool in = col < out_cols;
        const float bg = in && bias ? bias[col] : 0.0f,
                    bu = in && bias ? bias[p.n / 2 + col] : 0.0f;
#pragma unroll
        for (int i = tok0 / 8; i < std::min(kN, tok0 + kPassTokens) / 8; i += 2) {
          if (8 * i >= unit_rows) break;  // uniform
          float v[2][2];
#pragma unroll
          for (int b = 0; b < 2; ++b)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              v[b][h] = cuda::gated_f32<kEpi>(acc[mt][i + b][h] + bg, acc[mt][i + b][2 + h] + bu,
                                              p.swiglu_alpha, p.swiglu_limit);
          const int tok = 8 * (i + q % 2) + j - tok0, ch = tile16;
          stmatrix_x2_trans(stage + tok * kRowBytes + 16 * (ch ^ (tok % 8)),
                            pack_bf16x2(v[0][0], v[0][1]), pack_bf16x2(v[1][0], v[1][1]));
        }
      }
    }
    consumers_sync();  // the pass is staged
    const int rows = std::min({kPassTokens, kN - tok0, unit_rows - tok0});
    for (int x = tid; x < rows * kChunks; x += Cfg::kConsumers) {
      const int tok = x / kChunks, ch = x % kChunks;
      const int row = un.row_begin + tok0 + tok, col = col0 + 8 * ch;
      if (col >= out_cols) continue;
      const uint4 v = lds128(stage + tok * kRowBytes + 16 * (ch ^ (tok % 8)));
      *reinterpret_cast<uint4*>(p.out + static_cast<std::int64_t>(row) * p.ldo + col) = v;
    }
  }
  // The staging writes before the slot's next TMA writes (generic vs async proxy); every read of
  // the slot done before it is released.
  fence_proxy_async_smem();
  consumers_sync();
}

// The producer thread's feed: one stage of its CTA's units per call, in the consumers' order.
// gather: the activation rows come from the gather warps (a row index): the weights only.
template <typename Cfg, bool kGated>
__device__ __forceinline__ void issue_stage(WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>& f,
                                            const Params& p, const WgmmaGemmMaps& maps,
                                            const int* tile_start, const WgmmaGemmSmem<Cfg>& sm,
                                            bool classes, bool gather) {
  f.wait_slot_free(sm.empty(f.slot));
  // The unit's token class: its box of activation rows (the consumers' wgmma N).
  const int cls = token_class<Cfg::kTokens, Cfg::kNarrowTails>(
      min(f.un.row_end - f.un.row_begin, Cfg::kTokens), classes);
  const std::uint32_t bar = sm.full(f.slot), dst = sm.slot(f.slot);
  mbar_arrive_expect_tx(bar, ((gather ? 0 : token_class_width(cls)) + Cfg::kRows) * 128);
  const int k0 = f.c * Cfg::kStageK;
  if (!gather) tma_load_2d(dst, &maps.a[cls], k0, f.un.row_begin, bar);
  if constexpr (kGated) {
    tma_load_5d(dst + Cfg::kWOffset, &maps.w, k0, 0, 0, f.un.cta_rt * (Cfg::kRows / 16), f.un.e,
                bar);
  } else {
    tma_load_3d(dst + Cfg::kWOffset, &maps.w, k0, f.un.cta_rt * Cfg::kRows, f.un.e, bar);
  }
  f.advance(p, tile_start);
}

// With a row index, the activation rows of each stage come from the gather warps (warps 10 and
// 11 of the producer warpgroup: kGatherThreads threads, run_gather_warps), and the producer
// thread's stage (issue_stage with gather) counts and loads the weights only.
inline constexpr int kGatherThreads = 64;
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(std::uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Thread gt (0 .. kGatherThreads - 1) copies the 16-byte chunk gt % 8 of the stage's rows
// gt / 8 + 8 i (i < kTokens / 8) below the unit's rows (n_rows): a row's 8 chunks from 8
// neighbouring lanes (one 128-byte line), each to its 128-byte-swizzled place (chunk ^ row % 8,
// the TMA box's layout; row % 8 = gt / 8 for all of a thread's rows). Rows past n_rows keep what
// the slot held (their output columns are never stored, and each output column depends on its
// own activation row only); chunks past k are zero-filled (the weights' K tail is zero, and a
// stale NaN times zero would not be). Then one arrival on the slot's full barrier once the
// thread's copies landed (cp.async.mbarrier.arrive.noinc: the barrier counts these threads).
template <typename Cfg>
__device__ __forceinline__ void run_gather_warps(const WgmmaGemmParams& wp, const int* tile_start,
                                                 const WgmmaGemmSmem<Cfg>& sm, int units,
                                                 int stages, int cta_row_tiles, int gt) {
  using Cursor = WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>;
  Cursor f{static_cast<int>(blockIdx.x), 0, stages, units, cta_row_tiles, 0, 0, {}};
  f.next_unit(wp.p, tile_start);
  const int chunk = gt % 8, row0 = gt / 8;
  const std::uint32_t place = row0 * 128 + ((chunk ^ row0) * 16);
  const std::int64_t k_bytes = static_cast<std::int64_t>(wp.p.k) * (Cfg::kFp8 ? 1 : 2);
  while (f.u < units) {
    f.wait_slot_free(sm.empty(f.slot));
    const int n_rows = min(f.un.row_end - f.un.row_begin, Cfg::kTokens);
    const std::uint32_t dst = sm.slot(f.slot) + place;
    const std::int64_t col = static_cast<std::int64_t>(f.c) * 128 + chunk * 16;
    const bool in_k = col < k_bytes;
    const std::uint8_t* src = wp.gather_a + (in_k ? col : 0);
    const std::int32_t* index = wp.row_index + f.un.row_begin;
#pragma unroll
    for (int i = 0; i < Cfg::kTokens / 8; ++i) {
      const int row = row0 + 8 * i;
      if (row < n_rows)
        sm90::cp_async16(dst + i * 1024, src + __ldg(index + row) * wp.gather_lda, in_k);
    }
    cp_async_mbar_arrive_noinc(sm.full(f.slot));
    f.advance(wp.p, tile_start);
  }
}

// fp8: where token j's scale product sits in a stage's scale block (bytes). The promotion reads
// the products of columns 8i + 2t, +1 (accumulator group i, quad lane t) for the groups 2q and
// 2q + 1 as one 16-byte load at 64 q + 16 t: per 16 columns, the pairs of both groups interleave
// (x, y: group 2q; z, w: group 2q + 1). A quad's loads cover 64 contiguous bytes and the warp's
// eight quads read the same ones (a broadcast, one wavefront): half the shared loads of the plain
// layout's 8-byte load per group (SASS stage loop at the 160 tile: 183 -> 173 instructions).
__host__ __device__ constexpr int scale_product_offset(int j) {
  return 64 * (j / 16) + 16 * ((j % 8) / 2) + 8 * ((j / 8) % 2) + 4 * (j % 2);
}
static_assert(scale_product_offset(16 * 3 + 2 * 2) == 64 * 3 + 16 * 2, "group 2q, t = 2: x");
static_assert(scale_product_offset(16 * 3 + 8 + 2 * 2 + 1) == 64 * 3 + 16 * 2 + 12,
              "group 2q + 1, t = 2, odd column: w");
static_assert(scale_product_offset(37) == 128 + scale_product_offset(5), "32 columns: 128 B");
static_assert(scale_product_offset(159) == 4 * 128 + scale_product_offset(31), "the 160 tile");

// fp8: the scale warp's feed (all 32 lanes, `lane`): per stage the products of the stage's
// activation-row scales and the CTA tile's weight-block scale (rows past the expert: 0). The
// loads run two stages ahead of the stores (their latency would otherwise pace the ring).
template <typename Cfg>
struct StageScales {
  static constexpr int kPerLane = (Cfg::kTokens + 31) / 32;
  float sa[kPerLane], sb;
  __device__ void load(const WgmmaGemmParams& wp, const WgmmaUnit& un, int c, int lane) {
    const int kblocks = wp.p.k / 128, nblocks = (wp.p.n + 127) / 128;
    sb = wp.b_scales[(static_cast<std::int64_t>(un.e) * nblocks + un.cta_rt) * kblocks + c];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i, row = un.row_begin + j;
      const bool in = j < Cfg::kTokens && row < un.row_end;
      const std::int64_t src = in && wp.row_index != nullptr ? wp.row_index[row] : row;
      sa[i] = in ? wp.a_scales[src * kblocks + c] : 0.0f;
    }
  }
  // Token lane + 32 i goes to scale_product_offset(lane) + 128 i.
  __device__ void store(std::uint32_t dst, int lane) const {
    const std::uint32_t base = dst + scale_product_offset(lane);
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i;
      if (j < Cfg::kTokens) sts_f32(base + 128 * i, sa[i] * sb);
    }
  }
};

template <typename Cfg>
__device__ __forceinline__ void run_scale_warp(const WgmmaGemmParams& wp, const int* tile_start,
                                               const WgmmaGemmSmem<Cfg>& sm, int units, int stages,
                                               int cta_row_tiles, int lane) {
  using Cursor = WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>;
  Cursor f{static_cast<int>(blockIdx.x), 0, stages, units, cta_row_tiles, 0, 0, {}};
  f.next_unit(wp.p, tile_start);
  Cursor ahead = f;
  StageScales<Cfg> v[2];
  for (int b = 0; b < 2 && ahead.u < units; ++b) {
    v[b].load(wp, ahead.un, ahead.c, lane);
    ahead.advance(wp.p, tile_start);
  }
  // One stage of v[b]: wait for its scale slot (every consumer warp promoted its last stage),
  // store, arrive on the slot's full barrier (release: the lane's stores before the consumers'
  // reads), then load the stage two ahead into v[b].
  auto step = [&](StageScales<Cfg>& x) {
    f.wait_slot_free(sm.scales_empty(f.slot));
    x.store(sm.scales(f.slot), lane);
    mbar_arrive(sm.scales_bar(f.slot));
    f.advance(wp.p, tile_start);
    if (ahead.u < units) {
      x.load(wp, ahead.un, ahead.c, lane);
      ahead.advance(wp.p, tile_start);
    }
  };
  while (f.u < units) {
    step(v[0]);
    if (f.u < units) step(v[1]);
  }
}

// One unit (expert un.e, CTA row tile un.cta_rt, token tile from un.row_begin) on the consumer
// warpgroups: the stages from ring position seq on, then the epilogue. cls: the unit's token class
// (the stage loop exists once per class, with that class's wgmma N; the accumulators and the
// epilogue are the whole tile's, columns past the class are never stored). last: the CTA's last
// unit; its first is the one at seq 0 (fp8 in turn: where the issue order starts and ends).
template <typename Cfg, int kEpi>
__device__ __forceinline__ void wgmma_gemm_unit(const WgmmaGemmParams& wp,
                                                const WgmmaGemmSmem<Cfg>& sm, std::uint32_t seq,
                                                const WgmmaUnit& un, int cls, bool last) {
  using Elem = typename Cfg::Elem;
  using Acc = float[Cfg::kMTiles][Cfg::kTokens / 8][4];
  const Params& p = wp.p;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4, t = lane % 4;
  const int stages = (p.k + Cfg::kStageK - 1) / Cfg::kStageK;
  const bool gather = wp.row_index != nullptr;
  std::uint32_t rd = seq % Cfg::kStages, ph = (seq / Cfg::kStages) & 1, prev = rd;

  // Stage c's MMAs (wgmma N = kN, the class's width) into a (kMTiles m64 tiles; fp8 a fresh
  // chain, bf16 accumulating after c = 0) for warpgroup `group` (wg; the fp8 loop passes it as a
  // constant).
  auto issue = [&](auto n_tag, Acc& a, std::uint32_t slot, int c, int group) {
    constexpr int kN = decltype(n_tag)::value;
    const std::uint64_t db = smem_desc_k_major_sw128(slot);
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
        const std::uint64_t da =
            smem_desc_k_major_sw128(slot + Cfg::kWOffset + (group * Cfg::kMTiles + mt) * 64 * 128);
        const int accumulate = Cfg::kFp8 ? j > 0 : (c > 0 || j > 0);
        WgmmaSS<Elem, kN>::run(a[mt], da + 2 * j, db + 2 * j, accumulate);
      }
    wgmma_commit();
  };
  auto fence_acc = [&](Acc& a) {
#pragma unroll
    for (int mt = 0; mt < Cfg::kMTiles; ++mt)
#pragma unroll
      for (int i = 0; i < Cfg::kTokens / 8; ++i)
#pragma unroll
        for (int r = 0; r < 4; ++r) fence_operand(a[mt][i][r]);
  };
  auto advance = [&] {
    prev = rd;
    if (++rd == Cfg::kStages) rd = 0, ph ^= 1;
  };

  if constexpr (!Cfg::kFp8) {
    Acc acc;
    with_token_class<Cfg::kTokens>(cls, [&](auto n_tag) {
      for (int c = 0; c < stages; ++c) {
        mbar_wait(sm.full(rd), ph);
        if (gather) fence_proxy_async_smem();  // the gather warps' cp.async rows
        issue(n_tag, acc, sm.slot(rd), c, wg);
        wgmma_wait<1>();  // stage c - 1 retired: its slot is free
        if (c > 0) release_slot(sm.empty(prev), lane);
        advance();
      }
      wgmma_wait<0>();
    });
    fence_acc(acc);
    // The last stage's slot stages the output tile once both warpgroups are done with it.
    consumers_sync();
    store_unit<Cfg, kEpi>(p, acc, sm.slot(prev), un);
  } else {
    // tot += acc * s[column], s: the stage's scale products (its scale slot). tot starts at -0.0f,
    // so that the first stage's fmaf(x, s, -0) is bitwise x * s (a zero keeps its sign): one
    // FFMA per accumulator in every stage. (A runtime "first stage" test here made ptxas keep
    // both forms, predicated FMUL and FFMA, and copy the accumulators between them: about twice
    // the promotion's instructions per stage.) Columns past the class keep -0.
    Acc tot;
#pragma unroll
    for (int i = 0; i < Cfg::kTokens / 8; ++i)
#pragma unroll
      for (int r = 0; r < 4; ++r) tot[0][i][r] = -0.0f;
    auto promote = [&](auto n_tag, Acc& a, std::uint32_t scales) {
      constexpr int kN = decltype(n_tag)::value;
      fence_acc(a);
      static_assert(kN % 16 == 0, "the promotion reads 16 columns at a time");
      // Group i's columns 8i + 2t (registers 0, 2) and 8i + 2t + 1 (1, 3).
      auto group = [&](int i, float s_even, float s_odd) {
        float* o = tot[0][i];
        const float* x = a[0][i];
        o[0] = fmaf(x[0], s_even, o[0]), o[1] = fmaf(x[1], s_odd, o[1]);
        o[2] = fmaf(x[2], s_even, o[2]), o[3] = fmaf(x[3], s_odd, o[3]);
      };
#pragma unroll
      for (int q = 0; q < kN / 16; ++q) {
        // x, y: columns 16q + 2t, +1 (group 2q); z, w: 16q + 8 + 2t, +1 (group 2q + 1).
        const float4 s = lds_f4(scales + 64 * q + 16 * t);
        group(2 * q, s.x, s.y);
        group(2 * q + 1, s.z, s.w);
      }
    };
    // Issue, retire, promote. In turn (wp.fp8_in_turn), the tensor cores run one warpgroup's
    // chain while the other promotes (in step, both promote at once and the tensor cores idle):
    // warpgroup 0 issues stage c after warpgroup 1 issued c - 1 (barrier 3), warpgroup 1 after
    // warpgroup 0 issued c (barrier 2). One copy of the loop per warpgroup (kWg), so that its
    // barrier ids and weight-tile offset are constants: with wg a run-time value ptxas re-read
    // %tid.x (S2R) in every stage to rebuild them, right before the barrier wait and the issue
    // (ncu, mixtral 4096: ~8% of the kernel's stall samples waited on that read).
    const bool in_turn = wp.fp8_in_turn != 0;
    Acc acc;
    auto stages_of = [&](auto wg_tag, auto n_tag) {
      constexpr int kWg = decltype(wg_tag)::value;
      for (int c = 0; c < stages; ++c) {
        mbar_wait(sm.full(rd), ph);
        mbar_wait(sm.scales_bar(rd), ph);  // the scale products
        if (gather) fence_proxy_async_smem();  // the gather warps' cp.async rows
        if (in_turn && (kWg == 1 || seq > 0 || c > 0)) issued_wait(kWg == 1 ? 2 : 3);
        issue(n_tag, acc, sm.slot(rd), c, kWg);
        if (in_turn && (kWg == 0 || !last || c + 1 < stages)) issued_arrive(kWg == 0 ? 2 : 3);
        wgmma_wait<0>();
        // The chain retired: the stage slot back to the TMA (the last one after the epilogue,
        // which stages the output tile in it), the scale slot once promoted.
        if (c + 1 < stages) release_slot(sm.empty(rd), lane);
        promote(n_tag, acc, sm.scales(rd));
        release_slot(sm.scales_empty(rd), lane);
        advance();
      }
    };
    with_token_class<Cfg::kTokens>(cls, [&](auto n_tag) {
      if (wg == 0)
        stages_of(std::integral_constant<int, 0>{}, n_tag);
      else
        stages_of(std::integral_constant<int, 1>{}, n_tag);
    });
    consumers_sync();
    store_unit<Cfg, kEpi>(p, tot, sm.slot(prev), un);
  }
  release_slot(sm.empty(prev), lane);
}

template <typename Cfg, int kEpi>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_grouped_gemm_kernel(const __grid_constant__ WgmmaGemmParams wp,
                              const __grid_constant__ WgmmaGemmMaps maps) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Params& p = wp.p;
  int* tile_start = reinterpret_cast<int*>(smem);
  const std::uint32_t ring = (smem_addr(smem) + expert_prefix_bytes(p.num_experts) + 1023) & ~1023u;
  const WgmmaGemmSmem<Cfg> sm(ring);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  if (tid == 0) {
    if constexpr (Cfg::kFp8) {
      for (int s = 0; s < Cfg::kStages; ++s) {
        cuda::sm90::mbar_init(sm.scales_bar(s), 32);
        cuda::sm90::mbar_init(sm.scales_empty(s), Cfg::kConsumers / 32);
      }
    }
    // (its fence publishes the scale barriers too); with a row index the full barriers also
    // count the gather threads' cp.async arrivals
    sm.init(Cfg::kConsumers / 32, wp.row_index != nullptr ? 1 + kGatherThreads : 1);
  }
  if (warp == 1) prefix_token_tiles<Cfg::kTokens>(p, lane, tile_start);
  __syncthreads();  // the last CTA-wide barrier: from here on only mbarriers

  const int cta_row_tiles = (p.n + Cfg::kRows - 1) / Cfg::kRows;
  const int units = tile_start[p.num_experts] * cta_row_tiles;
  const int stages = (p.k + Cfg::kStageK - 1) / Cfg::kStageK;
  if (tid >= Cfg::kConsumers) {  // the producer warpgroup
    const bool gather = wp.row_index != nullptr;
    run_wgmma_producer<Cfg::kTokens, Cfg::kStages, Cfg::kProducerRegs>(
        tid == Cfg::kConsumers, maps, p, tile_start, units, stages, cta_row_tiles,
        [&](WgmmaStageCursor<Cfg::kTokens, Cfg::kStages>& f) {
          issue_stage<Cfg, kEpi != 0>(f, p, maps, tile_start, sm, wp.token_classes != 0, gather);
        });
    if (gather && warp >= Cfg::kConsumers / 32 + 2)  // warps 10, 11: the activation rows
      run_gather_warps<Cfg>(wp, tile_start, sm, units, stages, cta_row_tiles,
                            tid - Cfg::kConsumers - 64);
    if constexpr (Cfg::kFp8) {
      if (warp == Cfg::kConsumers / 32 + 1)  // the scale warp
        run_scale_warp<Cfg>(wp, tile_start, sm, units, stages, cta_row_tiles, lane);
    }
    return;
  }
  setmaxnreg_inc<Cfg::kConsumerRegs>();
  std::uint32_t seq = 0;  // stages consumed so far (ring slot / mbarrier phase)
  for (int u = blockIdx.x; u < units; u += gridDim.x, seq += stages) {
    const WgmmaUnit un = wgmma_unit_at<Cfg::kTokens>(p, tile_start, cta_row_tiles, u);
    const bool last = u + gridDim.x >= units;
    const int cls = token_class<Cfg::kTokens, Cfg::kNarrowTails>(
        min(un.row_end - un.row_begin, Cfg::kTokens), wp.token_classes != 0);
    wgmma_gemm_unit<Cfg, kEpi>(wp, sm, seq, un, cls, last);
  }
}

// Host: launches the persistent grid (one CTA per SM) for Cfg on `stream`; max_rows: the
// activations' rows (the units' bound). Returns the CUDA error of the attribute / occupancy
// calls or the launch.
template <typename Cfg, int kEpi>
cudaError_t launch_wgmma_grouped_gemm(const WgmmaGemmParams& wp, const WgmmaGemmMaps& maps,
                                      std::int64_t max_rows, cudaStream_t stream) {
  auto kernel = wgmma_grouped_gemm_kernel<Cfg, kEpi>;
  const int smem = Cfg::smem_bytes(wp.p.num_experts);
  std::int64_t grid = 0;
  const cudaError_t err = persistent_grid(
      kernel, Cfg::kThreads, smem,
      grouped_units_bound(max_rows, wp.p.num_experts, wp.p.n, Cfg::kTokens, Cfg::kRows), 0, &grid);
  if (err != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, smem, stream>>>(wp, maps);
  return cudaGetLastError();
}

// Host: the launch's TMA descriptors for Cfg. The activations [max_rows][k] (row stride lda); the
// weights [E][n][k] contiguous, plain (3-D) or, gated, with each 16-row tile's 8 gate rows then
// its 8 up rows (5-D: k, row in 8, half, 8-row group, expert; the strides walk the memory out of
// order, which the driver takes).
template <typename Cfg>
WgmmaGemmMaps wgmma_gemm_maps(const GroupedGemmArgs& args, bool gated) {
  const CUtensorMapDataType type =
      Cfg::kFp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const std::uint64_t elem = Cfg::kFp8 ? 1 : 2;
  const std::uint64_t k = static_cast<std::uint64_t>(args.k),
                      n = static_cast<std::uint64_t>(args.n);
  WgmmaGemmMaps m;
  // (With a row index the gather warps read the rows: the class maps are encoded all the same,
  // over max_rows rows of a, and stay unused.)
  sm90::encode_token_class_maps<Cfg::kTokens>(
      m.a, "a", type, args.a, k, static_cast<std::uint64_t>(args.rows),
      static_cast<std::uint64_t>(args.lda) * elem, Cfg::kStageK);
  const std::uint64_t row = k * elem, experts = static_cast<std::uint64_t>(args.num_experts);
  if (gated) {
    const std::uint64_t dims[5] = {k, 8, 2, n / 16, experts};
    const std::uint64_t strides[4] = {row, (n / 2) * row, 8 * row, n * row};
    const std::uint32_t box[5] = {static_cast<std::uint32_t>(Cfg::kStageK), 8, 2, Cfg::kRows / 16,
                                  1};
    m.w = cuda::encode_tensor_map("w", type, args.w, 5, dims, strides, box,
                                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  } else {
    const std::uint64_t dims[3] = {k, n, experts};
    const std::uint64_t strides[2] = {row, n * row};
    const std::uint32_t box[3] = {static_cast<std::uint32_t>(Cfg::kStageK), Cfg::kRows, 1};
    m.w = cuda::encode_tensor_map("w", type, args.w, 3, dims, strides, box,
                                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  }
  return m;
}

// Host: validates what only this config needs and launches Cfg for the validated `args`
// (grouped_gemm's checks; gated only for bf16). `where` names the call in errors.
template <typename Cfg>
void run_wgmma_grouped_gemm(const GroupedGemmArgs& args, const GemmConfig& config,
                            const char* where) {
  const int max_smem = cuda::current_device_max_smem_optin();
  const int smem = Cfg::smem_bytes(args.num_experts);
  MOEKIT_CHECK_ARG(
      smem <= max_smem, "num_experts",
      ::moekit::detail::concat("at most what fits in ", max_smem, " bytes of shared memory (",
                               where, " needs ", smem, ")"),
      args.num_experts);

  WgmmaGemmParams wp{};
  wp.p = grouped_gemm_output_params(args);
  wp.a_scales = args.a_scales;
  wp.b_scales = static_cast<const float*>(args.w_scales);
  wp.row_index = args.row_index;
  wp.gather_a = static_cast<const std::uint8_t*>(args.a);
  wp.gather_lda = args.lda * (Cfg::kFp8 ? 1 : 2);
  wp.fp8_in_turn = Cfg::kFp8 && config.fp8_in_turn;
  wp.token_classes = config.token_classes ? 1 : 0;
  const bool gated = args.epilogue.gated();
  const WgmmaGemmMaps maps = wgmma_gemm_maps<Cfg>(args, gated);
  const auto stream = static_cast<cudaStream_t>(args.stream);
  cudaError_t err = cudaSuccess;
  if (!gated) {
    err = launch_wgmma_grouped_gemm<Cfg, 0>(wp, maps, args.rows, stream);
  } else if constexpr (Cfg::kFp8) {
    MOEKIT_FAIL(where, ": gated: expected null (fp8 runs the activation kernel between the GEMMs)");
  } else if (args.epilogue.kind == EpilogueKind::kSwigluOai) {
    err = launch_wgmma_grouped_gemm<Cfg, 2>(wp, maps, args.rows, stream);
  } else {
    err = launch_wgmma_grouped_gemm<Cfg, 1>(wp, maps, args.rows, stream);
  }
  MOEKIT_CUDA_CHECK(err);
}

}  // namespace moekit::gemm::sm90::wgmma
