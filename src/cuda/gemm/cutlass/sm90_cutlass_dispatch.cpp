// The CUTLASS configs of grouped_gemm (grouped_gemm_launchers.hpp): scheme x kernel -> the
// translation unit that instantiates it. Compiled only with the CUTLASS headers.
#include "cuda/gemm/cutlass/sm90_cutlass_configs.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "moekit/core/error.hpp"

#if MOEKIT_WITH_CUTLASS
namespace moekit::gemm::sm90::cutlass_grouped {
namespace {

struct Entry {
  GemmScheme scheme;
  GemmKernel kernel;
  std::size_t (*workspace_bytes)(int num_experts);
  void (*run)(const GroupedGemmArgs& args);
};

#define MOEKIT_CUTLASS_ENTRY(name, scheme, kernel) \
  Entry{GemmScheme::scheme, GemmKernel::kernel, name##_workspace_bytes, name##_run},
constexpr Entry kEntries[] = {MOEKIT_CUTLASS_CONFIG_LIST(MOEKIT_CUTLASS_ENTRY)};
#undef MOEKIT_CUTLASS_ENTRY

const Entry& entry(GemmScheme scheme, GemmKernel kernel) {
  for (const Entry& e : kEntries)
    if (e.scheme == scheme && e.kernel == kernel) return e;
  MOEKIT_FAIL("cutlass grouped GEMM: no CUTLASS config for ", gemm_scheme_name(scheme), " ",
              gemm_kernel_name(kernel));
}

}  // namespace

std::size_t workspace_bytes(GemmScheme scheme, GemmKernel kernel, int num_experts) {
  return entry(scheme, kernel).workspace_bytes(num_experts);
}

void run(const GroupedGemmArgs& args, GemmKernel kernel) { entry(args.scheme, kernel).run(args); }

}  // namespace moekit::gemm::sm90::cutlass_grouped
#endif  // MOEKIT_WITH_CUTLASS
