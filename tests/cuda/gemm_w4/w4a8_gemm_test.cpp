// W4A8 grouped GEMM (grouped_gemm scheme kW4A8MXFP4; w4a8/sm90_w4a8_weight_layout.hpp): the
// weight preparation (host: round trip, exactness refusals) and the SM90 kernel against a float64 reference of the MXFP4 weights times the e4m3
// activations (GPU, skips without a device). Bound: relative L2 < 4e-3 (the weights and the e4m3
// activations enter the MMA exactly; what remains is the fp32 sum of 256-deep tensor-core
// partials and the final bf16 rounding, RMS ~ 2^-9 / sqrt 3 ~ 1.1e-3). Seeds are logged
// (MOEKIT_TEST_SEED reproduces a run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemm_w4/w4a16_test_util.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm/w4a8/sm90_w4a8_weight_layout.hpp"

namespace moekit::gemm {
namespace {

using namespace w4a16_test;

// MXFP4 test weights whose rows are W4A8-exact: random_weights draws scales in [115, 130] (16
// binades); W4A8 holds 15, so 115 becomes 116.
W4Weights w4a8_weights(std::mt19937& rng, int e, std::int64_t n, std::int64_t k, bool gated) {
  W4Weights w = random_weights(rng, W4Format::kMXFP4, e, n, k, gated);
  for (auto& s : w.scales) s = std::max<u8>(s, 116);
  return w;
}

std::vector<float> prepare(const W4Weights& w, bool gated, std::vector<u8>& pc,
                           std::vector<u8>& ps) {
  pc.assign(w.codes.size(), 0);
  ps.assign(w.scales.size(), 0);
  std::vector<float> rs(static_cast<std::size_t>(w.e * w.n));
  const std::string why = w4a8_prepare_weights(w.e, w.n, w.k, gated, w.codes.data(),
                                               w.scales.data(), pc.data(), ps.data(), rs.data());
  EXPECT_EQ(why, "");
  return rs;
}

TEST(W4A8Prepare, RoundTripIsIdentity) {
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (bool gated : {false, true}) {
    W4Weights w = w4a8_weights(rng, 3, 48, 192, gated);
    // A row whose scales span exactly 15 binades (the widest exact span), and an all-zero block
    // with an out-of-range scale (ignored).
    for (int b = 0; b < 6; ++b) w.scales[7 * 6 + b] = static_cast<u8>(100 + 14 * (b % 2));
    for (int x = 0; x < 16; ++x) w.codes[(9 * 192 / 2) + x] = 0x88;  // -0 codes
    w.scales[9 * 6] = 250;
    std::vector<u8> pc, ps, codes(w.codes.size()), scales(w.scales.size());
    const std::vector<float> rs = prepare(w, gated, pc, ps);
    w4a8_unprepare_weights(3, 48, 192, gated, pc.data(), ps.data(), rs.data(), codes.data(),
                           scales.data());
    EXPECT_EQ(codes, w.codes);
    for (std::size_t i = 0; i < scales.size(); ++i) {
      bool nonzero = false;
      for (int x = 0; x < 16; ++x) nonzero |= (w.codes[i * 16 + x] & 0x77) != 0;
      if (nonzero) {
        ASSERT_EQ(scales[i], w.scales[i]) << "scale " << i;
      } else {
        ASSERT_EQ(scales[i], 127) << "scale " << i;
      }
    }
  }
}

TEST(W4A8Prepare, RefusesInexactScales) {
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  W4Weights w = w4a8_weights(rng, 2, 32, 128, false);  // exact everywhere but the planted rows
  std::vector<u8> pc(w.codes.size()), ps(w.scales.size());
  std::vector<float> rs(64);
  auto why = [&] {
    return w4a8_prepare_weights(2, 32, 128, false, w.codes.data(), w.scales.data(), pc.data(),
                                ps.data(), rs.data());
  };
  const std::vector<u8> scales = w.scales;
  // Expert 1, row 5 (source row 37): nonzero blocks with scales 100 and 115 (16 binades).
  for (int x = 0; x < 64; ++x) w.codes[37 * 64 + x] |= 0x01;
  w.scales[37 * 4] = 100;
  for (int b = 1; b < 4; ++b) w.scales[37 * 4 + b] = 115;
  std::string r = why();
  EXPECT_NE(r.find("expert 1 row 5"), std::string::npos) << r;
  EXPECT_NE(r.find("16 binades"), std::string::npos) << r;
  w.scales = scales;
  EXPECT_EQ(why(), "");
  // NaN scales are refused even on an all-zero block (the reference gives NaN for the block).
  w.scales[3] = 0xFF;
  for (int x = 0; x < 16; ++x) w.codes[3 * 16 + x] = 0;
  r = why();
  EXPECT_NE(r.find("expert 0 row 0 block 3"), std::string::npos) << r;
  EXPECT_NE(r.find("NaN"), std::string::npos) << r;
  // Experts are named from first_expert (callers that prepare one slice at a time).
  r = w4a8_prepare_weights(2, 32, 128, false, w.codes.data(), w.scales.data(), pc.data(),
                           ps.data(), rs.data(), 5);
  EXPECT_NE(r.find("expert 5 row 0"), std::string::npos) << r;
  EXPECT_THROW(w4a8_prepare_weights(1, 24, 128, false, w.codes.data(), w.scales.data(), pc.data(),
                                    ps.data(), rs.data()),
               Error);
}

// A finite e4m3 byte (no NaN: 0x7F / 0xFF).
u8 random_e4m3(std::mt19937& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (;;) {
    const int b = byte(rng);
    if ((b & 0x7F) != 0x7F) return static_cast<u8>(b);
  }
}

struct Case {
  const char* name;
  EpilogueKind epi;
  std::int64_t n, k;
  std::vector<int> rows;  // per expert
  // repeat: A's rows drawn with repeats from a smaller set (what a MoE layer's gather of routed
  // tokens produces; the kernel itself reads rows in order).
  bool repeat, bias, row_scale;
  int max_ctas;
};

void run_case(const Case& c, std::uint32_t seed) {
  SCOPED_TRACE(std::string("case ") + c.name + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int e = static_cast<int>(c.rows.size());
  const bool gated = c.epi != EpilogueKind::kNone;
  const std::int64_t n = c.n, k = c.k, width = gated ? n / 2 : n;
  const W4Weights w = w4a8_weights(rng, e, n, k, gated);
  std::vector<u8> pc, ps;
  const std::vector<float> rs = prepare(w, gated, pc, ps);

  std::vector<std::int32_t> offsets(e + 1, 0);
  for (int x = 0; x < e; ++x) offsets[x + 1] = offsets[x] + c.rows[x];
  const int m = offsets[e];
  std::vector<int> expert_of(m);
  for (int x = 0; x < e; ++x)
    for (int r = offsets[x]; r < offsets[x + 1]; ++r) expert_of[r] = x;
  const int a_rows = std::max(1, c.repeat ? m / 2 + 1 : m);
  std::vector<u8> a(static_cast<std::size_t>(a_rows) * k);
  for (auto& v : a) v = random_e4m3(rng);
  std::vector<float> a_scale(a_rows);
  for (auto& v : a_scale) v = std::uniform_real_distribution<float>(0.001f, 0.01f)(rng);
  std::vector<std::int32_t> row_index(std::max(1, m));
  std::uniform_int_distribution<int> src(0, a_rows - 1);
  for (int r = 0; r < m; ++r) row_index[r] = c.repeat ? src(rng) : r;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> bias(e * n), row_scale(std::max(1, m));
  for (auto& v : bias) v = normal(rng);
  for (auto& v : row_scale) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);

  const double limit = 7.0, salpha = 1.702;
  std::vector<double> ref(static_cast<std::size_t>(m) * width), col(n);
  std::vector<double> wdeq(static_cast<std::size_t>(e) * n * k);
  for (int x = 0; x < e; ++x)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t kk = 0; kk < k; ++kk) wdeq[(x * n + j) * k + kk] = w.deq(x, j, kk);
  for (int r = 0; r < m; ++r) {
    const int x = expert_of[r], s = row_index[r];
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t kk = 0; kk < k; ++kk)
        acc += wdeq[(x * n + j) * k + kk] * e4m3_value(a[s * k + kk]);
      col[j] = acc * a_scale[s] + (c.bias ? bias[x * n + j] : 0.0);
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

  // The kernel reads A's rows in order (TMA): the caller gathers the routed rows and their scales.
  std::vector<u8> ga(static_cast<std::size_t>(std::max(1, m)) * k);
  std::vector<float> gscale(std::max(1, m));
  for (int r = 0; r < m; ++r) {
    std::copy_n(a.begin() + static_cast<std::int64_t>(row_index[r]) * k, k,
                ga.begin() + static_cast<std::int64_t>(r) * k);
    gscale[r] = a_scale[row_index[r]];
  }
  DeviceArray<std::int32_t> d_offsets(offsets);
  DeviceArray<u8> d_a(ga), d_w(pc), d_s(ps);
  DeviceArray<float> d_as(gscale), d_rs(rs), d_bias(bias), d_row_scale(row_scale);
  const int extra_rows = 3;  // must stay poisoned
  DeviceArray<std::uint16_t> d_out((m + extra_rows) * width);
  GroupedGemmArgs args;
  args.epilogue.kind = c.epi;
  args.num_experts = e;
  args.rows = m;
  args.n = n;
  args.k = k;
  args.expert_offsets = d_offsets.ptr;
  args.a = d_a.ptr;
  args.a_scales = d_as.ptr;
  args.w = d_w.ptr;
  args.w_scales = d_s.ptr;
  args.w_row_scale = d_rs.ptr;
  args.epilogue.bias = c.bias ? d_bias.ptr : nullptr;
  args.epilogue.row_scale = c.row_scale ? d_row_scale.ptr : nullptr;
  args.out = d_out.ptr;
  args.scheme = GemmScheme::kW4A8MXFP4;
  // The rules' config (the token tile follows the rows per expert), on a capped grid if asked.
  GemmConfig config = tuning::sm90::gemm_config(args.scheme, e, m, n, k, gated, true);
  config.max_ctas = c.max_ctas;
  SCOPED_TRACE(config.str());
  std::vector<std::uint16_t> first;
  for (int rep = 0; rep < 2; ++rep) {
    ASSERT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);  // NaN poison
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
  for (std::size_t i = 0; i < ref.size(); ++i) {
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
  if (m > 0) {
    const double rel = std::sqrt(num / std::max(den, 1e-300));
    EXPECT_LT(rel, 4e-3);
    EXPECT_GT(den, 0.0);
  }
}

class W4A8Gemm : public ::testing::TestWithParam<Case> {};

TEST_P(W4A8Gemm, MatchesFloat64Reference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  run_case(GetParam(), seed);
}

// (The tile follows the rows per expert: 128 tokens, 160 for 96..160 rows.)
// k = 192: one full 128-wide stage and a one-chunk stage; 320 / 1024 longer chains; n = 272: a
// partial 128-row CTA tile; experts with 0, 1, 32 (narrow tail), 129 (128 + a 1-row tail) and 300
// rows; all rows to one expert; M = 1; a 3-CTA grid (many units per CTA, the rings cross units).
const Case kCases[] = {
    {"plain", EpilogueKind::kNone, 80, 320, {3, 0, 129, 1, 32, 40}, false, false, false, 0},
    {"plain_repeat_bias", EpilogueKind::kNone, 272, 192, {0, 300, 7, 0, 64, 2}, true, true, true, 0},
    {"silu", EpilogueKind::kSiluAndMul, 112, 1024, {5, 129, 0, 33, 200}, true, false, true, 0},
    {"swiglu_bias", EpilogueKind::kSwigluOai, 2 * 136, 192, {17, 0, 140, 1}, true, true, false, 0},
    {"one_expert", EpilogueKind::kSiluAndMul, 64, 448, {0, 0, 257, 0}, false, true, false, 0},
    {"m1", EpilogueKind::kNone, 48, 64, {0, 1, 0}, true, false, true, 0},
    {"capped_grid",
     EpilogueKind::kSiluAndMul,
     2 * 80,
     576,
     {90, 130, 3, 0, 260, 31},
     true,
     true,
     true,
     3},
    {"empty", EpilogueKind::kNone, 32, 128, {0, 0, 0}, false, false, false, 0},
    // 96..160 rows per expert: the 160-token tile (161 rows: a 1-row second tile at N = 160).
    {"tile160", EpilogueKind::kSiluAndMul, 2 * 64, 704, {100, 150, 161, 0, 130}, true, true, true, 0},
    {"tile160_capped", EpilogueKind::kNone, 96, 192, {120, 97, 140}, false, false, true, 2},
};
INSTANTIATE_TEST_SUITE_P(All, W4A8Gemm, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(W4A8Gemm, ValidationNamesTheArgument) {
  GroupedGemmArgs args;
  args.scheme = GemmScheme::kW4A8MXFP4;
  GemmConfig config;
  config.kernel = GemmKernel::kWgmma;
  config.tokens = 128;
  args.num_experts = 1;
  args.rows = 4;
  args.n = 16;
  args.k = 100;
  auto message = [&] {
    try {
      grouped_gemm(args, config);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message().find("k: expected"), std::string::npos) << message();
  args.k = 128;
  EXPECT_NE(message().find("a:"), std::string::npos) << message();
  // Never dereferenced: every call below throws before a launch (no GPU needed).
  alignas(16) static u8 buf[4096];
  args.a = buf;
  args.w = buf;
  args.out = buf;
  EXPECT_NE(message().find("a_scale"), std::string::npos) << message();
  args.a_scales = reinterpret_cast<const float*>(buf);
  EXPECT_NE(message().find("w_scales"), std::string::npos) << message();  // null
  args.w_scales = buf + 8;
  EXPECT_NE(message().find("w_scales"), std::string::npos) << message();  // 8-byte aligned
  args.w_scales = buf;
  EXPECT_NE(message().find("w_row_scale"), std::string::npos) << message();
  args.lda = 136;
  EXPECT_NE(message().find("lda"), std::string::npos) << message();
  args.lda = 0;
  args.w_row_scale = reinterpret_cast<const float*>(buf);
  args.row_index = reinterpret_cast<const std::int32_t*>(buf);  // rows are read in order
  EXPECT_NE(message().find("row_index"), std::string::npos) << message();
  args.row_index = nullptr;
  args.ldo = 8;
  EXPECT_NE(message().find("ldo"), std::string::npos) << message();
  args.ldo = 0;
  args.epilogue.kind = EpilogueKind::kSwigluOai;
  args.epilogue.swiglu_limit = INFINITY;
  EXPECT_NE(message().find("swiglu_limit"), std::string::npos) << message();
  args.epilogue.swiglu_limit = 7.0f;
  args.epilogue.kind = static_cast<EpilogueKind>(9);
  args.rows = 0;  // checked before the rows == 0 early return
  EXPECT_NE(message().find("epilogue"), std::string::npos) << message();
  args.epilogue.kind = EpilogueKind::kNone;
  config.tokens = 32;  // not a W4A8 token tile
  EXPECT_NE(message().find("config.tokens"), std::string::npos) << message();
  config.tokens = 128;
  config.kernel = GemmKernel::kW4Large;  // a W4A16 kernel
  EXPECT_NE(message().find("config.kernel"), std::string::npos) << message();
}

}  // namespace
}  // namespace moekit::gemm
