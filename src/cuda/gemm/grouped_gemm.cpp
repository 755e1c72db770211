// gemm::grouped_gemm (grouped_gemm.hpp): names, the argument and config checks shared by every
// scheme, and the dispatch to the kernel families (grouped_gemm_launchers.hpp).
#include "cuda/gemm/grouped_gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "moekit/core/error.hpp"

namespace moekit::gemm {

std::string gemm_scheme_name(GemmScheme s) {
  switch (s) {
    case GemmScheme::kBF16: return "bf16";
    case GemmScheme::kFP8Block: return "fp8_block";
    case GemmScheme::kW4A16NVFP4: return "w4a16_nvfp4";
    case GemmScheme::kW4A16MXFP4: return "w4a16_mxfp4";
    case GemmScheme::kW4A8MXFP4: return "w4a8_mxfp4";
  }
  return "?";
}

bool is_w4a16(GemmScheme s) {
  return s == GemmScheme::kW4A16NVFP4 || s == GemmScheme::kW4A16MXFP4;
}

std::string gemm_kernel_name(GemmKernel k) {
  switch (k) {
    case GemmKernel::kCutlassWide: return "cutlass_wide";
    case GemmKernel::kCutlassNarrow: return "cutlass_narrow";
    case GemmKernel::kCutlassSwapWide: return "cutlass_swap_wide";
    case GemmKernel::kDecode: return "decode";
    case GemmKernel::kWgmma: return "wgmma";
    case GemmKernel::kW4Mid32: return "w4_mid32";
    case GemmKernel::kW4Large: return "w4_large";
  }
  return "?";
}

bool gemm_kernel_runs(GemmKernel k, GemmScheme s) {
  const bool bf16_fp8 = s == GemmScheme::kBF16 || s == GemmScheme::kFP8Block;
  switch (k) {
    case GemmKernel::kCutlassWide:
    case GemmKernel::kCutlassNarrow:
    case GemmKernel::kCutlassSwapWide: return bf16_fp8;
    case GemmKernel::kDecode: return s == GemmScheme::kBF16 || is_w4a16(s);
    case GemmKernel::kWgmma: return true;
    case GemmKernel::kW4Mid32:
    case GemmKernel::kW4Large: return is_w4a16(s);
  }
  return false;
}

std::string wgmma_tile_name(WgmmaTile t) {
  switch (t) {
    case WgmmaTile::k128n: return "128n";
    case WgmmaTile::k144n: return "144n";
    case WgmmaTile::k160: return "160";
    case WgmmaTile::k160r256: return "160r256";
  }
  return "?";
}

int wgmma_k_source(int j) {
  MOEKIT_CHECK_ARG(j >= 0 && j < 64, "j", "a column of a 64-wide chunk, in [0, 64)", j);
  return 2 * (8 * (j / 2 % 4) + j / 8) + j % 2;
}

std::string GemmConfig::str() const {
  std::string s = gemm_kernel_name(kernel);
  if (kernel == GemmKernel::kWgmma) {
    s += " tile " + (tokens > 0 ? std::to_string(tokens) : wgmma_tile_name(wgmma_tile));
    if (ctas_per_sm > 1) s += " x" + std::to_string(ctas_per_sm);
  }
  if (kernel == GemmKernel::kDecode) {
    s += decode16 ? " 16" : " 8";
    if (decode_wide) s += decode_short_k ? " wide short_k" : " wide";
  }
  if (k_split > 0) s += " k_split " + std::to_string(k_split);
  if (max_ctas > 0) s += " max_ctas " + std::to_string(max_ctas);
  return s;
}

bool grouped_gemm_available(GemmScheme scheme, GemmKernel kernel) {
  if (!gemm_kernel_runs(kernel, scheme)) return false;
  const bool cutlass = kernel == GemmKernel::kCutlassWide || kernel == GemmKernel::kCutlassNarrow ||
                       kernel == GemmKernel::kCutlassSwapWide;
  return !cutlass || MOEKIT_WITH_CUTLASS;
}

std::size_t grouped_gemm_workspace_bytes(GemmScheme scheme, int num_experts) {
  MOEKIT_CHECK_ARG(num_experts >= 1, "num_experts", ">= 1", num_experts);
  std::size_t bytes = 0;
#if MOEKIT_WITH_CUTLASS
  if (scheme == GemmScheme::kBF16 || scheme == GemmScheme::kFP8Block)
    for (GemmKernel k :
         {GemmKernel::kCutlassWide, GemmKernel::kCutlassNarrow, GemmKernel::kCutlassSwapWide})
      bytes = std::max(bytes, sm90::cutlass_grouped::workspace_bytes(scheme, k, num_experts));
#endif
  return bytes;  // the other kernels need none
}

namespace {

bool aligned(const void* p, std::uintptr_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// The checks of the arguments and the config (each error names the field).
void check(const GroupedGemmArgs& a, const GemmConfig& c) {
  const GemmScheme s = a.scheme;
  const bool fp8 = s == GemmScheme::kFP8Block, w4a8 = s == GemmScheme::kW4A8MXFP4;
  const bool w4 = is_w4a16(s) || w4a8, bf16_fp8 = !w4;
  const std::string where = "grouped_gemm(" + gemm_scheme_name(s) + ", " + c.str() + ")";
  auto arg = [&](bool ok, const char* name, const std::string& expected, const auto& actual) {
    if (!ok) throw_arg_error(where.c_str(), name, expected, actual);
  };
  arg(gemm_kernel_runs(c.kernel, s), "config.kernel",
      "a kernel that runs " + gemm_scheme_name(s), gemm_kernel_name(c.kernel));
  arg(grouped_gemm_available(s, c.kernel), "config.kernel",
      "a kernel compiled into this build (the CUTLASS kernels need the CUTLASS headers: run "
      "scripts/install_deps.sh and reconfigure)",
      gemm_kernel_name(c.kernel));
  const bool decode = c.kernel == GemmKernel::kDecode, wgmma = c.kernel == GemmKernel::kWgmma;
  arg(c.k_split >= 0 && c.k_split <= 8 && (c.k_split <= 1 || decode), "config.k_split",
      "in [0, 8] (> 1 only for the decode kernel)", c.k_split);
  arg(c.max_ctas >= 0, "config.max_ctas", ">= 0", c.max_ctas);
  arg(c.decode_tma_ctas >= 0 && c.decode_tma_ctas <= 8, "config.decode_tma_ctas", "in [0, 8]",
      c.decode_tma_ctas);
  arg(a.num_experts >= 1, "num_experts", ">= 1", a.num_experts);
  arg(a.epilogue.kind <= EpilogueKind::kSwigluOai, "epilogue.kind",
      "none, silu_and_mul or swiglu_oai", static_cast<int>(a.epilogue.kind));
  arg(a.rows >= 0 && a.rows < (std::int64_t{1} << 31), "rows", "in [0, 2^31)", a.rows);
  const std::int64_t n_align = w4 || a.epilogue.gated() ? 16 : 8;
  arg(a.n > 0 && a.n % n_align == 0 && a.n < (std::int64_t{1} << 30), "n",
      ::moekit::detail::concat("a positive multiple of ", n_align, " below 2^30",
                               a.epilogue.gated() ? " (gated: gate | up halves)" : ""),
      a.n);
  const std::int64_t k_align = fp8 ? 128 : w4 ? 64 : 8;
  arg(a.k > 0 && a.k % k_align == 0 && a.k < (std::int64_t{1} << 30), "k",
      ::moekit::detail::concat("a positive multiple of ", k_align,
                               fp8 ? " (the scale block)" : "", " below 2^30"),
      a.k);
  const std::int64_t lda = a.lda == 0 ? a.k : a.lda;
  const std::int64_t lda_align = fp8 || w4a8 ? 16 : 8;  // 16-byte rows for TMA / vector loads
  arg(lda >= a.k && lda % lda_align == 0, "lda",
      ::moekit::detail::concat(">= k and a multiple of ", lda_align), lda);
  const std::int64_t out_width = a.epilogue.gated() ? a.n / 2 : a.n;
  const std::int64_t ldo = a.ldo == 0 ? out_width : a.ldo;
  arg(ldo >= out_width && (w4 || ldo % 8 == 0), "ldo",
      ::moekit::detail::concat(">= the output width ", out_width, bf16_fp8 ? ", a multiple of 8" : ""),
      ldo);
  if (a.epilogue.kind == EpilogueKind::kSwigluOai) {
    arg(std::isfinite(a.epilogue.swiglu_alpha), "epilogue.swiglu_alpha", "finite",
        a.epilogue.swiglu_alpha);
    arg(std::isfinite(a.epilogue.swiglu_limit) && a.epilogue.swiglu_limit > 0.0f,
        "epilogue.swiglu_limit", "finite and > 0", a.epilogue.swiglu_limit);
  }
  const bool routed = a.routing.topk_ids != nullptr;
  arg(a.expert_offsets != nullptr || routed || (w4 && a.num_experts == 1), "expert_offsets",
      "a device pointer (null only with routing.topk_ids, or for a dense 4-bit GEMM, E == 1)",
      "null");
  arg(a.a != nullptr && aligned(a.a, 16), "a", "a 16-byte aligned device pointer", a.a);
  arg(a.w != nullptr && aligned(a.w, 16), "w", "a 16-byte aligned device pointer", a.w);
  arg(a.out != nullptr && (w4 || aligned(a.out, 16)), "out",
      w4 ? "a device pointer" : "a 16-byte aligned device pointer", a.out);
  arg(!fp8 || a.a_scales != nullptr, "a_scales", "a device pointer ([R, K/128] f32)", "null");
  arg(!w4a8 || a.a_scales != nullptr, "a_scales", "a device pointer ([R] f32)", "null");
  arg(bf16_fp8 && !fp8 ? a.w_scales == nullptr : a.w_scales != nullptr, "w_scales",
      s == GemmScheme::kBF16 ? "null (bf16)" : "a device pointer", a.w_scales);
  const std::uintptr_t scale_align = w4a8 || (is_w4a16(s) && c.kernel == GemmKernel::kWgmma) ? 16
                                     : is_w4a16(s)                                          ? 2
                                                                                             : 4;
  arg(a.w_scales == nullptr || aligned(a.w_scales, scale_align), "w_scales",
      ::moekit::detail::concat(scale_align, "-byte aligned"), a.w_scales);
  arg(s == GemmScheme::kW4A16NVFP4 || a.w_expert_scale == nullptr, "w_expert_scale",
      "null (NVFP4 W4A16 only)", a.w_expert_scale);
  arg(!w4a8 || a.w_row_scale != nullptr, "w_row_scale", "a device pointer (W4A8)", "null");
  arg(w4a8 || a.w_row_scale == nullptr, "w_row_scale", "null (W4A8 only)", a.w_row_scale);
  arg(w4 || a.epilogue.row_scale == nullptr, "epilogue.row_scale", "null (4-bit schemes only)",
      a.epilogue.row_scale);
  // What each kernel fuses.
  if (bf16_fp8) {
    arg(a.epilogue.bias == nullptr || a.epilogue.gated(), "epilogue.bias",
        "null unless gated (bf16 / fp8: GEMM2's bias belongs to the weighted reduce)",
        a.epilogue.bias);
    arg(!a.epilogue.gated() || decode || (wgmma && !fp8), "epilogue.kind",
        "none unless the kernel is decode (or wgmma for bf16)", "gated");
    arg(a.row_index == nullptr || decode || wgmma, "row_index",
        "null unless the kernel is decode or wgmma", a.row_index);
  }
  arg(!w4a8 || a.row_index == nullptr, "row_index",
      "null (W4A8 reads A's rows in order through TMA: gather them first)", a.row_index);
  arg(!is_w4a16(s) || !wgmma || a.row_index == nullptr, "row_index",
      "null for the W4A16 wgmma kernel (gather the rows in the wgmma K order first)",
      a.row_index);
  arg(!routed || (decode && !c.decode16), "routing.topk_ids",
      "null unless the kernel is decode with 8 tokens per unit", a.routing.topk_ids);
  arg(c.out_order == KOrder::kNatural || (is_w4a16(s) && wgmma && out_width % 64 == 0),
      "config.out_order",
      "natural unless the kernel is the W4A16 wgmma and the output width a multiple of 64",
      "wgmma");
  if (wgmma && is_w4a16(s)) {
    arg(c.tokens == 32 || c.tokens == 128 || c.tokens == 160 || c.tokens == 256, "config.tokens",
        "32, 128, 160 or 256 (W4A16 wgmma)", c.tokens);
    arg(c.ctas_per_sm >= 1 && c.ctas_per_sm <= 3 && (c.tokens == 32 || c.ctas_per_sm == 1),
        "config.ctas_per_sm", "1, 2 or 3 (above 1 only with 32 tokens)", c.ctas_per_sm);
  } else if (wgmma && w4a8) {
    arg(c.tokens == 128 || c.tokens == 160, "config.tokens", "128 or 160 (W4A8)", c.tokens);
  } else {
    arg(c.tokens == 0, "config.tokens", "0 (only the 4-bit wgmma kernels have token tiles)",
        c.tokens);
  }
  arg(!(wgmma && !fp8 && s != GemmScheme::kBF16) || c.wgmma_tile == WgmmaTile::k160, "config.wgmma_tile",
      "the default (bf16 / fp8 wgmma only)", wgmma_tile_name(c.wgmma_tile));
  arg(!(wgmma && fp8) || c.wgmma_tile != WgmmaTile::k160r256, "config.wgmma_tile",
      "128n, 144n or 160 (fp8)", wgmma_tile_name(c.wgmma_tile));
  if (bf16_fp8) {
    const std::size_t need = grouped_gemm_workspace_bytes(s, a.num_experts);
    arg(need == 0 || (a.workspace != nullptr && aligned(a.workspace, 16)), "workspace",
        "a 16-byte aligned device pointer", a.workspace);
    arg(a.workspace_bytes >= need, "workspace_bytes", ::moekit::detail::concat(">= ", need),
        a.workspace_bytes);
  }
}

}  // namespace

void grouped_gemm(const GroupedGemmArgs& args, const GemmConfig& config) {
  check(args, config);
  if (args.rows == 0) return;
  GroupedGemmArgs a = args;
  if (a.lda == 0) a.lda = a.k;
  if (a.ldo == 0) a.ldo = a.epilogue.gated() ? a.n / 2 : a.n;
  switch (config.kernel) {
    case GemmKernel::kCutlassWide:
    case GemmKernel::kCutlassNarrow:
    case GemmKernel::kCutlassSwapWide:
#if MOEKIT_WITH_CUTLASS
      return sm90::cutlass_grouped::run(a, config.kernel);
#else
      break;
#endif
    case GemmKernel::kDecode:
      if (a.scheme == GemmScheme::kBF16) return sm90::decode::run_bf16(a, config);
      return sm90::w4a16::run(a, config);
    case GemmKernel::kWgmma:
      if (a.scheme == GemmScheme::kBF16) return sm90::wgmma::run_bf16(a, config);
      if (a.scheme == GemmScheme::kFP8Block) return sm90::wgmma::run_fp8_block(a, config);
      if (a.scheme == GemmScheme::kW4A8MXFP4) return sm90::w4a8::run(a, config);
      return sm90::w4a16::run_wgmma(a, config);
    case GemmKernel::kW4Mid32:
    case GemmKernel::kW4Large:
      return sm90::w4a16::run(a, config);
  }
  MOEKIT_FAIL("grouped_gemm: no kernel for ", gemm_scheme_name(args.scheme), " ", config.str());
}

}  // namespace moekit::gemm
