// The body of the SM90 grouped (ptr-array) BF16 GEMM translation units: each includes it once
// after defining its kernel config (one instantiation per TU keeps CI compile time bounded):
//   MOEKIT_GEMM_TILE_SHAPE, MOEKIT_GEMM_KERNEL_SCHEDULE, MOEKIT_GEMM_EPILOGUE_SCHEDULE,
//   MOEKIT_GEMM_WORKSPACE_FN, MOEKIT_GEMM_RUN_FN (the names of the two entry points), and
//   optionally MOEKIT_GEMM_SWAP_AB (default 0).
// Everything else (types, the device kernel that builds per-expert arguments from
// expert_offsets, the CUTLASS launch) is shared. See sm90_bf16_grouped_gemm_cutlass.cu.
//
// Swap-AB (MOEKIT_GEMM_SWAP_AB 1): the kernel computes D^T = W * A^T, i.e. the weights [N, K]
// are the MMA's M side and the expert's rows its N side, so a small tile N holds all rows of an
// expert (no padding of 1-160 rows to 64/128-row tiles) and the weight tile sets the CTA count.
// D^T [N, rows] column-major is exactly D [rows, N] row-major: the output layout is unchanged.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/gemm/sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace moekit::gemm::detail {
namespace {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using ElementA = cutlass::bfloat16_t;
using ElementB = cutlass::bfloat16_t;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;     // [M, K]
using LayoutB = cutlass::layout::ColumnMajor;  // KxN column-major == [N, K] row-major
#ifndef MOEKIT_GEMM_SWAP_AB
#define MOEKIT_GEMM_SWAP_AB 0
#endif
constexpr bool kSwapAB = MOEKIT_GEMM_SWAP_AB != 0;
// Not swapped: D [rows, N] row-major. Swapped: D^T [N, rows] column-major (the same bytes).
using LayoutD = std::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
constexpr int kAlign = 8;                      // 16 bytes of bf16

using TileShape = MOEKIT_GEMM_TILE_SHAPE;
using ClusterShape = cute::Shape<_1, _1, _1>;
using KernelSchedule = MOEKIT_GEMM_KERNEL_SCHEDULE;
using EpilogueSchedule = MOEKIT_GEMM_EPILOGUE_SCHEDULE;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlign, ElementD,
    LayoutD*, kAlign, EpilogueSchedule,
    cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA*, kAlign, ElementB,
    LayoutB*, kAlign, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using GemmKernel =
    cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

using StrideA = typename GemmKernel::InternalStrideA;
using StrideB = typename GemmKernel::InternalStrideB;
using StrideD = typename GemmKernel::InternalStrideD;
using Shape3 = ProblemShape::UnderlyingProblemShape;

// The per-expert argument arrays, carved from the front of the workspace.
struct ArgArrays {
  Shape3* shapes;
  const ElementA** ptr_a;
  const ElementB** ptr_b;
  ElementD** ptr_d;
  StrideA* stride_a;
  StrideB* stride_b;
  StrideD* stride_d;
  void* cutlass_workspace;
};

std::size_t arg_bytes(int e) {
  const std::size_t n = static_cast<std::size_t>(e);
  return align_up(n * sizeof(Shape3)) + 3 * align_up(n * sizeof(void*)) +
         align_up(n * sizeof(StrideA)) + align_up(n * sizeof(StrideB)) +
         align_up(n * sizeof(StrideD));
}

ArgArrays carve(void* workspace, int e) {
  const std::size_t n = static_cast<std::size_t>(e);
  auto* p = static_cast<char*>(workspace);
  ArgArrays a{};
  a.shapes = reinterpret_cast<Shape3*>(p);
  p += align_up(n * sizeof(Shape3));
  a.ptr_a = reinterpret_cast<const ElementA**>(p);
  p += align_up(n * sizeof(void*));
  a.ptr_b = reinterpret_cast<const ElementB**>(p);
  p += align_up(n * sizeof(void*));
  a.ptr_d = reinterpret_cast<ElementD**>(p);
  p += align_up(n * sizeof(void*));
  a.stride_a = reinterpret_cast<StrideA*>(p);
  p += align_up(n * sizeof(StrideA));
  a.stride_b = reinterpret_cast<StrideB*>(p);
  p += align_up(n * sizeof(StrideB));
  a.stride_d = reinterpret_cast<StrideD*>(p);
  p += align_up(n * sizeof(StrideD));
  a.cutlass_workspace = p;
  return a;
}

// One thread per expert: problem size and pointers from expert_offsets (offsets clamped to
// [0, max_rows] so a bad routing can never make the GEMM touch rows outside the buffers).
// Both operands are K-major with row strides lda (activations) and k (weights); swapped, the
// weights are the kernel's A and the activation rows its B.
__global__ void build_args_kernel(int num_experts, int n, int k, long long max_rows,
                                  const int* __restrict__ offsets, const ElementA* a,
                                  long long lda, const ElementB* b, ElementD* d, long long ldd,
                                  ArgArrays out) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= num_experts) return;
  long long r0 = min(max(static_cast<long long>(offsets[e]), 0ll), max_rows);
  long long r1 = min(max(static_cast<long long>(offsets[e + 1]), r0), max_rows);
  const int rows = static_cast<int>(r1 - r0);
  const ElementA* rows_ptr = a + r0 * lda;
  const ElementB* weights_ptr = b + static_cast<long long>(e) * n * k;
  // (A and B have the same element type: the operands swap by pointer.)
  static_assert(std::is_same_v<ElementA, ElementB>);
  out.shapes[e] = kSwapAB ? Shape3{n, rows, k} : Shape3{rows, n, k};
  out.ptr_a[e] = kSwapAB ? weights_ptr : rows_ptr;
  out.ptr_b[e] = kSwapAB ? rows_ptr : weights_ptr;
  StrideA sa{};
  cute::get<0>(sa) = kSwapAB ? k : lda;  // row-major A: the stride between its M rows
  StrideB sb{};
  cute::get<0>(sb) = kSwapAB ? lda : k;  // column-major B: the stride between its N columns
  StrideD sd{};
  // Row-major D: stride between rows; column-major D^T: column r (one output row) at r * ldd.
  cute::get<kSwapAB ? 1 : 0>(sd) = ldd;
  out.ptr_d[e] = d + r0 * ldd;
  out.stride_a[e] = sa;
  out.stride_b[e] = sb;
  out.stride_d[e] = sd;
}

typename Gemm::Arguments make_arguments(int num_experts, const ArgArrays& w) {
  cutlass::KernelHardwareInfo hw;
  MOEKIT_CUDA_CHECK(cudaGetDevice(&hw.device_id));
  hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(hw.device_id);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGrouped,
      {num_experts, w.shapes, nullptr},
      {w.ptr_a, w.stride_a, w.ptr_b, w.stride_b},
      {{}, nullptr, w.stride_d, w.ptr_d, w.stride_d},
      hw};
  // Swapped, the N side is an expert's rows (one or two tiles): N-fastest tile order keeps the
  // tiles that share a weight tile adjacent, so the second one reads it from L2. Unswapped, the
  // grouped scheduler's default (AlongM, not its shape heuristic, which would see a 132 x 1 grid
  // here) already keeps the row tiles of one weight tile adjacent. (ncu, mixtral-8x7b fp8 GEMM1
  // at 4096 tokens, 8 row tiles x 224 weight tiles per expert: DRAM 14% busy for 2.10 ms, about
  // 1.4 GB: its 0.94 GB of weights once and its 0.47 GB output;
  // bench/results/layer_20261203b_fp8_wgmma_vs_cutlass_ncu.txt.)
  using Raster = decltype(args.scheduler.raster_order);
  if constexpr (kSwapAB) args.scheduler.raster_order = Raster::AlongN;
  auto& fusion = args.epilogue.thread;
  fusion.alpha = 1.0f;
  fusion.beta = 0.0f;
  return args;
}

}  // namespace

std::size_t MOEKIT_GEMM_WORKSPACE_FN(int num_experts) {
  ArgArrays dummy = carve(nullptr, num_experts);
  return arg_bytes(num_experts) + Gemm::get_workspace_size(make_arguments(num_experts, dummy));
}

void MOEKIT_GEMM_RUN_FN(const GroupedGemmArgs& p) {
  auto stream = static_cast<cudaStream_t>(p.stream);
  ArgArrays w = carve(p.workspace, p.num_experts);
  const int threads = 128;
  build_args_kernel<<<(p.num_experts + threads - 1) / threads, threads, 0, stream>>>(
      p.num_experts, static_cast<int>(p.n), static_cast<int>(p.k), p.max_rows, p.expert_offsets,
      static_cast<const ElementA*>(p.a), p.lda, static_cast<const ElementB*>(p.b),
      static_cast<ElementD*>(p.d), p.ldd, w);
  MOEKIT_CUDA_CHECK_LAUNCH();
  auto args = make_arguments(p.num_experts, w);
  Gemm gemm;
  cutlass::Status s = gemm.can_implement(args);
  MOEKIT_CHECK(s == cutlass::Status::kSuccess, "bf16 grouped GEMM: CUTLASS can_implement failed: ",
               cutlassGetStatusString(s));
  s = gemm.initialize(args, w.cutlass_workspace, stream);
  MOEKIT_CHECK(s == cutlass::Status::kSuccess, "bf16 grouped GEMM: CUTLASS initialize failed: ",
               cutlassGetStatusString(s));
  s = gemm.run(stream);
  MOEKIT_CHECK(s == cutlass::Status::kSuccess, "bf16 grouped GEMM: CUTLASS run failed: ",
               cutlassGetStatusString(s));
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace moekit::gemm::detail
