// The quantize kernels' fast element conversions (src/cuda/quant/fast_codecs.cuh: hardware e4m3
// cvt; e2m1 as round-to-odd + the e4m3 cvt + a table; block scales, NVFP4's with the e4m3 -> f16 decode) equal the normative codecs for EVERY fp32 input (all 2^32 patterns,
// on the device), so the kernels built on them are byte-identical to the CPU reference by proof,
// not by sampling.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "cuda/gpu_test_util.hpp"
#include "cuda/quant/fast_codecs_check.hpp"

namespace moekit::cuda_test {
namespace {

void expect_exact(FastCodec codec, const char* name) {
  const FastCodecCheck r = check_fast_codec_all_inputs(codec);
  ASSERT_TRUE(r.launched) << name << ": kernel launch failed";
  EXPECT_EQ(r.checked, std::uint64_t{1} << 32) << name << ": not every fp32 pattern was compared";
  char first[16];
  std::snprintf(first, sizeof(first), "0x%08X", r.first_mismatch);
  EXPECT_EQ(r.mismatches, 0u) << name << ": " << r.mismatches
                              << " fp32 inputs convert differently; first " << first;
}

TEST(FastCodecs, E4M3HardwareConversionEqualsReferenceForAllFloats) {
  MOEKIT_REQUIRE_GPU();
  expect_exact(FastCodec::kE4M3, "e4m3x4");
}

TEST(FastCodecs, E2M1ThroughE4M3TableEqualsReferenceForAllFloats) {
  MOEKIT_REQUIRE_GPU();
  expect_exact(FastCodec::kE2M1, "e2m1_code");
}

// The quantize kernels build their table with fill_e2m1_table: every byte equals the constant
// table proved above (block sizes below, at and above 256 threads).
TEST(FastCodecs, E2m1TableComputed) {
  MOEKIT_REQUIRE_GPU();
  for (const int threads : {96, 256, 1024}) EXPECT_EQ(e2m1_table_mismatches(threads), 0) << threads;
}

TEST(FastCodecs, BranchFreeMxBlockScalesEqualReferenceForAllFloats) {
  MOEKIT_REQUIRE_GPU();
  expect_exact(FastCodec::kMxScale, "mx_block_scale_fast");
}

TEST(FastCodecs, Nvfp4BlockScaleWithFastDecodeEqualsReferenceForAllFloats) {
  MOEKIT_REQUIRE_GPU();
  expect_exact(FastCodec::kNvfp4Scale, "nvfp4_block_scale_fast");
}

}  // namespace
}  // namespace moekit::cuda_test
