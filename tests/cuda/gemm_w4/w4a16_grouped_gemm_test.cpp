// Tests of the SM90 W4A16 grouped GEMM against a float64 CPU reference of the
// dequantized weights.
//
// Error bound: weights and their scales are exact in bf16, activations are bf16
// inputs (the reference uses the same values), so the only errors are fp32
// accumulation (~1e-7 * sqrt(K) relative) and the final bf16 rounding of each
// output (<= 2^-9 relative, RMS ~2^-9 / sqrt(3) ~ 1.1e-3). The relative L2
// bound 4e-3 leaves room for the gated activations' __expf (~1e-6).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemm_w4/w4a16_test_util.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_weight_shuffle.hpp"

namespace moekit::gemm {
namespace {

using namespace w4a16_test;

TEST(W4A16Shuffle, RoundTripIsIdentity) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (W4Format f : {W4Format::kNVFP4, W4Format::kMXFP4}) {
    for (bool gated : {false, true}) {
      const W4Weights w = random_weights(rng, f, 3, 48, 192, gated);
      std::vector<u8> codes(w.codes.size()), scales(w.scales.size());
      w4a16_unshuffle_weights(f, 3, 48, 192, gated, w.shuffled_codes.data(),
                              w.shuffled_scales.data(), codes.data(), scales.data());
      EXPECT_EQ(codes, w.codes);
      EXPECT_EQ(scales, w.scales);
      EXPECT_NE(w.shuffled_codes, w.codes);  // it does move bytes
    }
  }
}

TEST(W4A16Shuffle, RejectsBadShapes) {
  MOEKIT_REQUIRE_GPU();
  std::vector<u8> buf(4096);
  try {
    w4a16_shuffle_weights(W4Format::kNVFP4, 1, 24, 64, false, buf.data(), buf.data(), buf.data(),
                          buf.data());
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n:"), std::string::npos) << e.what();
  }
  try {
    w4a16_shuffle_weights(W4Format::kNVFP4, 1, 16, 96, false, buf.data(), buf.data(), buf.data(),
                          buf.data());
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k:"), std::string::npos) << e.what();
  }
}

enum class Routing { kUniform, kOneExpert, kSkipEven };

struct Case {
  W4Format format;
  EpilogueKind epi;
  int m;
  Routing routing;
  bool gather;
  bool bias;
  bool row_scale;
};

void run_case(const Case& c, std::uint32_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " format " + w4_format_name(c.format) + " epi " +
               std::to_string(static_cast<int>(c.epi)) + " m " + std::to_string(c.m) + " routing " +
               std::to_string(static_cast<int>(c.routing)) + " gather " + std::to_string(c.gather));
  std::mt19937 rng(seed);
  const int e = 6;
  const bool gated = c.epi != EpilogueKind::kNone;
  const std::int64_t n = gated ? 2 * 56 : 80,
                     k = 320;  // K tail for 4-way split, partial CTA rows
  const std::int64_t width = gated ? n / 2 : n;
  const W4Weights w = random_weights(rng, c.format, e, n, k, gated);

  // Rows grouped by expert.
  std::vector<int> expert_of(c.m);
  std::uniform_int_distribution<int> pick(0, e - 1);
  for (int r = 0; r < c.m; ++r) {
    int x = pick(rng);
    if (c.routing == Routing::kOneExpert) x = 4;
    if (c.routing == Routing::kSkipEven) x = 2 * (x / 2) + 1;
    expert_of[r] = x;
  }
  std::sort(expert_of.begin(), expert_of.end());
  std::vector<std::int32_t> offsets(e + 1, 0);
  for (int r = 0; r < c.m; ++r) offsets[expert_of[r] + 1]++;
  for (int i = 0; i < e; ++i) offsets[i + 1] += offsets[i];

  const int a_rows = std::max(1, c.gather ? c.m / 2 + 1 : c.m);
  std::vector<std::uint16_t> a(a_rows * k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : a) v = float_to_bf16(normal(rng));
  std::vector<std::int32_t> row_index(std::max(1, c.m));
  std::uniform_int_distribution<int> src(0, a_rows - 1);
  for (int r = 0; r < c.m; ++r) row_index[r] = c.gather ? src(rng) : r;
  std::vector<float> bias(e * n), row_scale(std::max(1, c.m));
  for (auto& v : bias) v = normal(rng);
  for (auto& v : row_scale) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);

  // float64 reference
  const double limit = 7.0, salpha = 1.702;
  std::vector<double> ref(static_cast<std::size_t>(c.m) * width);
  std::vector<double> col(n), wdeq(static_cast<std::size_t>(e) * n * k);
  for (int x = 0; x < e; ++x)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t kk = 0; kk < k; ++kk) wdeq[(x * n + j) * k + kk] = w.deq(x, j, kk);
  for (int r = 0; r < c.m; ++r) {
    const int x = expert_of[r];
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t kk = 0; kk < k; ++kk)
        s += wdeq[(x * n + j) * k + kk] * bf16_to_float(a[row_index[r] * k + kk]);
      col[j] = s + (c.bias ? bias[x * n + j] : 0.0);
    }
    for (std::int64_t j = 0; j < width; ++j) {
      double v = col[j];
      if (c.epi == EpilogueKind::kSiluAndMul) {
        v = col[j] / (1 + std::exp(-col[j])) * col[j + width];
      } else if (c.epi == EpilogueKind::kSwigluOai) {
        const double g = std::min(col[j], limit);
        const double u = std::clamp(col[j + width], -limit, limit);
        v = g / (1 + std::exp(-salpha * g)) * (u + 1);
      }
      ref[r * width + j] = v * (c.row_scale ? row_scale[r] : 1.0);
    }
  }

  DeviceArray<std::int32_t> d_offsets(offsets), d_row_index(row_index);
  // The wgmma tile reads its rows in order (no row_index): the gathered rows, converted.
  std::vector<std::uint16_t> gathered(static_cast<std::size_t>(std::max(1, c.m)) * k);
  for (int r = 0; r < c.m; ++r)
    std::copy_n(a.begin() + static_cast<std::int64_t>(row_index[r]) * k, k,
                gathered.begin() + static_cast<std::int64_t>(r) * k);
  DeviceArray<std::uint16_t> d_a(a), d_a_wgmma(to_wgmma_k_order(gathered, std::max(1, c.m), k));
  DeviceArray<u8> d_w(w.shuffled_codes), d_s(w.shuffled_scales);
  DeviceArray<float> d_alpha(w.alpha), d_bias(bias), d_row_scale(row_scale);
  const int extra_rows = 3;  // must stay poisoned
  DeviceArray<std::uint16_t> d_out((c.m + extra_rows) * width);

  // Variants 0-7: every tile with the grid filling the device / capped at 3
  // CTAs (many units per CTA: the ring crosses units); k_split 1 (no cluster).
  // decode8 runs its 32-row config with the full grid (few units here) and the
  // 64-row one when capped (3 slots: the units fill them). 8-11: the decode
  // tiles' cluster split-K (k = 320 is 5 chunks: with 3 x 4 or 8 x 2 K-warps
  // some warps and CTAs get no chunk), filled / capped grids. 12-13: wgmma
  // (A in the wgmma K order; 128 x 128, m = 1024 gives full token tiles and
  // narrow tails, n = 80 / 112 a partial 128-row tile, 5 chunks a one-chunk
  // last stage). 14-15: the wgmma 32-token tile (units of N = 8 / 16 / 32 by their rows; on
  // these 6 experts 2 CTAs per SM up to 24 rows per expert, m <= 129, and 3 above).
  struct Variant {
    W4Tile tile;
    int max_ctas, k_split;
    int wgmma_tokens = 0;
  };
  const Variant variants[] = {
      {W4Tile::kDecode8, 0, 1},   {W4Tile::kDecode16, 0, 1}, {W4Tile::kMid32, 0, 1},
      {W4Tile::kLarge, 0, 1},     {W4Tile::kDecode8, 3, 1},  {W4Tile::kDecode16, 3, 1},
      {W4Tile::kMid32, 3, 1},     {W4Tile::kLarge, 3, 1},    {W4Tile::kDecode8, 0, 2},
      {W4Tile::kDecode8, 3, 3},   {W4Tile::kDecode16, 0, 8}, {W4Tile::kDecode16, 8, 4},
      {W4Tile::kWgmma, 0, 1},     {W4Tile::kWgmma, 3, 1},    {W4Tile::kWgmma, 0, 1, 32},
      {W4Tile::kWgmma, 3, 1, 32},
  };
  for (const Variant& v : variants) {
    const W4Tile tile = v.tile;
    const int max_ctas = v.max_ctas;
    SCOPED_TRACE("tile " + w4_tile_name(tile) + " max_ctas " + std::to_string(max_ctas) +
                 " k_split " + std::to_string(v.k_split) + " wgmma_tokens " +
                 std::to_string(v.wgmma_tokens));
    GroupedGemmArgs args;
    args.scheme = w4a16_scheme(c.format);
    args.epilogue.kind = c.epi;
    args.num_experts = e;
    args.rows = c.m;
    args.n = n;
    args.k = k;
    args.expert_offsets = d_offsets.ptr;
    const bool wgmma = tile == W4Tile::kWgmma;
    args.a = wgmma ? d_a_wgmma.ptr : d_a.ptr;
    args.row_index = c.gather && !wgmma ? d_row_index.ptr : nullptr;
    args.w = d_w.ptr;
    args.w_scales = d_s.ptr;
    args.w_expert_scale = c.format == W4Format::kNVFP4 ? d_alpha.ptr : nullptr;
    args.epilogue.bias = c.bias ? d_bias.ptr : nullptr;
    args.epilogue.row_scale = c.row_scale ? d_row_scale.ptr : nullptr;
    args.out = d_out.ptr;
    const GemmConfig config =
        w4_config(tile, e, c.m, n, k, gated, max_ctas, v.k_split, v.wgmma_tokens);
    std::vector<std::uint16_t> first;
    for (int rep = 0; rep < 2; ++rep) {
      ASSERT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2),
                cudaSuccess);  // NaN poison
      grouped_gemm(args, config);
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
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(ref.size()); ++i) {
      const float v = bf16_to_float(first[i]);
      if (std::isnan(v)) {
        ++unwritten;
        continue;
      }
      num += (v - ref[i]) * (v - ref[i]);
      den += ref[i] * ref[i];
    }
    EXPECT_EQ(unwritten, 0);
    for (std::size_t i = ref.size(); i < first.size(); ++i)
      ASSERT_EQ(first[i], 0xFFFF) << "row past offsets[E] written at " << i;
    if (c.m > 0) {
      const double rel = std::sqrt(num / std::max(den, 1e-300));
      EXPECT_LT(rel, 4e-3);
      EXPECT_GT(den, 0.0);
    }
  }
}

class W4A16Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(W4A16Gemm, MatchesFloat64Reference) {
  MOEKIT_REQUIRE_GPU();
  run_case(GetParam(), test_seed());
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (W4Format f : {W4Format::kNVFP4, W4Format::kMXFP4}) {
    for (int m : {0, 1, 3, 64, 129, 1024}) {
      cases.push_back({f, EpilogueKind::kNone, m, Routing::kUniform, false, false, false});
      cases.push_back({f, EpilogueKind::kSiluAndMul, m, Routing::kUniform, true, false, false});
    }
    cases.push_back({f, EpilogueKind::kSwigluOai, 129, Routing::kUniform, true, true, false});
    cases.push_back({f, EpilogueKind::kNone, 200, Routing::kOneExpert, true, true, true});
    cases.push_back({f, EpilogueKind::kSiluAndMul, 77, Routing::kSkipEven, false, true, true});
    cases.push_back({f, EpilogueKind::kSwigluOai, 3, Routing::kOneExpert, false, true, true});
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(All, W4A16Gemm, ::testing::ValuesIn(all_cases()));

// Every (code, scale byte) pair through the kernel's dequant: identity
// activations make each output element one dequantized weight, which is exact
// in bf16 (so compared bitwise). The large mma.sync tile and the wgmma tile
// (its dequant feeds the wgmma A registers; K-permuted activations).
TEST(W4A16Gemm, DequantIsExactForEveryCodeAndScale) {
  MOEKIT_REQUIRE_GPU();
  for (W4Format f : {W4Format::kNVFP4, W4Format::kMXFP4}) {
    SCOPED_TRACE(w4_format_name(f));
    const int sfv = w4_scale_block(f);
    const std::int64_t n = 256, k = 64;
    std::vector<u8> codes(n * k / 2), scales(n * k / sfv);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t kk = 0; kk < k; ++kk)
        codes[r * k / 2 + kk / 2] |= static_cast<u8>(((kk + r) % 16) << ((kk % 2) * 4));
    for (std::size_t i = 0; i < scales.size(); ++i) {
      int b = static_cast<int>(i % 256);
      if (f == W4Format::kNVFP4 && (b & 0x7F) == 0x7F) b = 0;         // NaN scales
      if (f == W4Format::kMXFP4) b = 66 + static_cast<int>(i % 127);  // [2^-61, 2^65]
      scales[i] = static_cast<u8>(b);
    }
    std::vector<u8> sc(codes.size()), ss(scales.size());
    w4a16_shuffle_weights(f, 1, n, k, false, codes.data(), scales.data(), sc.data(), ss.data());
    std::vector<std::uint16_t> a(k * k, 0);
    for (std::int64_t i = 0; i < k; ++i) a[i * k + i] = 0x3F80;  // 1.0
    DeviceArray<std::int32_t> d_offsets(std::vector<std::int32_t>{0, static_cast<int>(k)});
    DeviceArray<std::uint16_t> d_a(a), d_a_wgmma(to_wgmma_k_order(a, k, k)), d_out(k * n);
    DeviceArray<u8> d_w(sc), d_s(ss);
    GroupedGemmArgs args;
    args.scheme = w4a16_scheme(f);
    args.num_experts = 1;
    args.rows = k;
    args.n = n;
    args.k = k;
    args.expert_offsets = d_offsets.ptr;
    args.a = d_a.ptr;
    args.w = d_w.ptr;
    args.w_scales = d_s.ptr;
    args.out = d_out.ptr;
    for (W4Tile tile : {W4Tile::kLarge, W4Tile::kWgmma}) {
      SCOPED_TRACE(w4_tile_name(tile));
      const bool wgmma = tile == W4Tile::kWgmma;
      args.a = wgmma ? d_a_wgmma.ptr : d_a.ptr;
      ASSERT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);
      grouped_gemm(args, w4_config(tile, 1, k, n, k, false));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<std::uint16_t> out = d_out.download();
      int bad = 0;
      for (std::int64_t t = 0; t < k; ++t) {
        for (std::int64_t r = 0; r < n; ++r) {
          const int code = static_cast<int>((t + r) % 16);
          const double expect = e2m1_value(code) * scale_value(f, scales[r * (k / sfv) + t / sfv]);
          const float got = bf16_to_float(out[t * n + r]);
          if (got != static_cast<float>(expect) && bad++ < 5)
            ADD_FAILURE() << "row " << r << " k " << t << " code " << code << " scale byte "
                          << int(scales[r * (k / sfv) + t / sfv]) << ": got " << got << " want "
                          << expect;
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// Host-side checks only (nothing is launched): runs without a device too.
TEST(W4A16Gemm, ValidationNamesTheArgument) {
  GroupedGemmArgs args;
  args.scheme = GemmScheme::kW4A16NVFP4;
  args.num_experts = 2;  // null offsets are only legal for the dense E == 1 case
  args.rows = 1;
  args.n = 16;
  args.k = 96;
  GemmConfig config = w4_config(W4Tile::kMid32, 2, 1, 16, 64, false);
  try {
    grouped_gemm(args, config);
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k: expected"), std::string::npos) << e.what();
  }
  args.k = 64;
  args.n = 20;
  try {
    grouped_gemm(args, config);
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n: expected"), std::string::npos) << e.what();
  }
  args.n = 16;
  try {
    grouped_gemm(args, config);  // null pointers
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert_offsets"), std::string::npos) << e.what();
  }
  config.k_split = 9;
  try {
    grouped_gemm(args, config);
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.k_split: expected"), std::string::npos)
        << e.what();
  }
}

// The automatic split (k_split = 0) on a shape where it engages (2 rows on 2 of
// 8 experts: 32 units for hundreds of CTA slots -> 2-CTA clusters): bitwise
// reproducible and within the float64 bound, like the unsplit kernel.
TEST(W4A16Gemm, AutoSplitKMatchesUnsplit) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int e = 8;
  const std::int64_t n = 512, k = 4096;
  const W4Weights w = random_weights(rng, W4Format::kNVFP4, e, n, k, false);
  std::vector<std::int32_t> offsets = {0, 0, 1, 1, 1, 1, 2, 2, 2};  // rows 0, 1 -> experts 1, 5
  std::vector<std::uint16_t> a(2 * k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : a) v = float_to_bf16(normal(rng));
  DeviceArray<std::int32_t> d_offsets(offsets);
  DeviceArray<std::uint16_t> d_a(a), d_out(2 * n);
  DeviceArray<u8> d_w(w.shuffled_codes), d_s(w.shuffled_scales);
  DeviceArray<float> d_alpha(w.alpha);
  GroupedGemmArgs args;
  args.scheme = w4a16_scheme(W4Format::kNVFP4);
  args.num_experts = e;
  args.rows = 2;
  args.n = n;
  args.k = k;
  args.expert_offsets = d_offsets.ptr;
  args.a = d_a.ptr;
  args.w = d_w.ptr;
  args.w_scales = d_s.ptr;
  args.w_expert_scale = d_alpha.ptr;
  args.out = d_out.ptr;
  std::vector<std::vector<std::uint16_t>> outs;
  for (int ks : {1, 0, 0}) {
    ASSERT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);
    grouped_gemm(args, w4_config(W4Tile::kDecode8, e, 2, n, k, false, 0, ks));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    outs.push_back(d_out.download());
  }
  EXPECT_EQ(outs[1], outs[2]) << "repeated split runs differ";
  const int expert_of_row[2] = {1, 5};
  for (int o = 0; o < 2; ++o) {
    SCOPED_TRACE(o == 0 ? "k_split 1" : "k_split auto");
    double num = 0, den = 0;
    for (int r = 0; r < 2; ++r) {
      for (std::int64_t j = 0; j < n; ++j) {
        double ref = 0;
        for (std::int64_t kk = 0; kk < k; ++kk)
          ref += w.deq(expert_of_row[r], j, kk) * bf16_to_float(a[r * k + kk]);
        const double got = bf16_to_float(outs[o][r * n + j]);
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    }
    EXPECT_GT(den, 0.0);
    EXPECT_LT(std::sqrt(num / den), 4e-3);
  }
}

// GEMM2 launched as a programmatic dependent of GEMM1 (overlap_previous): it
// must wait for GEMM1's output (poisoned with NaN before every GEMM1), on a
// stream and in a captured graph, for decode8 (unsplit and 2-CTA cluster),
// decode16 (its 64 x 16 configuration here) and mid32 (which ignores the flag:
// a plain launch); the result must be bitwise the plain launch's, which is
// checked against float64.
// The 64-row decode tile's short-K form (2 K-warps, 8 CTAs per SM; the rules take it without an
// epilogue for K <= 2048 when the units fill its CTA slots, e.g. GEMM2 of deepseek-v3): 64
// experts x one row, N = 2048 (2048 units), K = 1024, with bias and row_scale (GEMM2's fields),
// both formats, the rules' config and decode8. Against float64 of the dequantized weights: rel L2 < 4e-3;
// repeated runs bitwise equal; rows past offsets[E] keep their poison.
TEST(W4A16Gemm, ShortKWideDecodeMatchesFloat64) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int e = 64, m = 64, extra = 5;
  const std::int64_t n = 2048, k = 1024;
  for (const W4Format f : {W4Format::kNVFP4, W4Format::kMXFP4}) {
    SCOPED_TRACE(w4_format_name(f));
    const W4Weights w = random_weights(rng, f, e, n, k, false);
    std::vector<std::int32_t> offsets(e + 1);
    for (int i = 0; i <= e; ++i) offsets[i] = i;  // one row per expert
    std::vector<std::uint16_t> x((m + extra) * k);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = float_to_bf16(normal(rng));
    std::vector<float> bias(e * n), row_scale(m + extra);
    for (auto& v : bias) v = normal(rng);
    for (auto& v : row_scale) v = 0.25f + std::fabs(normal(rng));
    DeviceArray<std::int32_t> d_offsets(offsets);
    DeviceArray<std::uint16_t> d_x(x), d_y((m + extra) * n);
    DeviceArray<u8> d_w(w.shuffled_codes), d_s(w.shuffled_scales);
    DeviceArray<float> d_alpha(w.alpha.empty() ? std::vector<float>(e, 1.0f) : w.alpha),
        d_bias(bias), d_rs(row_scale);
    std::vector<double> ref(m * n);
    for (int r = 0; r < m; ++r)
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t kk = 0; kk < k; ++kk)
          acc += w.deq(r, j, kk) * bf16_to_float(x[r * k + kk]);
        ref[r * n + j] = (acc + bias[r * n + j]) * row_scale[r];
      }
    for (const bool by_rules : {true, false}) {
      SCOPED_TRACE(by_rules ? "the rules' config" : "decode8");
      GroupedGemmArgs a;
      a.scheme = w4a16_scheme(f);
      a.epilogue.kind = EpilogueKind::kNone;
      a.num_experts = e;
      a.rows = m + extra;
      a.n = n;
      a.k = k;
      a.expert_offsets = d_offsets.ptr;
      a.a = d_x.ptr;
      a.w = d_w.ptr;
      a.w_scales = d_s.ptr;
      a.w_expert_scale = f == W4Format::kNVFP4 ? d_alpha.ptr : nullptr;
      a.epilogue.bias = d_bias.ptr;
      a.epilogue.row_scale = d_rs.ptr;
      a.out = d_y.ptr;
      std::vector<std::uint16_t> first;
      for (int rep = 0; rep < 2; ++rep) {
        ASSERT_EQ(cudaMemset(d_y.ptr, 0xFF, d_y.count * 2), cudaSuccess);
        const GemmConfig config =
            by_rules ? tuning::sm90::gemm_config(a.scheme, e, m + extra, n, k, false, true)
                     : w4_config(W4Tile::kDecode8, e, m + extra, n, k, false);
        EXPECT_TRUE(config.decode_short_k) << config.str();
        grouped_gemm(a, config);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const auto out = d_y.download();
        if (rep == 1) {
          EXPECT_EQ(out, first) << "repeated runs differ";
          break;
        }
        first = out;
        double num = 0, den = 0;
        for (std::size_t i = 0; i < ref.size(); ++i) {
          const double d = bf16_to_float(out[i]) - ref[i];
          num += d * d;
          den += ref[i] * ref[i];
        }
        EXPECT_LT(std::sqrt(num / den), 4e-3);
        int clobbered = 0;
        for (std::size_t i = ref.size(); i < out.size(); ++i) clobbered += out[i] != 0xFFFF;
        EXPECT_EQ(clobbered, 0);
      }
    }
  }
}

TEST(W4A16Gemm, OverlapPreviousWaitsForThePreviousKernel) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int e = 8, m = 24;
  const std::int64_t h = 2048, inter = 512;
  const W4Weights w1 = random_weights(rng, W4Format::kNVFP4, e, 2 * inter, h, true);
  const W4Weights w2 = random_weights(rng, W4Format::kNVFP4, e, h, inter, false);
  std::vector<std::int32_t> offsets(e + 1, 0);
  std::uniform_int_distribution<int> pick(0, e - 1);
  for (int r = 0; r < m; ++r) offsets[pick(rng) + 1]++;
  for (int i = 0; i < e; ++i) offsets[i + 1] += offsets[i];
  std::vector<std::uint16_t> x(m * h);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = float_to_bf16(normal(rng));
  DeviceArray<std::int32_t> d_offsets(offsets);
  DeviceArray<std::uint16_t> d_x(x), d_act(m * inter), d_y(m * h);
  DeviceArray<u8> d_w1(w1.shuffled_codes), d_s1(w1.shuffled_scales);
  DeviceArray<u8> d_w2(w2.shuffled_codes), d_s2(w2.shuffled_scales);
  DeviceArray<float> d_alpha1(w1.alpha), d_alpha2(w2.alpha);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  GroupedGemmArgs g1;
  g1.scheme = GemmScheme::kW4A16NVFP4;
  g1.epilogue.kind = EpilogueKind::kSiluAndMul;
  g1.num_experts = e;
  g1.rows = m;
  g1.n = 2 * inter;
  g1.k = h;
  g1.expert_offsets = d_offsets.ptr;
  g1.a = d_x.ptr;
  g1.w = d_w1.ptr;
  g1.w_scales = d_s1.ptr;
  g1.w_expert_scale = d_alpha1.ptr;
  g1.out = d_act.ptr;
  g1.stream = stream;
  GroupedGemmArgs g2 = g1;
  g2.epilogue.kind = EpilogueKind::kNone;
  g2.n = h;
  g2.k = inter;
  g2.a = d_act.ptr;
  g2.w = d_w2.ptr;
  g2.w_scales = d_s2.ptr;
  g2.w_expert_scale = d_alpha2.ptr;
  g2.out = d_y.ptr;
  const GemmConfig config1 = tuning::sm90::gemm_config(g1.scheme, e, m, 2 * inter, h, true, true);
  auto layer = [&](const GroupedGemmArgs& second, const GemmConfig& config2) {
    EXPECT_EQ(cudaMemsetAsync(d_act.ptr, 0xFF, d_act.count * 2, stream), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(d_y.ptr, 0xFF, d_y.count * 2, stream), cudaSuccess);
    grouped_gemm(g1, config1);
    grouped_gemm(second, config2);
  };
  struct Variant {
    W4Tile tile;
    int k_split;
  };
  for (const Variant v : {Variant{W4Tile::kDecode8, 1}, Variant{W4Tile::kDecode8, 2},
                          Variant{W4Tile::kDecode16, 0}, Variant{W4Tile::kMid32, 0}}) {
    SCOPED_TRACE("tile " + w4_tile_name(v.tile) + " k_split " + std::to_string(v.k_split));
    const GroupedGemmArgs plain = g2;
    const GemmConfig config2 = w4_config(v.tile, e, m, h, inter, false, 0, v.k_split);
    layer(plain, config2);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::vector<std::uint16_t> act = d_act.download(), ref_out = d_y.download();
    // The plain launch against float64 (GEMM2 of the downloaded activations).
    double num = 0, den = 0;
    for (int r = 0; r < m; ++r) {
      int ex = 0;
      while (offsets[ex + 1] <= r) ++ex;
      for (std::int64_t j = 0; j < h; ++j) {
        double ref = 0;
        for (std::int64_t kk = 0; kk < inter; ++kk)
          ref += w2.deq(ex, j, kk) * bf16_to_float(act[r * inter + kk]);
        const double got = bf16_to_float(ref_out[r * h + j]);
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    }
    ASSERT_GT(den, 0.0);
    EXPECT_LT(std::sqrt(num / den), 4e-3);
    GroupedGemmArgs overlapped = plain;
    overlapped.overlap_previous = true;
    for (int rep = 0; rep < 3; ++rep) {
      layer(overlapped, config2);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(d_y.download(), ref_out) << "stream launch, rep " << rep;
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    layer(overlapped, config2);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int rep = 0; rep < 3; ++rep) {
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(d_y.download(), ref_out) << "graph replay " << rep;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace moekit::gemm
