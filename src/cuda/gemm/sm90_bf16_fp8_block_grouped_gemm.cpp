// moekit::gemm::grouped_gemm: argument validation and dispatch to the CUTLASS launchers
// (sm90_bf16_grouped_gemm_cutlass.cu, sm90_fp8_block_grouped_gemm_cutlass.cu). Without the CUTLASS
// headers the kernels are not compiled and every entry point says so.
#include <algorithm>
#include <cstdint>

#include "cuda/gemm/sm90_bf16_fp8_block_grouped_gemm.hpp"
#include "moekit/core/error.hpp"
#include "moekit/gemm/grouped_gemm.hpp"

namespace moekit::gemm {

std::string grouped_gemm_type_name(GroupedGemmType t) {
  switch (t) {
    case GroupedGemmType::kBF16: return "bf16";
    case GroupedGemmType::kFP8Block128: return "fp8_block";
  }
  return "?";
}

std::string grouped_gemm_config_name(GroupedGemmConfig c) {
  switch (c) {
    case GroupedGemmConfig::kAuto: return "auto";
    case GroupedGemmConfig::kWide: return "wide";
    case GroupedGemmConfig::kNarrow: return "narrow";
  }
  return "?";
}

GroupedGemmConfig resolve_grouped_gemm_config(GroupedGemmType t, GroupedGemmConfig c,
                                              int num_experts, std::int64_t max_rows) {
  if (c != GroupedGemmConfig::kAuto) return c;
  const std::int64_t holders = std::max<std::int64_t>(1, std::min<std::int64_t>(num_experts, max_rows));
  return max_rows / holders >= wide_min_rows_per_expert(t) ? GroupedGemmConfig::kWide
                                                     : GroupedGemmConfig::kNarrow;
}

bool grouped_gemm_available(GroupedGemmType) {
#if MOEKIT_WITH_CUTLASS
  return true;
#else
  return false;
#endif
}

namespace {

void require_available(GroupedGemmType t) {
  MOEKIT_CHECK(grouped_gemm_available(t), "grouped_gemm(", grouped_gemm_type_name(t),
               "): moekit was built without the CUTLASS headers (run scripts/install_deps.sh and "
               "reconfigure with CUDA)");
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

std::size_t grouped_gemm_workspace_bytes(GroupedGemmType t, int num_experts) {
  MOEKIT_CHECK_ARG(num_experts >= 1, "num_experts", ">= 1", num_experts);
  require_available(t);
#if MOEKIT_WITH_CUTLASS
  return t == GroupedGemmType::kBF16
             ? std::max(detail::bf16_wide_grouped_gemm_workspace_bytes(num_experts),
                        detail::bf16_narrow_grouped_gemm_workspace_bytes(num_experts))
             : std::max(detail::fp8_block_wide_grouped_gemm_workspace_bytes(num_experts),
                        detail::fp8_block_narrow_grouped_gemm_workspace_bytes(num_experts));
#else
  return 0;
#endif
}

void grouped_gemm(GroupedGemmType t, const GroupedGemmArgs& args_in) {
  GroupedGemmArgs a = args_in;
  const bool fp8 = t == GroupedGemmType::kFP8Block128;
  const std::int64_t k_align = fp8 ? 128 : 8;
  const std::int64_t lda_align = fp8 ? 16 : 8;  // 16-byte rows for TMA
  MOEKIT_CHECK_ARG(a.num_experts >= 1, "num_experts", ">= 1", a.num_experts);
  MOEKIT_CHECK_ARG(a.n > 0 && a.n % 8 == 0 && a.n <= INT32_MAX, "n",
                   "a positive multiple of 8 below 2^31", a.n);
  MOEKIT_CHECK_ARG(a.k > 0 && a.k % k_align == 0 && a.k <= INT32_MAX, "k",
                   fp8 ? "a positive multiple of 128 (the scale block)" : "a positive multiple of 8",
                   a.k);
  MOEKIT_CHECK_ARG(a.max_rows >= 0 && a.max_rows <= INT32_MAX, "max_rows", "in [0, 2^31)",
                   a.max_rows);
  if (a.lda == 0) a.lda = a.k;
  if (a.ldd == 0) a.ldd = a.n;
  MOEKIT_CHECK_ARG(a.lda >= a.k && a.lda % lda_align == 0, "lda",
                   ::moekit::detail::concat(">= k and a multiple of ", lda_align), a.lda);
  MOEKIT_CHECK_ARG(a.ldd >= a.n && a.ldd % 8 == 0, "ldd", ">= n and a multiple of 8", a.ldd);
  MOEKIT_CHECK_ARG(a.expert_offsets != nullptr, "expert_offsets", "a device pointer", "null");
  MOEKIT_CHECK_ARG(a.a != nullptr && aligned16(a.a), "a", "a 16-byte aligned device pointer", a.a);
  MOEKIT_CHECK_ARG(a.b != nullptr && aligned16(a.b), "b", "a 16-byte aligned device pointer", a.b);
  MOEKIT_CHECK_ARG(a.d != nullptr && aligned16(a.d), "d", "a 16-byte aligned device pointer", a.d);
  if (fp8) {
    MOEKIT_CHECK_ARG(a.a_scales != nullptr, "a_scales", "a device pointer ([R, K/128] f32)", "null");
    MOEKIT_CHECK_ARG(a.b_scales != nullptr, "b_scales",
                     "a device pointer ([E, ceil(N/128), K/128] f32)", "null");
  }
  const std::size_t need = grouped_gemm_workspace_bytes(t, a.num_experts);
  MOEKIT_CHECK_ARG(a.workspace != nullptr && aligned16(a.workspace), "workspace",
                   "a 16-byte aligned device pointer", a.workspace);
  MOEKIT_CHECK_ARG(a.workspace_bytes >= need, "workspace_bytes", ::moekit::detail::concat(">= ", need),
                   a.workspace_bytes);
  if (a.max_rows == 0) return;
#if MOEKIT_WITH_CUTLASS
  const bool wide =
      resolve_grouped_gemm_config(t, a.config, a.num_experts, a.max_rows) == GroupedGemmConfig::kWide;
  if (fp8) {
    wide ? detail::fp8_block_wide_grouped_gemm_run(a) : detail::fp8_block_narrow_grouped_gemm_run(a);
  } else {
    wide ? detail::bf16_wide_grouped_gemm_run(a) : detail::bf16_narrow_grouped_gemm_run(a);
  }
#endif
}

}  // namespace moekit::gemm
