// cuda::w4a16_shuffle_per_expert (the W4A16 experts' parallel weight shuffle, host code of CUDA
// builds; no device needed) is byte-identical to one gemm::w4a16_shuffle_weights call over
// all experts, for NVFP4 / MXFP4, gated (GEMM1) and not (GEMM2), random codes and scales.
#include <gtest/gtest.h>

#if MOEKIT_WITH_CUDA
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/experts/sm90_experts_weights.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_weight_shuffle.hpp"
#include "test_seed.hpp"

namespace moekit {
namespace {

TEST(W4A16ShufflePerExpert, MatchesTheSingleCall) {
  const std::uint64_t seed = process_test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::int64_t e = 5, n = 96, k = 192;  // 6 row tiles, 3 K chunks per expert
  for (QuantScheme f : {QuantScheme::kNVFP4, QuantScheme::kMXFP4}) {
    for (bool gated : {true, false}) {
      SCOPED_TRACE(std::string(scheme_name(f)) + (gated ? " gated" : " plain"));
      const std::int64_t sfv = scale_block_size(f);
      std::vector<std::uint8_t> codes(static_cast<std::size_t>(e * n * k / 2)),
          scales(static_cast<std::size_t>(e * n * k / sfv));
      for (auto& c : codes) c = static_cast<std::uint8_t>(rng());
      for (auto& s : scales) s = static_cast<std::uint8_t>(rng());
      std::vector<std::uint8_t> want_c(codes.size()), want_s(scales.size()),
          got_c(codes.size(), 0xAB), got_s(scales.size(), 0xAB);
      gemm::w4a16_shuffle_weights(f, e, n, k, gated, codes.data(), scales.data(), want_c.data(),
                                  want_s.data());
      cuda::w4a16_shuffle_per_expert(f, e, n, k, gated, codes.data(), scales.data(),
                                     got_c.data(), got_s.data());
      EXPECT_TRUE(got_c == want_c);
      EXPECT_TRUE(got_s == want_s);
    }
  }
}

}  // namespace
}  // namespace moekit
#endif  // MOEKIT_WITH_CUDA
