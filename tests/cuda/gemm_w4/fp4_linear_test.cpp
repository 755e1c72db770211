// The SM90 dense FP4 linear (W4A16) against the host reference. Bound 4e-3 relative L2: same
// argument as the grouped GEMM test (exact bf16 weights, fp32 accumulation, bf16 output rounding).
#include "moekit/linear/fp4_linear.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"

namespace moekit::linear {
namespace {

std::uint32_t test_seed() {
  if (const char* s = std::getenv("MOEKIT_TEST_SEED"))
    return static_cast<std::uint32_t>(std::stoul(s));
  return std::random_device{}();
}

float bf16_to_float(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

void* device_copy(const void* host, std::size_t bytes) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, bytes ? bytes : 16), cudaSuccess);
  if (bytes) {
    EXPECT_EQ(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return d;
}

// Without a workspace (the mma.sync kernels) and with one (large m: x reordered into it, the wgmma
// kernel); m = 0, 1, 3, 129, 300; rows past m stay untouched.
TEST(Fp4LinearSm90, MatchesReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::int64_t n = 80, k = 192;
  for (QuantScheme format : {QuantScheme::kNVFP4, QuantScheme::kMXFP4}) {
    for (std::int64_t m : {0, 1, 3, 129, 300}) {
      for (bool with_bias : {false, true}) {
        for (bool with_workspace : {false, true}) {
          SCOPED_TRACE(std::string(scheme_name(format)) + " m " + std::to_string(m) + " bias " +
                       std::to_string(with_bias) + " workspace " +
                       std::to_string(with_workspace));
          const int sfv = scale_block_size(format);
          std::vector<std::uint8_t> codes(n * k / 2), scales(n * k / sfv), sc(codes.size()),
              ss(scales.size());
          for (auto& c : codes) c = static_cast<std::uint8_t>(rng());
          for (auto& s : scales)
            s = static_cast<std::uint8_t>(format == QuantScheme::kNVFP4 ? 0x20 + rng() % 0x30
                                                                        : 118 + rng() % 10);
          fp4_linear_prepare_weights(format, n, k, codes.data(), scales.data(), sc.data(),
                                     ss.data());
          std::normal_distribution<float> normal(0.0f, 1.0f);
          std::vector<std::uint16_t> x(std::max<std::int64_t>(m, 1) * k);
          std::vector<float> xf(x.size()), bias(n), ref(m * n);
          for (std::size_t i = 0; i < x.size(); ++i) {
            x[i] = float_to_bf16(normal(rng));
            xf[i] = bf16_to_float(x[i]);
          }
          for (auto& b : bias) b = normal(rng);
          const float alpha = format == QuantScheme::kNVFP4 ? 1.0f / 300.0f : 1.0f;
          fp4_linear_reference(format, m, n, k, xf.data(), codes.data(), scales.data(), alpha,
                               with_bias ? bias.data() : nullptr, ref.data());
          const std::size_t ws_bytes = with_workspace ? fp4_linear_workspace_bytes(m, k) : 0;
          void* d_x = device_copy(x.data(), x.size() * 2);
          void* d_w = device_copy(sc.data(), sc.size());
          void* d_s = device_copy(ss.data(), ss.size());
          void* d_alpha = device_copy(&alpha, 4);
          void* d_bias = device_copy(bias.data(), bias.size() * 4);
          void* d_ws = nullptr;
          ASSERT_EQ(cudaMalloc(&d_ws, std::max<std::size_t>(ws_bytes, 16)), cudaSuccess);
          void* d_out = nullptr;
          ASSERT_EQ(cudaMalloc(&d_out, (m + 1) * n * 2), cudaSuccess);
          ASSERT_EQ(cudaMemset(d_out, 0xFF, (m + 1) * n * 2), cudaSuccess);
          Fp4LinearArgs args;
          args.format = format;
          args.m = m;
          args.n = n;
          args.k = k;
          args.x = d_x;
          args.w = static_cast<const std::uint8_t*>(d_w);
          args.w_scales = static_cast<const std::uint8_t*>(d_s);
          args.alpha = format == QuantScheme::kNVFP4 ? static_cast<const float*>(d_alpha)
                                                     : nullptr;
          args.bias = with_bias ? static_cast<const float*>(d_bias) : nullptr;
          args.out = d_out;
          args.workspace = with_workspace ? d_ws : nullptr;
          args.workspace_bytes = ws_bytes;
          fp4_linear(args);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          std::vector<std::uint16_t> out((m + 1) * n);
          ASSERT_EQ(cudaMemcpy(out.data(), d_out, out.size() * 2, cudaMemcpyDeviceToHost),
                    cudaSuccess);
          double num = 0, den = 0;
          int nan = 0;
          for (std::int64_t i = 0; i < m * n; ++i) {
            const float v = bf16_to_float(out[i]);
            if (std::isnan(v)) ++nan;
            num += (v - ref[i]) * (v - ref[i]);
            den += double(ref[i]) * ref[i];
          }
          EXPECT_EQ(nan, 0);
          for (std::int64_t i = m * n; i < (m + 1) * n; ++i) ASSERT_EQ(out[i], 0xFFFF);
          if (m > 0) {
            EXPECT_LT(std::sqrt(num / den), 4e-3);
          }
          for (void* p : {d_x, d_w, d_s, d_alpha, d_bias, d_ws, d_out}) cudaFree(p);
        }
      }
    }
  }
}

TEST(Fp4LinearSm90, SupportsNamesTheReason) {
  MOEKIT_REQUIRE_GPU();
  EXPECT_EQ(fp4_linear_unsupported_reason(QuantScheme::kNVFP4, 64, 128), "");
  EXPECT_NE(fp4_linear_unsupported_reason(QuantScheme::kNVFP4, 24, 128).find("n must"),
            std::string::npos);
  EXPECT_NE(fp4_linear_unsupported_reason(QuantScheme::kMXFP4, 64, 96).find("k must"),
            std::string::npos);
}

}  // namespace
}  // namespace moekit::linear
