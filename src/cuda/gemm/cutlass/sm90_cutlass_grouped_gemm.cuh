// The SM90 grouped (ptr-array) GEMMs on CUTLASS 4.2, bf16 and fp8 block: one template for every
// kernel config, instantiated once per translation unit (sm90_{bf16,fp8_block}_*_cutlass.cu: one
// instantiation per TU keeps the build's compile time bounded). The TU names its config:
//   CutlassGroupedGemm<kFp8, TileShape, KernelSchedule, EpilogueSchedule, kSwapAB>
// Everything else (types, the device kernel that builds per-expert arguments from expert_offsets,
// the CUTLASS launch) is shared.
//
// fp8 block: KernelPtrArrayTmaWarpSpecialized*FP8Blockwise (CUTLASS example 68): the wgmma
// accumulators are promoted into fp32 registers once per 128-wide K block, multiplied by
// sA[m, kb] * sB[n/128, kb] (formats.md section 5, up to fp32 summation order). Scales K-major (sA
// [R, K/128], sB [E, N/128, K/128], the checkpoint / quantizer layout), loaded with cp.async beside
// the TMA loads, so per-expert slices are plain pointer offsets.
//
// Swap-AB (kSwapAB): the kernel computes D^T = W * A^T, i.e. the weights [N, K] are the MMA's M
// side and the expert's rows its N side, so a small tile N holds all rows of an expert (no padding
// of 1-160 rows to 64/128-row tiles) and the weight tile sets the CTA count. D^T [N, rows]
// column-major is exactly D [rows, N] row-major: the output layout is unchanged. The block scales
// swap roles with the operands: the kernel's SFA is the weights' 128x128 scale (granularity 128
// along its M), its SFB the activations' 1x128 scale (granularity 1).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace moekit::gemm::sm90::cutlass_grouped {

// Bytes of the per-expert argument arrays, rounded so the CUTLASS scratch that follows is aligned.
constexpr std::size_t kWorkspaceAlign = 256;
constexpr std::size_t align_up(std::size_t x) {
  return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
}

template <bool kFp8, typename TileShape_, typename KernelSchedule_, typename EpilogueSchedule_,
          bool kSwapAB>
struct CutlassGroupedGemm {
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Element = std::conditional_t<kFp8, cutlass::float_e4m3_t, cutlass::bfloat16_t>;
  using ElementD = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;     // [M, K]
  using LayoutB = cutlass::layout::ColumnMajor;  // KxN column-major == [N, K] row-major
  // Not swapped: D [rows, N] row-major. Swapped: D^T [N, rows] column-major (the same bytes).
  using LayoutD =
      std::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignAB = 16 / sizeof(Element);  // 16 bytes of A / B
  static constexpr int kAlignD = 8;                       // 16 bytes of bf16
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  // fp8 scale granularity (kernel M, kernel N, K): activations 1 x 128, weights 128 x 128.
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<kSwapAB ? 128 : 1, kSwapAB ? 1 : 128, 128,
                                                cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
  using MainloopLayoutA = std::conditional_t<kFp8, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using MainloopLayoutB = std::conditional_t<kFp8, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape_, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD,
      ElementD, LayoutD*, kAlignD, EpilogueSchedule_,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, MainloopLayoutA, kAlignAB,
      Element, MainloopLayoutB, kAlignAB, float, TileShape_, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule_>::CollectiveOp;
  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
  using Shape3 = typename ProblemShape::UnderlyingProblemShape;

  // The per-expert argument arrays, carved from the front of the workspace (the scale pointers and
  // layouts: fp8 only).
  struct ArgArrays {
    Shape3* shapes;
    const Element** ptr_a;
    const Element** ptr_b;
    ElementD** ptr_d;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideD* stride_d;
    const float** ptr_sfa;
    const float** ptr_sfb;
    LayoutSFA* layout_sfa;
    LayoutSFB* layout_sfb;
    void* cutlass_workspace;
  };

  static ArgArrays carve(void* workspace, int e) {
    const std::size_t n = static_cast<std::size_t>(e);
    auto* p = static_cast<char*>(workspace);
    auto take = [&](std::size_t bytes) {
      char* at = p;
      p += align_up(bytes);
      return at;
    };
    ArgArrays a{};
    a.shapes = reinterpret_cast<Shape3*>(take(n * sizeof(Shape3)));
    a.ptr_a = reinterpret_cast<const Element**>(take(n * sizeof(void*)));
    a.ptr_b = reinterpret_cast<const Element**>(take(n * sizeof(void*)));
    a.ptr_d = reinterpret_cast<ElementD**>(take(n * sizeof(void*)));
    a.stride_a = reinterpret_cast<StrideA*>(take(n * sizeof(StrideA)));
    a.stride_b = reinterpret_cast<StrideB*>(take(n * sizeof(StrideB)));
    a.stride_d = reinterpret_cast<StrideD*>(take(n * sizeof(StrideD)));
    if constexpr (kFp8) {
      a.ptr_sfa = reinterpret_cast<const float**>(take(n * sizeof(void*)));
      a.ptr_sfb = reinterpret_cast<const float**>(take(n * sizeof(void*)));
      a.layout_sfa = reinterpret_cast<LayoutSFA*>(take(n * sizeof(LayoutSFA)));
      a.layout_sfb = reinterpret_cast<LayoutSFB*>(take(n * sizeof(LayoutSFB)));
    }
    a.cutlass_workspace = p;
    return a;
  }

  static typename Gemm::Arguments make_arguments(int num_experts, const ArgArrays& w) {
    cutlass::KernelHardwareInfo hw;
    MOEKIT_CUDA_CHECK(cudaGetDevice(&hw.device_id));
    hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(hw.device_id);
    auto args = [&] {
      if constexpr (kFp8) {
        return typename Gemm::Arguments{
            cutlass::gemm::GemmUniversalMode::kGrouped,
            {num_experts, w.shapes, nullptr},
            {w.ptr_a, w.stride_a, w.ptr_b, w.stride_b, w.ptr_sfa, w.layout_sfa, w.ptr_sfb,
             w.layout_sfb},
            {{}, nullptr, w.stride_d, w.ptr_d, w.stride_d},
            hw};
      } else {
        return typename Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGrouped,
                                        {num_experts, w.shapes, nullptr},
                                        {w.ptr_a, w.stride_a, w.ptr_b, w.stride_b},
                                        {{}, nullptr, w.stride_d, w.ptr_d, w.stride_d},
                                        hw};
      }
    }();
    // Swapped, the N side is an expert's rows (one or two tiles): N-fastest tile order keeps the
    // tiles that share a weight tile adjacent, so the second one reads it from L2. Unswapped, the
    // grouped scheduler's default (AlongM, not its shape heuristic, which would see a 132 x 1
    // grid here) already keeps the row tiles of one weight tile adjacent. (ncu, mixtral-8x7b fp8
    // GEMM1 at 4096 tokens: DRAM 14% busy for 2.10 ms, about 1.4 GB: the 0.94 GB of weights once
    // and the 0.47 GB output; bench/results/layer_20261203b_fp8_wgmma_vs_cutlass_ncu.txt.)
    using Raster = decltype(args.scheduler.raster_order);
    if constexpr (kSwapAB) args.scheduler.raster_order = Raster::AlongN;
    auto& fusion = args.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.beta = 0.0f;
    return args;
  }

  static std::size_t workspace_bytes(int num_experts) {
    const ArgArrays dummy = carve(nullptr, num_experts);
    // carve(nullptr) lays the arrays out from address 0: the scratch's address is their size.
    return reinterpret_cast<std::uintptr_t>(dummy.cutlass_workspace) +
           Gemm::get_workspace_size(make_arguments(num_experts, dummy));
  }

  static void run(const GroupedGemmArgs& p);
};

// One thread per expert: problem size and pointers from expert_offsets (offsets clamped to
// [0, rows] so a bad routing can never make the GEMM touch rows outside the buffers). Both
// operands are K-major with row strides lda (activations) and k (weights); swapped, the weights
// are the kernel's A and the activation rows its B. fp8: sA rows follow A's rows ([R, K/128]), sB
// is [E, ceil(N/128), K/128].
template <typename G>
__global__ void build_args_kernel(int num_experts, int n, int k, long long max_rows,
                                  const int* __restrict__ offsets,
                                  const typename G::Element* a, long long lda,
                                  const typename G::Element* b, typename G::ElementD* d,
                                  long long ldd, const float* a_scales, const float* b_scales,
                                  typename G::ArgArrays out) {
  constexpr bool kSwapAB = std::is_same_v<typename G::LayoutD, cutlass::layout::ColumnMajor>;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= num_experts) return;
  long long r0 = min(max(static_cast<long long>(offsets[e]), 0ll), max_rows);
  long long r1 = min(max(static_cast<long long>(offsets[e + 1]), r0), max_rows);
  const int rows = static_cast<int>(r1 - r0);
  const auto* rows_ptr = a + r0 * lda;
  const auto* weights_ptr = b + static_cast<long long>(e) * n * k;
  out.shapes[e] = kSwapAB ? typename G::Shape3{n, rows, k} : typename G::Shape3{rows, n, k};
  out.ptr_a[e] = kSwapAB ? weights_ptr : rows_ptr;
  out.ptr_b[e] = kSwapAB ? rows_ptr : weights_ptr;
  typename G::StrideA sa{};
  cute::get<0>(sa) = kSwapAB ? k : lda;  // row-major A: the stride between its M rows
  typename G::StrideB sb{};
  cute::get<0>(sb) = kSwapAB ? lda : k;  // column-major B: the stride between its N columns
  typename G::StrideD sd{};
  // Row-major D: stride between rows; column-major D^T: column r (one output row) at r * ldd.
  cute::get<kSwapAB ? 1 : 0>(sd) = ldd;
  out.ptr_d[e] = d + r0 * ldd;
  out.stride_a[e] = sa;
  out.stride_b[e] = sb;
  out.stride_d[e] = sd;
  if constexpr (std::is_same_v<typename G::Element, cutlass::float_e4m3_t>) {
    const int kb = k / 128;
    const int nb = (n + 127) / 128;
    const float* rows_scales = a_scales + r0 * kb;
    const float* weight_scales = b_scales + static_cast<long long>(e) * nb * kb;
    out.ptr_sfa[e] = kSwapAB ? weight_scales : rows_scales;
    out.ptr_sfb[e] = kSwapAB ? rows_scales : weight_scales;
    const auto mnk = kSwapAB ? cute::make_shape(n, rows, k, 1) : cute::make_shape(rows, n, k, 1);
    out.layout_sfa[e] = G::ScaleConfig::tile_atom_to_shape_SFA(mnk);
    out.layout_sfb[e] = G::ScaleConfig::tile_atom_to_shape_SFB(mnk);
  }
}

template <bool kFp8, typename T, typename K, typename E, bool kSwapAB>
void CutlassGroupedGemm<kFp8, T, K, E, kSwapAB>::run(const GroupedGemmArgs& p) {
  using G = CutlassGroupedGemm;
  auto stream = static_cast<cudaStream_t>(p.stream);
  const ArgArrays w = carve(p.workspace, p.num_experts);
  const int threads = 128;
  build_args_kernel<G><<<(p.num_experts + threads - 1) / threads, threads, 0, stream>>>(
      p.num_experts, static_cast<int>(p.n), static_cast<int>(p.k), p.rows, p.expert_offsets,
      static_cast<const Element*>(p.a), p.lda, static_cast<const Element*>(p.w),
      static_cast<ElementD*>(p.out), p.ldo, p.a_scales, static_cast<const float*>(p.w_scales), w);
  MOEKIT_CUDA_CHECK_LAUNCH();
  auto args = make_arguments(p.num_experts, w);
  Gemm gemm;
  const char* what = kFp8 ? "fp8 block grouped GEMM" : "bf16 grouped GEMM";
  cutlass::Status s = gemm.can_implement(args);
  MOEKIT_CHECK(s == cutlass::Status::kSuccess, what, ": CUTLASS can_implement failed: ",
               cutlassGetStatusString(s));
  s = gemm.initialize(args, w.cutlass_workspace, stream);
  MOEKIT_CHECK(s == cutlass::Status::kSuccess, what, ": CUTLASS initialize failed: ",
               cutlassGetStatusString(s));
  s = gemm.run(stream);
  MOEKIT_CHECK(s == cutlass::Status::kSuccess, what, ": CUTLASS run failed: ",
               cutlassGetStatusString(s));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::gemm::sm90::cutlass_grouped

// Defines one config's entry points (sm90_cutlass_configs.hpp) in its translation unit:
//   MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(bf16_wide, kFp8, TileShape, KernelSchedule,
//                                      EpilogueSchedule, kSwapAB)
// gives bf16_wide_workspace_bytes(num_experts) and bf16_wide_run(args) of that instantiation.
#define MOEKIT_CUTLASS_GROUPED_GEMM_CONFIG(name, ...)                                  \
  namespace moekit::gemm::sm90::cutlass_grouped {                                     \
  std::size_t name##_workspace_bytes(int num_experts) {                               \
    return CutlassGroupedGemm<__VA_ARGS__>::workspace_bytes(num_experts);             \
  }                                                                                   \
  void name##_run(const GroupedGemmArgs& args) { CutlassGroupedGemm<__VA_ARGS__>::run(args); } \
  }
