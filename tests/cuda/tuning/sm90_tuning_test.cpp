// The SM90 selection rules (cuda/tuning/sm90_tuning.hpp) that need no device: the bf16 / fp8 /
// W4A8 kernel, tile and fusion choices of an experts call at the sizes the measurements behind
// them name (docs/tuning.md), and the override switches (a forced choice is honoured for the
// scheme it names only; a bad value is an error naming the variable, the expected and the actual
// value). The W4A16 rules read the device (SM count, shared memory) and are covered by the kernel
// tests on a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cuda/gpu_test_util.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/core/error.hpp"

namespace moekit::tuning::sm90 {
namespace {

using gemm::GemmKernel;
using gemm::GemmScheme;
using gemm::WgmmaTile;

// deepseek-v3 (E 256, top-8, H 7168, I 2048) and friends at `tokens` tokens.
ExpertsPlan plan(GemmScheme s, int e, int top_k, std::int64_t tokens, std::int64_t h = 7168,
                 std::int64_t i = 2048) {
  return experts_plan(s, e, tokens * top_k, h, i, /*weights_aligned16=*/true);
}

std::string error_of(GemmScheme s, int e, std::int64_t rows) {
  try {
    experts_plan(s, e, rows, 4096, 1024, true);
  } catch (const Error& err) {
    return err.what();
  }
  return "no error";
}

TEST(Sm90Tuning, Bf16Rules) {
  // Decode kernel at <= 8 rows with E <= 128: routing fused into both GEMMs, GEMM1 gathers.
  ExpertsPlan p = plan(GemmScheme::kBF16, 128, 4, 1, 2880, 2880);
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kDecode) << p.gemm1.str();
  EXPECT_TRUE(p.fused_routing && p.gemm1_gathers_rows && p.gemm1_fuses_activation);
  EXPECT_TRUE(p.gemm1.decode_tma);
  EXPECT_FALSE(p.gemm1.decode16);
  // Not with E 256 (a tie measured): wgmma, 128-column tile.
  p = plan(GemmScheme::kBF16, 256, 8, 1);
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kWgmma) << p.gemm1.str();
  EXPECT_EQ(p.gemm1.wgmma_tile, WgmmaTile::k128n);
  EXPECT_FALSE(p.fused_routing);
  // deepseek-v3 4096 tokens (128 rows per expert): the 160r256 tile, which gathers its rows.
  p = plan(GemmScheme::kBF16, 256, 8, 4096);
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kWgmma);
  EXPECT_EQ(p.gemm1.wgmma_tile, WgmmaTile::k160r256);
  EXPECT_TRUE(p.gemm1_gathers_rows && p.gemm1_fuses_activation);
  // kimi-k2 4096 (85 rows per expert): CUTLASS wide, activation kernel between the GEMMs.
  p = plan(GemmScheme::kBF16, 384, 8, 4096);
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kCutlassWide) << p.gemm1.str();
  EXPECT_FALSE(p.gemm1_gathers_rows || p.gemm1_fuses_activation);
  // gpt-oss 4096 (E 128, 128 rows): the 160 tile, the gather kernel before it.
  p = plan(GemmScheme::kBF16, 128, 4, 4096, 2880, 2880);
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kWgmma);
  EXPECT_EQ(p.gemm1.wgmma_tile, WgmmaTile::k160);
  EXPECT_FALSE(p.gemm1_gathers_rows);
  // Unaligned weights: the decode kernel's register ring.
  EXPECT_FALSE(experts_plan(GemmScheme::kBF16, 8, 2, 4096, 1024, false).gemm1.decode_tma);
  // Both GEMMs of a plan take the same kernel.
  EXPECT_EQ(p.gemm1.kernel, p.gemm2.kernel);
}

TEST(Sm90Tuning, Fp8BlockRules) {
  // wgmma below 64 rows per expert and with E >= 256 below 256; never the fused activation.
  ExpertsPlan p = plan(GemmScheme::kFP8Block, 256, 8, 4096);
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kWgmma);
  EXPECT_EQ(p.gemm1.wgmma_tile, WgmmaTile::k160);
  EXPECT_FALSE(p.gemm1_fuses_activation || p.gemm1_gathers_rows || p.fused_routing);
  p = plan(GemmScheme::kFP8Block, 128, 8, 8, 4096, 1536);  // qwen3-235b decode
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kWgmma);
  EXPECT_EQ(p.gemm1.wgmma_tile, WgmmaTile::k128n);
  // mixtral 512 tokens (E 8, 128 rows): swap-AB wide; 4096 tokens (1024 rows): wide.
  EXPECT_EQ(plan(GemmScheme::kFP8Block, 8, 2, 512, 4096, 14336).gemm1.kernel,
            GemmKernel::kCutlassSwapWide);
  EXPECT_EQ(plan(GemmScheme::kFP8Block, 8, 2, 4096, 4096, 14336).gemm1.kernel,
            GemmKernel::kCutlassWide);
  // E 128 at 64..127 rows per expert: narrow.
  EXPECT_EQ(plan(GemmScheme::kFP8Block, 128, 8, 1024, 4096, 1536).gemm1.kernel,
            GemmKernel::kCutlassNarrow);
}

TEST(Sm90Tuning, W4A8Rules) {
  ExpertsPlan p = plan(GemmScheme::kW4A8MXFP4, 256, 8, 4096);  // 128 rows per expert
  EXPECT_EQ(p.gemm1.kernel, GemmKernel::kWgmma);
  EXPECT_EQ(p.gemm1.tokens, 160);
  EXPECT_TRUE(p.gemm1_fuses_activation);
  EXPECT_FALSE(p.gemm1_gathers_rows || p.fused_routing);
  EXPECT_EQ(plan(GemmScheme::kW4A8MXFP4, 128, 8, 512, 4096, 1536).gemm1.tokens, 128);
  EXPECT_EQ(plan(GemmScheme::kW4A8MXFP4, 128, 8, 0, 4096, 1536).gemm1.tokens, 128);  // M = 0
}

TEST(Sm90Tuning, RowsPerExpert) {
  EXPECT_EQ(rows_per_holding_expert(256, 32768), 128);
  EXPECT_EQ(rows_per_holding_expert(256, 8), 1);  // 8 rows hold at most 8 experts
  EXPECT_EQ(rows_per_holding_expert(256, 0), 0);
  EXPECT_EQ(rows_per_active_expert(8, 9), 2);
  EXPECT_EQ(rows_per_active_expert(8, 0), 0);
}

TEST(Sm90Tuning, GemmKernelOverride) {
  {
    test::ScopedEnv force("MOEKIT_GEMM_KERNEL", "bf16:cutlass_narrow");
    EXPECT_EQ(plan(GemmScheme::kBF16, 256, 8, 4096).gemm1.kernel, GemmKernel::kCutlassNarrow);
    // fp8 is not named: its rule holds.
    EXPECT_EQ(plan(GemmScheme::kFP8Block, 256, 8, 4096).gemm1.kernel, GemmKernel::kWgmma);
  }
  {
    test::ScopedEnv force("MOEKIT_GEMM_KERNEL", "wgmma");  // every scheme
    EXPECT_EQ(plan(GemmScheme::kFP8Block, 8, 2, 4096, 4096, 14336).gemm1.kernel,
              GemmKernel::kWgmma);
    EXPECT_EQ(plan(GemmScheme::kBF16, 384, 8, 4096).gemm1.kernel, GemmKernel::kWgmma);
  }
  {
    test::ScopedEnv bad("MOEKIT_GEMM_KERNEL", "fast");
    const std::string e = error_of(GemmScheme::kBF16, 8, 64);
    EXPECT_NE(e.find("MOEKIT_GEMM_KERNEL"), std::string::npos) << e;
    EXPECT_NE(e.find("fast"), std::string::npos) << e;
    EXPECT_NE(e.find("cutlass_wide"), std::string::npos) << e;  // lists what is expected
  }
  {
    test::ScopedEnv bad("MOEKIT_GEMM_KERNEL", "fp8_block:decode");  // no fp8 decode kernel
    const std::string e = error_of(GemmScheme::kFP8Block, 8, 64);
    EXPECT_NE(e.find("MOEKIT_GEMM_KERNEL"), std::string::npos) << e;
    EXPECT_NE(e.find("decode"), std::string::npos) << e;
  }
  {
    test::ScopedEnv bad("MOEKIT_GEMM_KERNEL", "int8:wgmma");  // no such scheme
    EXPECT_NE(error_of(GemmScheme::kBF16, 8, 64).find("MOEKIT_GEMM_KERNEL"), std::string::npos);
  }
}

TEST(Sm90Tuning, GemmTileOverride) {
  {
    test::ScopedEnv force("MOEKIT_GEMM_TILE", "144n");
    EXPECT_EQ(plan(GemmScheme::kBF16, 256, 8, 4096).gemm1.wgmma_tile, WgmmaTile::k144n);
  }
  {
    test::ScopedEnv force("MOEKIT_GEMM_TILE", "128");
    EXPECT_EQ(plan(GemmScheme::kW4A8MXFP4, 256, 8, 4096).gemm1.tokens, 128);
  }
  {
    test::ScopedEnv bad("MOEKIT_GEMM_TILE", "160r256");  // not an fp8 tile
    const std::string e = error_of(GemmScheme::kFP8Block, 256, 32768);
    EXPECT_NE(e.find("MOEKIT_GEMM_TILE"), std::string::npos) << e;
    EXPECT_NE(e.find("160r256"), std::string::npos) << e;
  }
}

TEST(Sm90Tuning, DecodeRoutingOverride) {
  EXPECT_EQ(decode_routing_max_rows(), gemm::kDecodeRoutingMaxRows);
  {
    test::ScopedEnv off("MOEKIT_DECODE_ROUTING", "0");
    EXPECT_EQ(decode_routing_max_rows(), 0);
    EXPECT_FALSE(plan(GemmScheme::kBF16, 128, 4, 1, 2880, 2880).fused_routing);
  }
  for (const char* bad : {"65", "-1", "lots"}) {
    test::ScopedEnv env("MOEKIT_DECODE_ROUTING", bad);
    try {
      decode_routing_max_rows();
      ADD_FAILURE() << "no error for MOEKIT_DECODE_ROUTING=" << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MOEKIT_DECODE_ROUTING"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(Sm90Tuning, GlueRules) {
  EXPECT_FALSE(permute_multi_block(2048));
  EXPECT_TRUE(permute_multi_block(2049));
  EXPECT_EQ(permute_block_threads(128), 128);
  EXPECT_EQ(permute_block_threads(129), 1024);
  EXPECT_TRUE(fp4_quantize_rows_224(448));
  EXPECT_FALSE(fp4_quantize_rows_224(384));
  EXPECT_FALSE(fp4_quantize_rows_224(449));
  // 132 SMs x 4 row groups: from one row per group, half a row with a static NVFP4 scale.
  EXPECT_TRUE(fp4_quantize_rows_kernel(true, false, 528, 132, 4));
  EXPECT_FALSE(fp4_quantize_rows_kernel(true, false, 527, 132, 4));
  EXPECT_TRUE(fp4_quantize_rows_kernel(true, true, 264, 132, 4));
  EXPECT_FALSE(fp4_quantize_rows_kernel(true, true, 263, 132, 4));
}

}  // namespace
}  // namespace moekit::tuning::sm90
