// The CUTLASS configs of grouped_gemm (grouped_gemm_launchers.hpp): scheme x kernel -> the
// translation unit that instantiates it. Compiled only with the CUTLASS headers.
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "moekit/core/error.hpp"

#if MOEKIT_WITH_CUTLASS
namespace moekit::gemm::sm90::cutlass_grouped {
namespace {

struct Entry {
  std::size_t (*workspace_bytes)(int num_experts);
  void (*run)(const GroupedGemmArgs& args);
};

Entry entry(GemmScheme scheme, GemmKernel kernel) {
  const bool fp8 = scheme == GemmScheme::kFP8Block;
  MOEKIT_CHECK(fp8 || scheme == GemmScheme::kBF16, "cutlass grouped GEMM: scheme ",
               gemm_scheme_name(scheme), " has no CUTLASS kernel");
  switch (kernel) {
    case GemmKernel::kCutlassWide:
      return fp8 ? Entry{fp8_block_wide_workspace_bytes, fp8_block_wide_run}
                 : Entry{bf16_wide_workspace_bytes, bf16_wide_run};
    case GemmKernel::kCutlassNarrow:
      return fp8 ? Entry{fp8_block_narrow_workspace_bytes, fp8_block_narrow_run}
                 : Entry{bf16_narrow_workspace_bytes, bf16_narrow_run};
    case GemmKernel::kCutlassSwapWide:
      return fp8 ? Entry{fp8_block_swap_wide_workspace_bytes, fp8_block_swap_wide_run}
                 : Entry{bf16_swap_wide_workspace_bytes, bf16_swap_wide_run};
    default:
      break;
  }
  MOEKIT_FAIL("cutlass grouped GEMM: ", gemm_kernel_name(kernel), " is not a CUTLASS kernel");
}

}  // namespace

std::size_t workspace_bytes(GemmScheme scheme, GemmKernel kernel, int num_experts) {
  return entry(scheme, kernel).workspace_bytes(num_experts);
}

void run(const GroupedGemmArgs& args, GemmKernel kernel) { entry(args.scheme, kernel).run(args); }

}  // namespace moekit::gemm::sm90::cutlass_grouped
#endif  // MOEKIT_WITH_CUTLASS
