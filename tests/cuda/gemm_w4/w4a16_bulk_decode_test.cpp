// Tests of the W4A16 decode8 kernels on shapes the small parametrized cases
// (w4a16_grouped_gemm_test.cpp: 5 K chunks, one ring stage per unit) do not
// reach: the bulk-copy ring (sm90_w4a16_bulk_decode_gemm.cuh) with several
// stages per unit, a partial last stage, K slots without chunks, a partial
// 64-row unit, many units per CTA (the ring crossing unit boundaries), and
// cluster split-K; the register ring (sm90_w4a16_decode_gemm.cuh) on the same
// problems; the fallback to the register ring for scales that are not 16-byte
// aligned. Error bound as in the grouped-GEMM test: relative L2 < 4e-3 vs
// float64 (fp32 accumulation + the final bf16 rounding); repeated runs must be
// bitwise equal.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemm/sm90_w4a16_decode_select.cuh"
#include "cuda/gemm_w4/w4a16_test_util.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/gemm/w4a16.hpp"

namespace moekit::gemm {
namespace {

using namespace w4a16_test;
using sm90_w4a16::Decode8Kernel;
using sm90_w4a16::ScopedDecode8Kernel;

struct Problem {
  W4Format format;
  W4Epilogue epi;
  std::vector<int> rows_per_expert;
};

std::string kernel_name(Decode8Kernel k) {
  return k == Decode8Kernel::kRegisterRing ? "register ring"
         : k == Decode8Kernel::kBulkRing   ? "bulk ring"
                                           : "auto";
}

void run_problem(const Problem& pr, std::uint32_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " format " + w4_format_name(pr.format) + " epi " +
               std::to_string(static_cast<int>(pr.epi)));
  std::mt19937 rng(seed);
  const int e = static_cast<int>(pr.rows_per_expert.size());
  const bool gated = pr.epi != W4Epilogue::kNone;
  // n = 208: 13 row tiles (the last 64-row unit has one tile); k = 2368: 37 chunks (4 K-warps:
  // 10, 10, 10, 7 chunks = 5 stages of 2, the last warp's last stage empty; 3-CTA cluster: 12
  // K slots of 4 chunks, the last three slots with 1 or no chunk).
  const std::int64_t n = 208, k = 2368;
  const std::int64_t width = gated ? n / 2 : n;
  const W4Weights w = random_weights(rng, pr.format, e, n, k, gated);
  std::vector<std::int32_t> offsets(e + 1, 0);
  for (int i = 0; i < e; ++i) offsets[i + 1] = offsets[i] + pr.rows_per_expert[i];
  const int m = offsets[e];
  const int a_rows = m / 2 + 1;  // gathered: rows repeat
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> a(a_rows * k);
  for (auto& v : a) v = float_to_bf16(normal(rng));
  std::vector<std::int32_t> row_index(m);
  std::uniform_int_distribution<int> src(0, a_rows - 1);
  for (auto& r : row_index) r = src(rng);
  std::vector<float> bias(e * n), row_scale(m);
  for (auto& v : bias) v = normal(rng);
  for (auto& v : row_scale) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);

  std::vector<double> ref(static_cast<std::size_t>(m) * width), col(n);
  for (int x = 0; x < e; ++x) {
    for (int r = offsets[x]; r < offsets[x + 1]; ++r) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t kk = 0; kk < k; ++kk)
          s += w.deq(x, j, kk) * bf16_to_float(a[row_index[r] * k + kk]);
        col[j] = s + bias[x * n + j];
      }
      for (std::int64_t j = 0; j < width; ++j) {
        double v = col[j];
        if (pr.epi == W4Epilogue::kSiluAndMul) v = col[j] / (1 + std::exp(-col[j])) * col[j + width];
        ref[r * width + j] = v * row_scale[r];
      }
    }
  }

  DeviceArray<std::int32_t> d_offsets(offsets), d_row_index(row_index);
  DeviceArray<std::uint16_t> d_a(a), d_out((m + 2) * width);
  DeviceArray<u8> d_w(w.shuffled_codes), d_s(w.shuffled_scales);
  // The scales again at a 2-byte (not 16-byte) aligned address.
  DeviceArray<u8> d_s_off(w.shuffled_scales.size() + 16);
  ASSERT_EQ(cudaMemcpy(d_s_off.ptr + 2, w.shuffled_scales.data(), w.shuffled_scales.size(),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  DeviceArray<float> d_alpha(w.alpha), d_bias(bias), d_row_scale(row_scale);

  struct Variant {
    Decode8Kernel kernel;
    int max_ctas, k_split;
    bool misaligned_scales;
  };
  const Variant variants[] = {
      {Decode8Kernel::kBulkRing, 0, 1, false},     {Decode8Kernel::kBulkRing, 3, 1, false},
      {Decode8Kernel::kBulkRing, 0, 2, false},     {Decode8Kernel::kBulkRing, 6, 3, false},
      {Decode8Kernel::kBulkRing, 0, 0, false},     {Decode8Kernel::kRegisterRing, 0, 1, false},
      {Decode8Kernel::kRegisterRing, 3, 1, false}, {Decode8Kernel::kRegisterRing, 0, 2, false},
      {Decode8Kernel::kBulkRing, 3, 1, true},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(kernel_name(v.kernel) + " max_ctas " + std::to_string(v.max_ctas) + " k_split " +
                 std::to_string(v.k_split) + (v.misaligned_scales ? " misaligned scales" : ""));
    ScopedDecode8Kernel select(v.kernel);
    W4A16GemmArgs args;
    args.format = pr.format;
    args.epilogue = pr.epi;
    args.tile = W4Tile::kDecode8;
    args.num_experts = e;
    args.m = m;
    args.n = n;
    args.k = k;
    args.expert_offsets = d_offsets.ptr;
    args.a = d_a.ptr;
    args.row_index = d_row_index.ptr;
    args.w = d_w.ptr;
    args.w_scales = v.misaligned_scales ? d_s_off.ptr + 2 : d_s.ptr;
    args.alpha = pr.format == W4Format::kNVFP4 ? d_alpha.ptr : nullptr;
    args.bias = d_bias.ptr;
    args.row_scale = d_row_scale.ptr;
    args.out = d_out.ptr;
    args.max_ctas = v.max_ctas;
    args.k_split = v.k_split;
    std::vector<std::uint16_t> first;
    for (int rep = 0; rep < 2; ++rep) {
      ASSERT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);  // NaN poison
      w4a16_grouped_gemm(args);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::uint16_t> out = d_out.download();
      if (rep == 0) {
        first = out;
        continue;
      }
      EXPECT_EQ(out, first) << "repeated runs differ";
    }
    double num = 0, den = 0;
    std::int64_t unwritten = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const float got = bf16_to_float(first[i]);
      if (std::isnan(got)) {
        ++unwritten;
        continue;
      }
      num += (got - ref[i]) * (got - ref[i]);
      den += ref[i] * ref[i];
    }
    EXPECT_EQ(unwritten, 0);
    for (std::size_t i = ref.size(); i < first.size(); ++i)
      ASSERT_EQ(first[i], 0xFFFF) << "row past offsets[E] written at " << i;
    EXPECT_GT(den, 0.0);
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-300)), 4e-3);
  }
}

// Experts with 0, 1, 7, 8, 9 and 20 rows (empty experts, full and partial 8-token tiles).
TEST(W4A16Gemm, Decode8KernelsLongKMatchFloat64) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  const std::vector<int> rows = {7, 0, 20, 1, 9, 8};
  for (const Problem& pr : {Problem{W4Format::kNVFP4, W4Epilogue::kNone, rows},
                            Problem{W4Format::kNVFP4, W4Epilogue::kSiluAndMul, rows},
                            Problem{W4Format::kMXFP4, W4Epilogue::kNone, rows},
                            Problem{W4Format::kMXFP4, W4Epilogue::kSiluAndMul, rows}})
    run_problem(pr, seed);
}

// The switch restores its previous value and defaults to the library's choice.
TEST(W4A16Gemm, Decode8KernelSwitchIsScoped) {
  EXPECT_EQ(sm90_w4a16::decode8_kernel(), Decode8Kernel::kAuto);
  {
    ScopedDecode8Kernel select(Decode8Kernel::kRegisterRing);
    EXPECT_EQ(sm90_w4a16::decode8_kernel(), Decode8Kernel::kRegisterRing);
  }
  EXPECT_EQ(sm90_w4a16::decode8_kernel(), Decode8Kernel::kAuto);
}

}  // namespace
}  // namespace moekit::gemm
