// moekit::gemm::grouped_gemm: argument validation and dispatch to the CUTLASS launchers
// (sm90_{bf16,fp8_block}_grouped_gemm_*_cutlass.cu, one TU per kernel config). Without the
// CUTLASS headers the kernels are not compiled and every entry point says so.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

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
    case GroupedGemmConfig::kSwapWide: return "swap_wide";
    case GroupedGemmConfig::kDecode: return "decode";
    case GroupedGemmConfig::kWgmma:
      return "wgmma";
  }
  return "?";
}

GroupedGemmConfig parse_grouped_gemm_config(const std::string& name, const std::string& what) {
  constexpr GroupedGemmConfig all[] = {GroupedGemmConfig::kAuto,   GroupedGemmConfig::kWide,
                                       GroupedGemmConfig::kNarrow, GroupedGemmConfig::kSwapWide,
                                       GroupedGemmConfig::kDecode, GroupedGemmConfig::kWgmma};
  std::string valid;
  for (auto c : all) {
    if (grouped_gemm_config_name(c) == name) return c;
    valid += (valid.empty() ? "" : ", ") + grouped_gemm_config_name(c);
  }
  throw_arg_error("grouped_gemm", what, "one of " + valid, name);
}

bool grouped_gemm_config_built(GroupedGemmType t, GroupedGemmConfig c) {
  switch (c) {
    case GroupedGemmConfig::kWide:
    case GroupedGemmConfig::kNarrow:
    case GroupedGemmConfig::kSwapWide:
    case GroupedGemmConfig::kWgmma:
      return true;  // for both types
    case GroupedGemmConfig::kDecode: return t == GroupedGemmType::kBF16;
    case GroupedGemmConfig::kAuto: return false;
  }
  return false;  // a value outside the enum
}

// From H200 layer measurements with each config forced (docs/kernels/bf16_fp8.md "wgmma config"
// and "Run 3"; bench/results/layer_20261202b_wgmma_vs_auto.txt): where the hand-written wgmma
// kernel was measured faster it is the pick; elsewhere the earlier rule (runs 2 and 3) stands.
GroupedGemmConfig auto_grouped_gemm_config(GroupedGemmType t, int num_experts,
                                           std::int64_t max_rows) {
  const std::int64_t holders =
      std::max<std::int64_t>(1, std::min<std::int64_t>(num_experts, max_rows));
  const std::int64_t r = max_rows / holders;
  // wgmma (H200, 2026-12-02, two interleaved runs per config, us, the previous pick vs wgmma):
  //   bf16: faster from 1 to 512 tokens on five presets (e.g. gpt-oss-120b 8 tokens decode 384 vs
  //     331, mixtral-8x7b 512 swap_wide 857 vs 782, deepseek-v3 512 narrow 5459 vs 5295) and at
  //     4096 tokens with 128 rows per expert (gpt-oss-120b wide 2381 vs 1988; deepseek-v3 a tie,
  //     7100 vs 7168); slower at 4096 tokens with 85 rows per expert (kimi-k2 wide 9939 vs 10368:
  //     a 128-row tile for 85 +- 9 rows) and from 256 (qwen3-235b-a22b wide 2409 vs 2630,
  //     mixtral-8x7b 1024 rows a tie); the decode config stayed ahead with E <= 16 at <= 8 rows
  //     (mixtral 1 token 231 vs 243 us; with E <= 128 since 2026-12-04, below);
  //   fp8: faster below 32 rows per expert (1..64 tokens on four presets, +3..+23%, e.g. qwen3 1
  //     token 84 vs 69, mixtral 8 tokens 375 vs 315; deepseek-v3 512 2834 vs 2745), slower from 32
  //     (qwen3 512 680 vs 721, mixtral 512 swap_wide 553 vs 592, every 4096 cell: the promotion
  //     after each 128-deep chain waits for its MMAs). With the token classes (2026-12-04: a
  //     unit's wgmma N is the narrowest of 32 .. 160 that holds its rows) also faster at 32 rows
  //     per expert (qwen3-235b-a22b 512 tokens, three runs: 667 / 667 / 668 vs narrow 729 / 729;
  //     the 128-token tile ran 33..64-row units on all 128 columns before), hence below 64; a tie
  //     at 128 rows (mixtral 512 562..614 vs swap_wide 572..589, deepseek-v3 4096 5038..5071 vs
  //     wide 4846..5264) and slower from 256 (qwen3 4096 2568..2644 vs wide 1960..1986), where
  //     the CUTLASS picks stay (bench/results/layer_20261204_wgmma_token_classes_ab.json).
  // bf16 decode at <= 8 rows with E <= 128 (2026-12-04, two interleaved runs, wgmma vs decode,
  // us: gpt-oss-120b 1 token 79.7 / 79.4 vs 73.9 / 73.7, 2 tokens 127.3 / 126.5 vs 122.7 / 122.9;
  // qwen3-235b-a22b 1 token 99.1 / 98.3 vs 96.5 / 95.9; deepseek-v3 (E 256) 1 token a tie, 193.2 /
  // 192.3 vs 193.1 / 192.2; at 16 rows wgmma: qwen3 2 tokens 166 vs 174..177, gpt-oss 4 tokens 196
  // vs 198..199, mixtral 8 tokens 592..629 vs 636..645; bench/results/
  // layer_20261204b_bf16_decode_vs_wgmma_ab.json). Until then only E <= 16 (mixtral).
  if (t == GroupedGemmType::kBF16) {
    if (num_experts <= 128 && max_rows <= 8) return GroupedGemmConfig::kDecode;
    if (r < 64 || (r >= 96 && r < 256)) return GroupedGemmConfig::kWgmma;
    return GroupedGemmConfig::kWide;
  }
  //   With many experts (E >= 256) also from 64 to 255 rows per expert (2026-12-06, H100, the
  //   16-byte scale-product loads, three interleaved runs, wgmma vs the previous pick, us:
  //   deepseek-v3 2048 tokens, 64 rows, 4355..4381 vs narrow 4505..4524; 4096 tokens, 128 rows,
  //   5207..5219 vs wide 5500..5518; kimi-k2 4096 tokens, 85 rows, 6970..7005 vs narrow
  //   7010..7035; bench/results/layer_20261206_fp8_wgmma_many_experts_h100.json). The H200 tie at
  //   deepseek-v3 4096 above predates those loads. Fewer experts at 128 rows (mixtral 512 tokens:
  //   a tie) and 256 rows (qwen3 4096: wgmma 2432..2442 vs wide 2052) keep the CUTLASS picks.
  if (r < 64 || (num_experts >= 256 && r < 256)) return GroupedGemmConfig::kWgmma;
  // fp8, CUTLASS (runs 2 and 3): swap-AB pays with few experts of ~128 rows (mixtral-8x7b at 512
  // tokens: 578 vs 670 us narrow) and loses with many experts at the same rows per expert
  // (deepseek-v3 4096, kimi-k2, qwen3-235b), so it is limited to E <= 16 (measured at E = 8;
  // 96..255 brackets the measured 128 between the measured 16 and 1024). Wide from 128 rows per
  // expert: deepseek-v3 4096 (128 rows: wide 5251 vs narrow 5500 us in run 3, 5341 vs 5389 in
  // run 2), qwen3-235b-a22b / qwen3-30b-a3b 4096 (256 rows: 2023 vs 2133 and 761 vs 776 us),
  // mixtral-8x7b 2048 (512 rows: 1808 vs 1936 us;
  // bench/results/layer_20261201_fp8_wide_vs_narrow.json), from 1024 (run 2); narrow below.
  if (num_experts <= 16 && r >= 96 && r < 256) return GroupedGemmConfig::kSwapWide;
  return r >= 128 ? GroupedGemmConfig::kWide : GroupedGemmConfig::kNarrow;
}

GroupedGemmConfig resolve_grouped_gemm_config(GroupedGemmType t, GroupedGemmConfig c,
                                              int num_experts, std::int64_t max_rows) {
  return c != GroupedGemmConfig::kAuto ? c : auto_grouped_gemm_config(t, num_experts, max_rows);
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

#if MOEKIT_WITH_CUTLASS
namespace {

struct Launcher {
  std::size_t (*workspace_bytes)(int num_experts);
  void (*run)(const GroupedGemmArgs& args);
};

// The kernel of (type, config); {nullptr, nullptr} when that pair is not built.
Launcher launcher(GroupedGemmType t, GroupedGemmConfig c) {
  using C = GroupedGemmConfig;
  if (t == GroupedGemmType::kBF16) {
    switch (c) {
      case C::kWide: return {detail::bf16_wide_grouped_gemm_workspace_bytes, detail::bf16_wide_grouped_gemm_run};
      case C::kNarrow: return {detail::bf16_narrow_grouped_gemm_workspace_bytes, detail::bf16_narrow_grouped_gemm_run};
      case C::kSwapWide: return {detail::bf16_swap_wide_grouped_gemm_workspace_bytes, detail::bf16_swap_wide_grouped_gemm_run};
      case C::kDecode: return {detail::bf16_decode_grouped_gemm_workspace_bytes, detail::bf16_decode_grouped_gemm_run};
      case C::kWgmma:
        return {detail::bf16_wgmma_grouped_gemm_workspace_bytes,
                detail::bf16_wgmma_grouped_gemm_run};
      case C::kAuto: break;
    }
  } else {
    switch (c) {
      case C::kWide: return {detail::fp8_block_wide_grouped_gemm_workspace_bytes, detail::fp8_block_wide_grouped_gemm_run};
      case C::kNarrow: return {detail::fp8_block_narrow_grouped_gemm_workspace_bytes, detail::fp8_block_narrow_grouped_gemm_run};
      case C::kSwapWide: return {detail::fp8_block_swap_wide_grouped_gemm_workspace_bytes, detail::fp8_block_swap_wide_grouped_gemm_run};
      case C::kWgmma:
        return {detail::fp8_block_wgmma_grouped_gemm_workspace_bytes,
                detail::fp8_block_wgmma_grouped_gemm_run};
      case C::kDecode:
      case C::kAuto: break;
    }
  }
  return {nullptr, nullptr};
}

}  // namespace
#endif

std::size_t grouped_gemm_workspace_bytes(GroupedGemmType t, int num_experts) {
  MOEKIT_CHECK_ARG(num_experts >= 1, "num_experts", ">= 1", num_experts);
  require_available(t);
  std::size_t bytes = 0;
#if MOEKIT_WITH_CUTLASS
  for (auto c : {GroupedGemmConfig::kWide, GroupedGemmConfig::kNarrow, GroupedGemmConfig::kSwapWide,
                 GroupedGemmConfig::kDecode, GroupedGemmConfig::kWgmma}) {
    const Launcher l = launcher(t, c);
    if (l.workspace_bytes != nullptr) bytes = std::max(bytes, l.workspace_bytes(num_experts));
  }
#endif
  return bytes;
}

namespace detail {

void check_gated_activation(const GatedActivationArgs& act, const char* where, const char* name) {
  const std::string n(name);
  if (act.kind != Activation::kSiluAndMul && act.kind != Activation::kSwigluOai)
    throw_arg_error(where, n + ".kind", "silu or swiglu_oai", activation_name(act.kind));
  if (act.kind != Activation::kSwigluOai) return;
  if (!std::isfinite(act.swiglu_alpha))
    throw_arg_error(where, n + ".swiglu_alpha", "finite", act.swiglu_alpha);
  if (!(std::isfinite(act.swiglu_limit) && act.swiglu_limit > 0.0f))
    throw_arg_error(where, n + ".swiglu_limit", "finite and > 0", act.swiglu_limit);
}

}  // namespace detail

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
  if (a.gated != nullptr) {
    MOEKIT_CHECK_ARG(a.n % 16 == 0, "n", "a multiple of 16 (gated: gate | up halves of I % 8)",
                     a.n);
    detail::check_gated_activation(*a.gated, "grouped_gemm", "gated");
  }
  const std::int64_t out_cols = a.gated != nullptr ? a.n / 2 : a.n;
  if (a.lda == 0) a.lda = a.k;
  if (a.ldd == 0) a.ldd = out_cols;
  MOEKIT_CHECK_ARG(a.lda >= a.k && a.lda % lda_align == 0, "lda",
                   ::moekit::detail::concat(">= k and a multiple of ", lda_align), a.lda);
  MOEKIT_CHECK_ARG(a.ldd >= out_cols && a.ldd % 8 == 0, "ldd",
                   a.gated != nullptr ? ">= n / 2 (gated) and a multiple of 8"
                                      : ">= n and a multiple of 8",
                   a.ldd);
  MOEKIT_CHECK_ARG(a.expert_offsets != nullptr || a.routing.topk_ids != nullptr, "expert_offsets",
                   "a device pointer (null only with routing.topk_ids)", "null");
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
  const GroupedGemmConfig config =
      resolve_grouped_gemm_config(t, a.config, a.num_experts, a.max_rows);
  MOEKIT_CHECK_ARG(grouped_gemm_config_built(t, config), "config",
                   ::moekit::detail::concat("a config with a ", grouped_gemm_type_name(t),
                                            " kernel"),
                   grouped_gemm_config_name(config));
  if (config != GroupedGemmConfig::kDecode) {
    MOEKIT_CHECK_ARG(a.row_index == nullptr || config == GroupedGemmConfig::kWgmma, "row_index",
                     "null unless the config is decode or wgmma", grouped_gemm_config_name(config));
    const bool gated_ok = config == GroupedGemmConfig::kWgmma && !fp8;
    MOEKIT_CHECK_ARG(a.gated == nullptr || gated_ok, "gated",
                     "null unless the config is decode (or wgmma for bf16)",
                     grouped_gemm_type_name(t) + " " + grouped_gemm_config_name(config));
    MOEKIT_CHECK_ARG(a.routing.topk_ids == nullptr, "routing.topk_ids",
                     "null unless the config is decode", grouped_gemm_config_name(config));
  }
  if (a.max_rows == 0) return;
#if MOEKIT_WITH_CUTLASS
  launcher(t, config).run(a);
#endif
}

}  // namespace moekit::gemm
