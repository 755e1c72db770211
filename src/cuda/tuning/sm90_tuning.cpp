// The SM90 selection rules (sm90_tuning.hpp). Each rule: what it picks, why, and the measurement
// behind it. Measurements are layer times (moekit bench) unless named otherwise; "H200" / "H100"
// name the card, files are under bench/results/.
#include "cuda/tuning/sm90_tuning.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/env_switch.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "cuda/runtime/current_device.hpp"
#include "moekit/core/error.hpp"

namespace moekit::tuning::sm90 {

using gemm::GemmConfig;
using gemm::GemmKernel;
using gemm::GemmScheme;
using gemm::WgmmaTile;

namespace {

bool is_fp8(GemmScheme s) { return s == GemmScheme::kFP8Block; }

// ---- Overrides (docs/tuning.md): forced choices for measurements. The bits never depend on them.

// MOEKIT_GEMM_KERNEL=<kernel> or <scheme>:<kernel>[,<scheme>:<kernel>...] (scheme: bf16,
// fp8_block, w4a16, w4a8): the kernel of every grouped GEMM of that scheme.
std::optional<GemmKernel> forced_kernel(GemmScheme scheme) {
  const auto v = env::value("MOEKIT_GEMM_KERNEL");
  if (!v) return std::nullopt;
  const std::string family = is_w4a16(scheme)                   ? "w4a16"
                             : scheme == GemmScheme::kW4A8MXFP4 ? "w4a8"
                                                                : gemm::gemm_scheme_name(scheme);
  std::vector<std::string> kernels;
  for (int i = 0; i <= static_cast<int>(GemmKernel::kW4Large); ++i)
    kernels.push_back(gemm::gemm_kernel_name(static_cast<GemmKernel>(i)));
  std::string wanted;  // this scheme's item, if any
  std::size_t start = 0;
  const std::string& all = *v;
  while (start <= all.size()) {
    const std::size_t end = std::min(all.find(',', start), all.size());
    const std::string item = all.substr(start, end - start);
    const std::size_t colon = item.find(':');
    const std::string scheme_part = colon == std::string::npos ? "" : item.substr(0, colon);
    const std::string kernel_part = colon == std::string::npos ? item : item.substr(colon + 1);
    if (std::find(kernels.begin(), kernels.end(), kernel_part) == kernels.end() ||
        (colon != std::string::npos && scheme_part != "bf16" && scheme_part != "fp8_block" &&
         scheme_part != "w4a16" && scheme_part != "w4a8"))
      throw_arg_error("environment", "MOEKIT_GEMM_KERNEL",
                      "<kernel> or <scheme>:<kernel>,... with scheme bf16 | fp8_block | w4a16 | "
                      "w4a8 and kernel cutlass_wide | cutlass_narrow | cutlass_swap_wide | decode "
                      "| wgmma | w4_mid32 | w4_large",
                      all);
    if (colon == std::string::npos || scheme_part == family) wanted = kernel_part;
    start = end + 1;
  }
  if (wanted.empty()) return std::nullopt;
  const auto k = static_cast<GemmKernel>(
      std::find(kernels.begin(), kernels.end(), wanted) - kernels.begin());
  MOEKIT_CHECK_ARG(gemm::gemm_kernel_runs(k, scheme), "MOEKIT_GEMM_KERNEL",
                   "a kernel that runs " + family, wanted);
  return k;
}

// MOEKIT_GEMM_TILE=<tile>: the token tile of the kernel that runs (validated against it).
std::optional<std::string> forced_tile(const std::vector<std::string>& allowed) {
  return env::choice("MOEKIT_GEMM_TILE", allowed);
}

// ---- bf16 / fp8 block ----------------------------------------------------------------------------

// From layer measurements with each kernel forced. bf16 (H200, 2026-12-02, two interleaved runs
// per config; layer_20261202b_wgmma_vs_auto.txt): wgmma is faster from 1 to 512 tokens on five
// presets (gpt-oss-120b 8 tokens 384 -> 331 us, mixtral-8x7b 512 857 -> 782) and at 4096 tokens
// with 128 rows per expert (gpt-oss-120b 2381 -> 1988), slower at 85 rows (kimi-k2, a 128-row
// tile for 85 +- 9 rows) and from 256 rows (qwen3-235b-a22b 2409 vs 2630), where CUTLASS wide
// stays. The decode kernel wins at <= 8 rows with E <= 128 (H200, 2026-12-04: gpt-oss-120b 1
// token 79.7 -> 73.9 us, qwen3-235b-a22b 99.1 -> 96.5; deepseek-v3, E 256, a tie;
// layer_20261204b_bf16_decode_vs_wgmma_ab.json).
// fp8: wgmma below 64 rows per expert (H200, 2026-12-04, token classes: qwen3-235b-a22b 512 tokens
// 667 vs narrow 729 us; layer_20261204_wgmma_token_classes_ab.json) and with E >= 256 below 256
// rows (H100, 2026-12-06: deepseek-v3 4096 tokens 5207 vs wide 5500, 2048 4355 vs narrow 4505;
// layer_20261206_fp8_wgmma_many_experts_h100.json); CUTLASS swap-AB wide for E <= 16 at 96..255
// rows (mixtral-8x7b 512 tokens 578 vs narrow 670; layer_20261201_bf16_fp8_run3a.json), wide
// from 128 rows (deepseek-v3 4096 5251 vs narrow 5500), narrow below.
GemmKernel bf16_fp8_kernel(bool fp8, int num_experts, std::int64_t rows) {
  const std::int64_t r = rows_per_holding_expert(num_experts, rows);
  if (!fp8) {
    if (num_experts <= 128 && rows <= 8) return GemmKernel::kDecode;
    if (r < 64 || (r >= 96 && r < 256)) return GemmKernel::kWgmma;
    return GemmKernel::kCutlassWide;
  }
  if (r < 64 || (num_experts >= 256 && r < 256)) return GemmKernel::kWgmma;
  if (num_experts <= 16 && r >= 96 && r < 256) return GemmKernel::kCutlassSwapWide;
  return r >= 128 ? GemmKernel::kCutlassWide : GemmKernel::kCutlassNarrow;
}

// The wgmma tile: 160 token columns from 96 rows per expert (one tile holds deepseek-v3's 128 +-
// 3 sigma rows at 4096 tokens), for bf16 with E >= 256 on 256 weight rows per CTA (H200,
// 2026-12-02: deepseek-v3 4096 tokens 6907 vs 7125 us), else 128 with 32-wide tails.
WgmmaTile bf16_fp8_wgmma_tile(bool fp8, int num_experts, std::int64_t rows) {
  const auto forced = forced_tile(fp8 ? std::vector<std::string>{"128n", "144n", "160"}
                                      : std::vector<std::string>{"128n", "144n", "160", "160r256"});
  if (forced) {
    for (WgmmaTile t : {WgmmaTile::k128n, WgmmaTile::k144n, WgmmaTile::k160, WgmmaTile::k160r256})
      if (gemm::wgmma_tile_name(t) == *forced) return t;
  }
  const std::int64_t r = rows_per_holding_expert(num_experts, rows);
  if (r < 96) return WgmmaTile::k128n;
  return !fp8 && num_experts >= 256 ? WgmmaTile::k160r256 : WgmmaTile::k160;
}

GemmConfig bf16_fp8_config(bool fp8, GemmKernel kernel, int num_experts, std::int64_t rows,
                           bool weights_aligned16) {
  GemmConfig c;
  c.kernel = kernel;
  if (c.kernel == GemmKernel::kWgmma) c.wgmma_tile = bf16_fp8_wgmma_tile(fp8, num_experts, rows);
  if (c.kernel == GemmKernel::kDecode) {
    // 16 tokens per unit from 9 rows per expert (mixtral at 64 tokens: each weight fragment feeds
    // two token tiles).
    const auto forced = forced_tile({"8", "16"});
    c.decode16 = forced ? *forced == "16" : rows_per_holding_expert(num_experts, rows) > 8;
    // The TMA weight ring where the weights allow 16-byte boxes (H200, 2026-12-05: mixtral-8x7b 1
    // token 176.6 vs 185.3 us on the register ring, llama4-scout -8..-11% at 1..8 tokens;
    // layer_20261205_bf16_decode_tma_ring.json).
    c.decode_tma = weights_aligned16;
  }
  return c;
}

// ---- W4A16 ---------------------------------------------------------------------------------------

// The wgmma kernel from 9 rows per active expert: its 32-token tile beats mid32 (H200, 2026-12-01i,
// NVFP4: mixtral 64 tokens 334 vs 433 us, qwen3-235b-a22b 384 tokens 617 vs 714); at <= 8 the
// decode kernel streams the weights faster (deepseek-v3 64 tokens 1698 vs 1879).
constexpr std::int64_t kW4A16WgmmaMinRows = 8;

// The mma.sync kernels below that: decode (8 tokens per unit) up to 8 rows per expert, mid32 up to
// 48, large above (2026-11-29 variant sweeps, docs/kernels/w4a16.md "Tiles and kAuto"). decode16
// is never picked: every warp reads its 16 tokens' activations from L2 (4x the weight bytes);
// mid32 shares them through shared memory.
GemmKernel w4a16_kernel(int num_experts, std::int64_t rows, bool natural_order = false) {
  const std::int64_t per_expert = rows_per_active_expert(num_experts, rows);
  if (per_expert > kW4A16WgmmaMinRows && !natural_order) return GemmKernel::kWgmma;
  if (per_expert <= 8) return GemmKernel::kDecode;
  if (per_expert <= 48) return GemmKernel::kW4Mid32;
  return GemmKernel::kW4Large;
}

// The wgmma token tile: 32 up to 32 rows per expert, 128 below 96, 160 from 96 (deepseek-v3 /
// gpt-oss at 4096 tokens: 128 +- 11 rows in one tile), 256 from 384 (mixtral at 4096: 1024 rows;
// twice the MMAs per dequantized chunk) where its shared memory fits the experts' prefix (H200,
// 2026-12-01g, NVFP4: deepseek-v3 4096 tokens 9467 / 7625 / 10537 us for 128 / 160 / 256,
// mixtral 4096 6997 / - / 5907). The 32-token tile at 2 CTAs per SM with E <= 8 and <= 24 rows
// per expert, else 3 (H200, 2026-12-03: mixtral 10..24 rows 1-14% faster at 2; E 128 / 256 0-6%
// slower; layer_20261203_w4a16_wgmma32_ctas_ab.json).
void w4a16_wgmma_tile(int num_experts, std::int64_t rows, GemmConfig& c) {
  const std::int64_t per_expert = rows_per_active_expert(num_experts, rows);
  int tokens = per_expert >= 384 ? 256 : per_expert >= 96 ? 160 : per_expert <= 32 ? 32 : 128;
  c.tokens = tokens;
  c.ctas_per_sm = 1;
  if (tokens == 256 &&
      gemm::w4a16_wgmma_smem_bytes(c, num_experts) > cuda::current_device_max_smem_optin())
    tokens = 128;
  if (const auto forced = forced_tile({"32", "128", "160", "256"})) tokens = std::stoi(*forced);
  c.tokens = tokens;
  c.ctas_per_sm = tokens != 32 ? 1 : num_experts <= 8 && per_expert <= 24 ? 2 : 3;
}

// The decode kernel's variants (W4A16, 2026-11-29 v4 / v5 sweeps): 64 weight rows per unit
// ("wide": four independent dequant / MMA chains per warp, 10-25% faster) when its units fill at
// least half of the CTA slots, else 32 rows; a GEMM without epilogue and K <= 2048 on 2 K-warps at
// 8 CTAs per SM when the units fill them (2026-12-01d: deepseek-v3 / qwen3 GEMM2 1.5-4% faster at
// 8 / 64 tokens, gpt-oss K 2880 2% slower, hence the bound; layer_20261201d_decode_short_k_ab.json).
void w4a16_decode_variant(int num_experts, std::int64_t rows, std::int64_t n, std::int64_t k,
                          bool gated, GemmConfig& c) {
  const int slots_per_sm = cuda::current_device_multiprocessors();
  auto fills = [&](const gemm::DecodeShape& s, int factor) {
    return decode_units(num_experts, rows, n, s.tokens, s.rows) * factor >=
           static_cast<double>(s.min_blocks) * slots_per_sm;
  };
  GemmConfig wide = c;
  wide.decode_wide = true;
  c.decode_wide = fills(gemm::decode_shape(GemmScheme::kW4A16NVFP4, wide), 2);
  if (!c.decode16 && c.decode_wide && !gated && k / 64 <= 32) {
    GemmConfig short_k = wide;
    short_k.decode_short_k = true;
    c.decode_short_k = fills(gemm::decode_shape(GemmScheme::kW4A16NVFP4, short_k), 1);
  }
}

GemmConfig w4a16_config(GemmKernel kernel, int num_experts, std::int64_t rows, std::int64_t n,
                        std::int64_t k, bool gated) {
  GemmConfig c;
  c.kernel = kernel;
  if (c.kernel == GemmKernel::kWgmma) w4a16_wgmma_tile(num_experts, rows, c);
  if (c.kernel == GemmKernel::kDecode) {
    if (const auto forced = forced_tile({"8", "16"})) c.decode16 = *forced == "16";
    w4a16_decode_variant(num_experts, rows, n, k, gated, c);
  }
  return c;
}

// ---- W4A8 ----------------------------------------------------------------------------------------

// 160 tokens from 96 rows per expert (deepseek-v3 / gpt-oss at 4096 tokens: one token tile per
// expert), also faster with several tiles per expert (H200, 2026-12-01g: qwen3-235b-a22b 4096
// tokens 3491 vs 3299 us, mixtral 4096 5756 vs 5437); 128 below (qwen3 512: 1048 vs 1256).
GemmConfig w4a8_config(int num_experts, std::int64_t rows) {
  GemmConfig c;
  c.kernel = GemmKernel::kWgmma;
  const auto forced = forced_tile({"128", "160"});
  c.tokens = forced ? std::stoi(*forced)
                    : rows_per_active_expert(num_experts, rows) >= 96 ? 160 : 128;
  return c;
}

}  // namespace

std::int64_t rows_per_holding_expert(int num_experts, std::int64_t rows) {
  const std::int64_t holders = std::max<std::int64_t>(1, std::min<std::int64_t>(num_experts, rows));
  return rows / holders;
}

std::int64_t rows_per_active_expert(int num_experts, std::int64_t rows) {
  const std::int64_t active = std::max<std::int64_t>(1, std::min<std::int64_t>(num_experts, rows));
  return (rows + active - 1) / active;
}

// All that the decode GEMMs take: measured faster or equal at 1..8 tokens on every preset
// (docs/kernels/w4a16.md "Fused routing").
int decode_routing_max_rows() {
  return static_cast<int>(
      env::integer("MOEKIT_DECODE_ROUTING", 0, gemm::kDecodeRoutingMaxRows)
          .value_or(gemm::kDecodeRoutingMaxRows));
}

// A split pays only when the units leave at least half of the CTA slots empty (W4A16 v4 sweep:
// mixtral's M = 1 GEMM2, 256 units for 528 slots, 42 -> 30 us with 2); with more units, or splits
// that need a second round, the per-unit cluster barrier costs more than the extra warps bring.
int decode_k_split(double units, int cta_slots, std::int64_t k, int warps_k) {
  return units * 2 <= cta_slots && k / 64 >= 4 * warps_k ? 2 : 1;
}

double decode_units(int num_experts, std::int64_t rows, std::int64_t n, int tokens,
                    int rows_per_unit) {
  const double e = num_experts, m = static_cast<double>(rows);
  const double distinct = e * (1.0 - std::pow(1.0 - 1.0 / e, m));
  const double token_tiles = std::ceil(std::max(distinct - 1e-6, m / tokens));
  return token_tiles * static_cast<double>((n + rows_per_unit - 1) / rows_per_unit);
}

gemm::GemmConfig w4a16_mma_config(int num_experts, std::int64_t rows, std::int64_t n,
                                  std::int64_t k, bool gated) {
  const GemmKernel kernel = forced_kernel(GemmScheme::kW4A16NVFP4)
                                .value_or(w4a16_kernel(num_experts, rows, /*natural_order=*/true));
  return w4a16_config(kernel == GemmKernel::kWgmma ? w4a16_kernel(num_experts, rows, true) : kernel,
                      num_experts, rows, n, k, gated);
}

gemm::GemmConfig gemm_config_for(GemmScheme scheme, GemmKernel kernel, int num_experts,
                                 std::int64_t rows, std::int64_t n, std::int64_t k, bool gated,
                                 bool weights_aligned16) {
  MOEKIT_CHECK_ARG(gemm::gemm_kernel_runs(kernel, scheme), "kernel",
                   "a kernel that runs " + gemm::gemm_scheme_name(scheme),
                   gemm::gemm_kernel_name(kernel));
  switch (scheme) {
    case GemmScheme::kBF16:
    case GemmScheme::kFP8Block:
      return bf16_fp8_config(is_fp8(scheme), kernel, num_experts, rows, weights_aligned16);
    case GemmScheme::kW4A16NVFP4:
    case GemmScheme::kW4A16MXFP4:
      return w4a16_config(kernel, num_experts, rows, n, k, gated);
    case GemmScheme::kW4A8MXFP4:
      return w4a8_config(num_experts, rows);
  }
  MOEKIT_FAIL("gemm_config_for: unknown scheme ", static_cast<int>(scheme));
}

gemm::GemmConfig gemm_config(GemmScheme scheme, int num_experts, std::int64_t rows,
                             std::int64_t n, std::int64_t k, bool gated, bool weights_aligned16) {
  GemmKernel rule = GemmKernel::kWgmma;
  if (scheme == GemmScheme::kBF16 || scheme == GemmScheme::kFP8Block)
    rule = bf16_fp8_kernel(is_fp8(scheme), num_experts, rows);
  else if (gemm::is_w4a16(scheme))
    rule = w4a16_kernel(num_experts, rows);
  return gemm_config_for(scheme, forced_kernel(scheme).value_or(rule), num_experts, rows, n, k,
                         gated, weights_aligned16);
}

ExpertsPlan experts_plan(GemmScheme scheme, int num_experts, std::int64_t rows,
                         std::int64_t hidden, std::int64_t intermediate, bool weights_aligned16) {
  ExpertsPlan plan;
  plan.gemm1 = gemm_config(scheme, num_experts, rows, 2 * intermediate, hidden, true,
                           weights_aligned16);
  plan.gemm2 = gemm_config(scheme, num_experts, rows, hidden, intermediate, false,
                           weights_aligned16);
  const GemmKernel k1 = plan.gemm1.kernel;
  switch (scheme) {
    case GemmScheme::kBF16:
    case GemmScheme::kFP8Block: {
      const bool fp8 = is_fp8(scheme);
      // bf16 on the decode and wgmma kernels runs the activation in GEMM1's epilogue; the
      // CUTLASS kernels, and fp8 on wgmma (its promotion leaves no registers for it), take the
      // activation kernel between the GEMMs.
      plan.gemm1_fuses_activation = !fp8 && (k1 == GemmKernel::kDecode || k1 == GemmKernel::kWgmma);
      // GEMM1 gathers its rows on the decode kernel, and on the wgmma 160r256 tile (cp.async by
      // two producer warps: 256 weight rows per CTA carry the copies; H100, 2026-12-06,
      // deepseek-v3 bf16 4096 tokens -5.1%; the 128 / 160-row tiles were 17-35% slower and keep
      // the gather kernel).
      plan.gemm1_gathers_rows =
          k1 == GemmKernel::kDecode ||
          (k1 == GemmKernel::kWgmma && plan.gemm1.wgmma_tile == WgmmaTile::k160r256);
      plan.fused_routing = !fp8 && k1 == GemmKernel::kDecode && rows <= decode_routing_max_rows();
      break;
    }
    case GemmScheme::kW4A16NVFP4:
    case GemmScheme::kW4A16MXFP4:
      plan.gemm1_fuses_activation = true;
      plan.gemm1_gathers_rows = k1 != GemmKernel::kWgmma;  // wgmma: the gather writes its K order
      plan.wgmma_k_order = k1 == GemmKernel::kWgmma;
      if (plan.wgmma_k_order) plan.gemm1.out_order = gemm::KOrder::kWgmma;
      plan.fused_routing = k1 == GemmKernel::kDecode && !plan.gemm1.decode16 &&
                           rows <= decode_routing_max_rows();
      break;
    case GemmScheme::kW4A8MXFP4:
      plan.gemm1_fuses_activation = true;
      break;
  }
  return plan;
}

bool permute_multi_block(std::int64_t num_assignments) {
  // Three launches (chunk counts, a scan, the scatter) pay from 3 chunks of 1024: one block
  // walking 32 chunks cost deepseek-v3 4096 tokens tens of microseconds (docs/kernels/
  // quant_routing.md "Permutation, gather and finalize").
  return (num_assignments + 1023) / 1024 >= 3;
}

int permute_block_threads(std::int64_t num_assignments) {
  // One chunk of <= 128 assignments (decode): a 128-thread block, whose barriers and per-warp loops
  // cost less than the 1024-thread one's.
  return num_assignments <= 128 ? 128 : 1024;
}

bool fp4_quantize_rows_kernel(bool nvfp4, bool static_global_scale, std::int64_t rows, int sms,
                              int row_groups_per_cta) {
  // The row-group kernel where it measured faster than the chunk kernel (H200, bf16 [M, 7168],
  // 132 SMs x 4 = 528 row groups, both forced in one run;
  // kernels_20261201c_quant_fp4_rows_vs_chunks.json): from one row per group for per-token NVFP4
  // (M 528: 6.3 vs 7.3 us), MXFP4 (528: 6.7 vs 7.6) and NVFP4 with a computed gs (1024: 18.5 vs
  // 19.0); from half a row per group for NVFP4 with a static gs (264: 6.9 vs 7.2). Fewer rows leave
  // the persistent CTAs too little work for their tables and tail.
  const std::int64_t groups = static_cast<std::int64_t>(sms) * row_groups_per_cta;
  return nvfp4 && static_global_scale ? 2 * rows >= groups : rows >= groups;
}

bool fp4_quantize_rows_224(std::int64_t kb) {
  // 385..448 scale blocks (6144 < K <= 7168): 224 threads per group, so that every warp encodes
  // exactly 2 blocks at K 7168 instead of warps 6-7 of a 256-thread group one (H200, per-token
  // NVFP4, M 4682: 31.4 vs 33.2 us).
  return kb > 384 && kb <= 448;
}

}  // namespace moekit::tuning::sm90
