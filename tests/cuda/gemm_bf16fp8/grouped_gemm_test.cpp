// Grouped expert GEMMs (bf16, fp8 block) against a float64 CPU reference.
// Bounds (||out - ref|| / ||ref||): both GEMMs store bf16, whose rounding alone gives ~1.1e-3 RMS
// relative error; fp32 accumulation adds far less. Bound 5e-3 for both (the fp8 reference uses the
// dequantized operands, so quantization error is not counted). Rows past expert_offsets[E] must
// keep their poison; rows below must all be written (finite).
#include "cuda/gemm/grouped_gemm.hpp"

#include "cuda/tuning/sm90_tuning.hpp"

#include <gmock/gmock.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/gemm_bf16fp8/gemm_test_util.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"

namespace moekit {
namespace {

using gemm::GroupedGemmArgs;
using gemm::GemmScheme;
using namespace gemm_test;

constexpr double kGemmBound = 5e-3;
constexpr std::uint16_t kPoison = 0xffff;  // bf16 NaN

struct Case {
  std::vector<int> counts;  // rows per expert
  int n, k;
  int extra_rows;  // capacity beyond the used rows (must stay untouched)
  int lda_pad = 0;  // A row stride k + lda_pad (the pad holds NaN: reading it would show)
  int ldd_pad = 0;  // D row stride n + ldd_pad (the pad must stay untouched)
};

// The element bytes of `compact` ([rows, k] of `elem`-byte values) in rows of stride k + pad,
// the pad filled with 0xff bytes (NaN in bf16 and in e4m3).
std::vector<std::uint8_t> pad_rows(const std::uint8_t* compact, int rows, int k, int pad, int elem) {
  const std::size_t row = static_cast<std::size_t>(k) * elem, padded = row + static_cast<std::size_t>(pad) * elem;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows) * padded, 0xff);
  for (int r = 0; r < rows; ++r) std::memcpy(&out[r * padded], compact + r * row, row);
  return out;
}

// bf16 bits of `values` as bytes, and the floats those bits hold.
void to_bf16_bytes(const std::vector<float>& values, std::vector<std::uint8_t>& bytes,
                   std::vector<float>& held) {
  bytes.resize(values.size() * 2);
  held.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t b = float_to_bf16(values[i]);
    std::memcpy(&bytes[2 * i], &b, 2);
    held[i] = bf16_to_float(b);
  }
}

// Runs one grouped GEMM of type t and kernel config on random data and checks it; the output's
// bits ([rows][ldd]) into *bits_out when given.
void run_case_config(GemmScheme t, const gemm::GemmConfig& config, const Case& c,
                     std::uint64_t seed, std::vector<std::uint16_t>* bits_out = nullptr) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " n " << c.n << " k " << c.k << " E "
                                    << c.counts.size() << " config " << config.str());
  const bool fp8 = t == GemmScheme::kFP8Block;
  const int E = static_cast<int>(c.counts.size());
  const auto off = offsets_of(c.counts);
  const int used = off[E];
  const int rows = used + c.extra_rows;
  const int lda = c.k + c.lda_pad, ldd = c.n + c.ldd_pad;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(rows) * c.k), b(static_cast<std::size_t>(E) * c.n * c.k);
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng) * 0.05f;

  DeviceArray<std::int32_t> d_off(off);
  const std::size_t out_elems = static_cast<std::size_t>(rows) * ldd;
  DeviceArray<std::uint16_t> d_out(out_elems);
  MOEKIT_TEST_CUDA(cudaMemset(d_out.get(), 0xff, out_elems * 2));
  std::vector<double> ref;
  GroupedGemmArgs args;
  args.num_experts = E;
  args.n = c.n;
  args.k = c.k;
  args.rows = rows;
  args.lda = lda;
  args.ldo = ldd;
  args.expert_offsets = d_off.get();
  args.out = d_out.get();
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(t, E);
  DeviceArray<std::uint8_t> d_ws(ws);
  args.workspace = d_ws.get();
  args.workspace_bytes = ws;
  args.scheme = t;

  if (!fp8) {
    std::vector<std::uint16_t> ha(a.size()), hb(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = bf16_to_float(ha[i] = float_to_bf16(a[i]));
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = bf16_to_float(hb[i] = float_to_bf16(b[i]));
    DeviceArray<std::uint8_t> da(
        pad_rows(reinterpret_cast<const std::uint8_t*>(ha.data()), rows, c.k, c.lda_pad, 2));
    DeviceArray<std::uint16_t> db(hb);
    args.a = da.get();
    args.w = db.get();
    gemm::grouped_gemm(args, config);
    MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
    ref = grouped_reference(a, b, off, c.n, c.k);
  } else {
    auto qa = quantize_act_1x128(a, rows, c.k);
    auto qb = quantize_weight_128x128(b, E, c.n, c.k);
    DeviceArray<std::uint8_t> da(pad_rows(qa.q.data(), rows, c.k, c.lda_pad, 1)), db(qb.q);
    DeviceArray<float> dsa(qa.scales), dsb(qb.scales);
    args.a = da.get();
    args.w = db.get();
    args.a_scales = dsa.get();
    args.w_scales = dsb.get();
    gemm::grouped_gemm(args, config);
    MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
    ref = grouped_reference(qa.dequant, qb.dequant, off, c.n, c.k);
  }
  const auto out_bits = d_out.download();
  std::vector<double> out(ref.size());
  int unwritten = 0, clobbered = 0;
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < ldd; ++j) {
      const std::uint16_t bits = out_bits[static_cast<std::size_t>(r) * ldd + j];
      if (r < used && j < c.n) {
        const double v = bf16_to_float(bits);
        out[static_cast<std::size_t>(r) * c.n + j] = v;
        unwritten += !std::isfinite(v);
      } else {
        clobbered += bits != kPoison;
      }
    }
  EXPECT_EQ(unwritten, 0) << "elements of used rows not written (NaN poison left)";
  EXPECT_EQ(clobbered, 0) << "elements past expert_offsets[E] or in the ldd pad written";
  if (used > 0) {
    const double err = rel_l2(out, ref);
    ::testing::Test::RecordProperty("rel_l2", std::to_string(err));
    EXPECT_LT(err, kGemmBound) << "rel L2 " << err;
  }
  if (bits_out != nullptr) *bits_out = out_bits;
}

// The config of `kernel` for a case: the tuning rules' choice of its tile / variant.
gemm::GemmConfig config_for(GemmScheme t, gemm::GemmKernel kernel, const Case& c) {
  const int e = static_cast<int>(c.counts.size());
  const int rows = offsets_of(c.counts)[e] + c.extra_rows;
  return tuning::sm90::gemm_config_for(t, kernel, e, rows, c.n, c.k, false, true);
}

// A wgmma config on the given tile.
gemm::GemmConfig wgmma_config(gemm::WgmmaTile tile) {
  gemm::GemmConfig config;
  config.kernel = gemm::GemmKernel::kWgmma;
  config.wgmma_tile = tile;
  return config;
}

// The wgmma tiles of a scheme (160r256: bf16 only).
std::vector<gemm::WgmmaTile> wgmma_tiles(GemmScheme t) {
  std::vector<gemm::WgmmaTile> v = {gemm::WgmmaTile::k128n, gemm::WgmmaTile::k144n,
                                    gemm::WgmmaTile::k160};
  if (t == GemmScheme::kBF16) v.push_back(gemm::WgmmaTile::k160r256);
  return v;
}

// Every kernel that runs the scheme on the same case.
void run_case(GemmScheme t, const Case& c, std::uint64_t seed) {
  for (auto kernel : {gemm::GemmKernel::kCutlassWide, gemm::GemmKernel::kCutlassNarrow,
                      gemm::GemmKernel::kCutlassSwapWide, gemm::GemmKernel::kDecode,
                      gemm::GemmKernel::kWgmma})
    if (gemm::gemm_kernel_runs(kernel, t)) run_case_config(t, config_for(t, kernel, c), c, seed);
}

class GroupedGemm : public ::testing::TestWithParam<GemmScheme> {
 protected:
  void SetUp() override {
    if (!gemm::grouped_gemm_available(GetParam(), gemm::GemmKernel::kCutlassWide))
      GTEST_SKIP() << "built without CUTLASS";
  }
};

TEST_P(GroupedGemm, EmptyExpertsAndPartialTiles) {
  MOEKIT_REQUIRE_GPU();
  // Expert 1 and 4 empty; N = 384 (partial 256-wide tile), rows not a multiple of 128.
  run_case(GetParam(), {{37, 0, 200, 1, 0, 129}, 384, 256, 5}, test_seed());
}

TEST_P(GroupedGemm, PartialScaleTileAlongN) {
  MOEKIT_REQUIRE_GPU();
  run_case(GetParam(), {{3, 70, 11}, 200, 384, 0}, test_seed());  // ceil(200/128) = 2 scale rows
}

TEST_P(GroupedGemm, SingleRow) {
  MOEKIT_REQUIRE_GPU();
  run_case(GetParam(), {{0, 0, 1, 0}, 256, 512, 3}, test_seed());
}

TEST_P(GroupedGemm, AllRowsToOneExpert) {
  MOEKIT_REQUIRE_GPU();
  run_case(GetParam(), {{0, 0, 0, 300, 0, 0, 0, 0}, 128, 256, 0}, test_seed());
}

TEST_P(GroupedGemm, NoRowsLeavesOutputUntouched) {
  MOEKIT_REQUIRE_GPU();
  run_case(GetParam(), {{0, 0, 0}, 128, 128, 17}, test_seed());
}

// Rows across tiles of every config: 161 rows = two 160-row swap_wide tiles, 130 = three 64-row
// narrow tiles; N = 200: a partial 128-row swap_wide weight tile (and a partial 128x128
// weight-scale tile for fp8); strided A (pad = NaN) and D (pad must stay untouched).
TEST_P(GroupedGemm, RowsAcrossSwapTilesStrided) {
  MOEKIT_REQUIRE_GPU();
  run_case(GetParam(), {{161, 65, 0, 130, 2}, 200, 384, 3, 128, 24}, test_seed());
}

TEST_P(GroupedGemm, MultiTileGrid) {
  MOEKIT_REQUIRE_GPU();
  // Several M and N tiles per expert and more tiles than SMs in total.
  run_case(GetParam(), {{300, 257, 511, 140}, 1024, 1024, 0}, test_seed());
}

// Every tile of the wgmma kernel: experts of 0, 1, 31 (a narrow tail), 33, 145 (144 + 1), 160,
// 161, 300 rows; N = 264 (N % 16 == 8: row g + 8 of the last 16-row tile past N; a partial CTA
// tile of 128 and 256 weight rows); strided A and D. bf16 also with a K tail (K = 200: the last
// 64-wide stage is partly out of bounds, zeros).
TEST_P(GroupedGemm, WgmmaEveryTileAcrossRowCounts) {
  MOEKIT_REQUIRE_GPU();
  const auto t = GetParam();
  const bool fp8 = t == GemmScheme::kFP8Block;
  const std::uint64_t seed = test_seed();
  for (const gemm::WgmmaTile tile : wgmma_tiles(t)) {
    SCOPED_TRACE(gemm::wgmma_tile_name(tile));
    run_case_config(t, wgmma_config(tile),
                    {{0, 1, 31, 33, 145, 160, 161, 300}, 264, 384, 5, 128, 16}, seed);
    if (!fp8) run_case_config(t, wgmma_config(tile), {{7, 0, 150, 33}, 128, 200, 0}, seed);
  }
}

// Token classes (each unit's wgmma N is the narrowest of 32 / 64 / 96 / 112 / 128 / 144 / 160
// that holds its rows): experts whose last unit falls on each side of every class edge, on every
// tile, over several CTA rounds (N 1024: 8 or 4 weight-row tiles per expert), a bf16 K tail.
// Against float64 (run_case_config), and the same bits as every unit on the whole tile
// (GemmConfig::token_classes false: columns are independent dot products, the class only drops the
// ones past the expert's rows).
TEST_P(GroupedGemm, WgmmaTokenClassesKeepTheBits) {
  MOEKIT_REQUIRE_GPU();
  const auto t = GetParam();
  const bool fp8 = t == GemmScheme::kFP8Block;
  const std::uint64_t seed = test_seed();
  const std::vector<int> counts = {1,  32, 33,  63,  64,  65,  95,  97,  112, 113,
                                   127, 128, 129, 143, 145, 159, 160, 0,   193, 305};
  const Case c{counts, 1024, fp8 ? 256 : 200, 3};
  for (const gemm::WgmmaTile tile : wgmma_tiles(t)) {
    SCOPED_TRACE(gemm::wgmma_tile_name(tile));
    std::vector<std::uint16_t> bits[2];
    for (int classes = 0; classes < 2; ++classes) {
      gemm::GemmConfig config = wgmma_config(tile);
      config.token_classes = classes != 0;
      run_case_config(t, config, c, seed, &bits[classes]);
    }
    EXPECT_TRUE(bits[0] == bits[1]) << "token classes change the bits";
  }
}

// The fp8 wgmma issue order (the warpgroups' stages in turn, the default, or in step) moves only
// when each warpgroup's MMAs start: the same bits either way, on every fp8 tile, with more units
// than SMs (each CTA carries the order across its units, narrow tails and empty experts among
// them; 16 weight-row tiles at N 2048) and with a one-stage K. The fp8 stages also wait on their
// scale barrier (the scale warp's arrivals), on every tile.
TEST(WgmmaGroupedGemm, Fp8IssueOrderKeepsTheBits) {
  MOEKIT_REQUIRE_GPU();
  if (!gemm::grouped_gemm_available(GemmScheme::kFP8Block, gemm::GemmKernel::kCutlassWide))
    GTEST_SKIP() << "built without CUTLASS";
  const std::uint64_t seed = test_seed();
  const std::vector<int> counts = {0, 1, 31, 300, 161, 145, 33, 420, 160};
  for (const gemm::WgmmaTile tile : wgmma_tiles(GemmScheme::kFP8Block)) {
    SCOPED_TRACE(gemm::wgmma_tile_name(tile));
    for (const Case& c : {Case{counts, 2048, 256, 3}, Case{counts, 1024, 128, 0}}) {
      std::vector<std::uint16_t> bits[2];
      for (int in_turn = 0; in_turn < 2; ++in_turn) {
        gemm::GemmConfig config = wgmma_config(tile);
        config.fp8_in_turn = in_turn != 0;
        run_case_config(GemmScheme::kFP8Block, config, c, seed, &bits[in_turn]);
      }
      EXPECT_TRUE(bits[0] == bits[1]) << "in turn and in step differ, k " << c.k;
    }
  }
}

// The bf16 wgmma config's fused GEMM1 (GroupedGemmArgs::gated, rows gathered beforehand): gate |
// up halves (N = 2I, I = 136: a partial third 128-row CTA tile of 8 + 8 row pairs), a per-expert
// bias, SiLU-and-mul and SwiGLU-OAI (clamps binding) in the epilogue, K = 328 (a K tail), every
// tile. Against float64: rel L2 < 5e-3 (bf16 output rounding ~1.1e-3 RMS, fp32 sums, __expf); rows
// past offsets[E] keep their poison; a repeated launch gives the same bits. fp8 refuses gated.
TEST(WgmmaGroupedGemm, GatedEpilogueMatchesReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const std::vector<int> counts = {3, 0, 150, 33, 161, 64, 97, 113};
  const int E = static_cast<int>(counts.size()), I = 136, N = 2 * I, K = 328;
  const auto off = offsets_of(counts);
  const int used = off[E], rows = used + 3;
  std::mt19937_64 rng(seed);
  const GatedInputs in = random_gated_inputs(rng, static_cast<std::size_t>(rows), E, N, K);
  const std::vector<float>&x = in.x, &w = in.w, &bias = in.bias;
  DeviceArray<std::uint16_t> d_x(in.x_bits), d_w(in.w_bits);
  DeviceArray<float> d_bias(bias);
  DeviceArray<std::int32_t> d_off(off);
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(GemmScheme::kBF16, E);
  DeviceArray<std::uint8_t> d_ws(ws);
  for (const Activation kind : {Activation::kSiluAndMul, Activation::kSwigluOai}) {
    SCOPED_TRACE(std::string(activation_name(kind)));
    const gemm::GemmEpilogue act = test_gated_epilogue(kind, d_bias.get());
    const std::vector<double> ref =
        gated_grouped_reference(x, w, bias, off, {}, N, K, kind == Activation::kSwigluOai,
                                kTestSwigluAlpha, kTestSwigluLimit);
    for (const gemm::WgmmaTile tile : wgmma_tiles(GemmScheme::kBF16)) {
      SCOPED_TRACE(gemm::wgmma_tile_name(tile));
      std::vector<std::uint16_t> first;
      for (int run = 0; run < 2; ++run) {
        DeviceArray<std::uint16_t> d(static_cast<std::size_t>(rows) * I);
        MOEKIT_TEST_CUDA(cudaMemset(d.get(), 0xff, static_cast<std::size_t>(rows) * I * 2));
        GroupedGemmArgs a;
        a.scheme = GemmScheme::kBF16;
        a.num_experts = E, a.n = N, a.k = K, a.rows = rows;
        a.expert_offsets = d_off.get(), a.a = d_x.get(), a.w = d_w.get(), a.out = d.get();
        a.epilogue = act;
        a.workspace = d_ws.get(), a.workspace_bytes = ws;
        gemm::grouped_gemm(a, wgmma_config(tile));
        MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
        const auto bits = d.download();
        if (run == 0) {
          first = bits;
          std::vector<double> got;
          for (std::size_t i = 0; i < ref.size(); ++i) got.push_back(bf16_to_float(bits[i]));
          const double err = rel_l2(got, ref);
          EXPECT_LT(err, 5e-3) << "rel L2 " << err;
          int clobbered = 0;
          for (std::size_t i = ref.size(); i < bits.size(); ++i) clobbered += bits[i] != kPoison;
          EXPECT_EQ(clobbered, 0) << "rows past offsets[E] written";
        } else {
          EXPECT_TRUE(bits == first) << "repeated run differs";
        }
      }
    }
  }
  // fp8 has no gated epilogue: an error naming the argument and the config.
  GroupedGemmArgs a;
  a.scheme = GemmScheme::kFP8Block;
  a.num_experts = E, a.n = N, a.k = 384, a.rows = rows;
  a.expert_offsets = d_off.get(), a.a = d_x.get(), a.w = d_w.get(), a.out = d_x.get();
  a.a_scales = d_bias.get(), a.w_scales = d_bias.get();
  a.epilogue.kind = gemm::EpilogueKind::kSiluAndMul;
  const std::size_t ws8 = gemm::grouped_gemm_workspace_bytes(GemmScheme::kFP8Block, E);
  DeviceArray<std::uint8_t> d_ws8(ws8);
  a.workspace = d_ws8.get(), a.workspace_bytes = ws8;
  try {
    gemm::grouped_gemm(a, wgmma_config(gemm::WgmmaTile::k160));
    ADD_FAILURE() << "no error for gated fp8";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("epilogue.kind: expected none unless"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("fp8_block, wgmma"));
  }
}

// The wgmma config gathering its rows itself (GroupedGemmArgs::row_index: one single-row TMA box
// per row of a unit, from the unpermuted rows; fp8: their 1x128 scales by the same index), against
// the same launch on rows gathered beforehand: the same bits on every tile, with tokens repeated
// across experts (top-k), empty experts, experts of 1 / 31 / 33 / 145..300 rows, a strided source
// whose row pads hold NaN bytes and, bf16, the gated GEMM1 epilogue (both activations, bias). The
// plain GEMM is also checked against float64 (5e-3, the file's bound); rows past offsets[E] keep
// their poison. Configs other than decode and wgmma refuse a row index, naming it.
TEST_P(GroupedGemm, WgmmaRowIndexMatchesGatheredRows) {
  MOEKIT_REQUIRE_GPU();
  const auto t = GetParam();
  const bool fp8 = t == GemmScheme::kFP8Block;
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const std::vector<int> counts = {0, 1, 31, 33, 145, 160, 161, 300, 64};
  const int E = static_cast<int>(counts.size()), tokens = 211, K = fp8 ? 384 : 328, pad = 16;
  const int lda = K + pad, elem = fp8 ? 1 : 2;
  const auto off = offsets_of(counts);
  const int used = off[E], rows = used + 3;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(0, tokens - 1);
  std::vector<std::int32_t> index(static_cast<std::size_t>(rows));
  for (auto& v : index) v = pick(rng);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(tokens) * K);
  for (auto& v : x) v = dist(rng);
  // The source rows as bytes (bf16 bits or e4m3 codes), their float values, fp8 scales.
  std::vector<std::uint8_t> src_bytes(static_cast<std::size_t>(tokens) * K * elem);
  std::vector<float> src_vals(x.size()), src_scales;
  if (fp8) {
    auto q = quantize_act_1x128(x, tokens, K);
    std::memcpy(src_bytes.data(), q.q.data(), q.q.size());
    src_vals = q.dequant;
    src_scales = q.scales;
  } else {
    to_bf16_bytes(x, src_bytes, src_vals);
  }
  // Gathered beforehand: row r = source row index[r] (rows past `used` too: the capacity rows).
  const int kb = K / 128;
  std::vector<std::uint8_t> gathered_bytes(static_cast<std::size_t>(rows) * K * elem);
  std::vector<float> gathered_vals(static_cast<std::size_t>(rows) * K), gathered_scales;
  for (int r = 0; r < rows; ++r) {
    const std::size_t src = static_cast<std::size_t>(index[static_cast<std::size_t>(r)]);
    std::memcpy(&gathered_bytes[static_cast<std::size_t>(r) * K * elem], &src_bytes[src * K * elem],
                static_cast<std::size_t>(K) * elem);
    std::memcpy(&gathered_vals[static_cast<std::size_t>(r) * K], &src_vals[src * K], K * 4);
    if (fp8)
      for (int b = 0; b < kb; ++b) gathered_scales.push_back(src_scales[src * kb + b]);
  }
  DeviceArray<std::uint8_t> d_src(pad_rows(src_bytes.data(), tokens, K, pad, elem));
  DeviceArray<std::uint8_t> d_gathered(gathered_bytes);
  DeviceArray<std::int32_t> d_index(index), d_off(off);
  DeviceArray<float> d_src_scales(fp8 ? src_scales : std::vector<float>{0.0f});
  DeviceArray<float> d_gathered_scales(fp8 ? gathered_scales : std::vector<float>{0.0f});
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(t, E);
  DeviceArray<std::uint8_t> d_ws(ws);

  // One launch of the wgmma config (n columns; gated: act); returns D's bits [rows][n or n / 2].
  auto launch = [&](const void* b, const float* b_scales, int n, bool indexed,
                    const gemm::GemmEpilogue* act,
                    gemm::WgmmaTile tile) -> std::vector<std::uint16_t> {
    const int out_cols = act != nullptr ? n / 2 : n;
    DeviceArray<std::uint16_t> d(static_cast<std::size_t>(rows) * out_cols);
    EXPECT_EQ(cudaMemset(d.get(), 0xff, static_cast<std::size_t>(rows) * out_cols * 2),
              cudaSuccess);
    GroupedGemmArgs a;
    a.scheme = t;
    a.num_experts = E, a.n = n, a.k = K, a.rows = rows;
    a.expert_offsets = d_off.get(), a.w = b, a.out = d.get();
    a.w_scales = fp8 ? b_scales : nullptr;
    a.a = indexed ? static_cast<const void*>(d_src.get()) : d_gathered.get();
    a.lda = indexed ? lda : K;
    a.row_index = indexed ? d_index.get() : nullptr;
    if (fp8) a.a_scales = indexed ? d_src_scales.get() : d_gathered_scales.get();
    if (act != nullptr) a.epilogue = *act;
    a.workspace = d_ws.get(), a.workspace_bytes = ws;
    gemm::grouped_gemm(a, wgmma_config(tile));
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return d.download();
  };
  auto check_poison = [&](const std::vector<std::uint16_t>& bits, int out_cols) {
    int clobbered = 0;
    for (std::size_t i = static_cast<std::size_t>(used) * out_cols; i < bits.size(); ++i)
      clobbered += bits[i] != kPoison;
    EXPECT_EQ(clobbered, 0) << "rows past offsets[E] written";
  };

  // Plain GEMM: N 264 (a partial weight-row tile and, fp8, a partial 128-row scale block).
  const int n = 264;
  std::vector<float> w(static_cast<std::size_t>(E) * n * K);
  for (auto& v : w) v = dist(rng) * 0.05f;
  std::vector<float> w_vals(w.size()), w_scales{0.0f};
  std::vector<std::uint8_t> w_bytes(w.size() * elem);
  if (fp8) {
    auto q = quantize_weight_128x128(w, E, n, K);
    w_bytes = q.q;
    w_scales = q.scales;
    w_vals = q.dequant;
  } else {
    to_bf16_bytes(w, w_bytes, w_vals);
  }
  DeviceArray<std::uint8_t> d_w(w_bytes);
  DeviceArray<float> d_w_scales(w_scales);
  const std::vector<double> ref = grouped_reference(gathered_vals, w_vals, off, n, K);
  for (const gemm::WgmmaTile tile : wgmma_tiles(t)) {
    SCOPED_TRACE(gemm::wgmma_tile_name(tile));
    const auto gathered = launch(d_w.get(), d_w_scales.get(), n, false, nullptr, tile);
    const auto indexed = launch(d_w.get(), d_w_scales.get(), n, true, nullptr, tile);
    EXPECT_TRUE(indexed == gathered) << "row_index differs from the gathered rows";
    std::vector<double> got;
    for (std::size_t i = 0; i < ref.size(); ++i) got.push_back(bf16_to_float(indexed[i]));
    const double err = rel_l2(got, ref);
    EXPECT_LT(err, kGemmBound) << "rel L2 " << err;
    check_poison(indexed, n);
  }

  if (!fp8) {  // the gated GEMM1 (I = 136: a partial third CTA tile of row pairs)
    const int gn = 272;
    const GatedInputs gin = random_gated_inputs(rng, 1, E, gn, K);
    DeviceArray<std::uint16_t> d_gw(gin.w_bits);
    DeviceArray<float> d_bias(gin.bias);
    for (const Activation kind : {Activation::kSiluAndMul, Activation::kSwigluOai}) {
      SCOPED_TRACE(std::string(activation_name(kind)));
      const gemm::GemmEpilogue act = test_gated_epilogue(kind, d_bias.get());
      for (const gemm::WgmmaTile tile :
           {gemm::WgmmaTile::k128n, gemm::WgmmaTile::k160, gemm::WgmmaTile::k160r256}) {
        SCOPED_TRACE(gemm::wgmma_tile_name(tile));
        const auto gathered = launch(d_gw.get(), nullptr, gn, false, &act, tile);
        const auto indexed = launch(d_gw.get(), nullptr, gn, true, &act, tile);
        EXPECT_TRUE(indexed == gathered) << "gated: row_index differs from the gathered rows";
        check_poison(indexed, gn / 2);
      }
    }
  }

  // A CUTLASS kernel refuses the row index, naming it and the kernel.
  {
    GroupedGemmArgs a;
    a.scheme = t;
    a.num_experts = E, a.n = n, a.k = K, a.rows = rows;
    a.expert_offsets = d_off.get(), a.a = d_src.get(), a.lda = lda, a.w = d_w.get();
    a.out = d_gathered.get(), a.a_scales = d_src_scales.get(), a.w_scales = d_w_scales.get();
    a.row_index = d_index.get();
    a.workspace = d_ws.get(), a.workspace_bytes = ws;
    gemm::GemmConfig narrow;
    narrow.kernel = gemm::GemmKernel::kCutlassNarrow;
    try {
      gemm::grouped_gemm(a, narrow);
      ADD_FAILURE() << "no error for row_index with the narrow kernel";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("row_index: expected null unless the kernel is "
                                                 "decode or wgmma"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("cutlass_narrow"));
    }
  }
}

// The per-expert problem sizes come from device memory: a captured graph replayed after the
// routing changed must follow the new expert_offsets (no host copy of them baked in).
TEST_P(GroupedGemm, GraphReplayFollowsDeviceOffsets) {
  MOEKIT_REQUIRE_GPU();
  const auto t = GetParam();
  const bool fp8 = t == GemmScheme::kFP8Block;
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int E = 3, n = 256, k = 256, rows = 96;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(rows) * k), b(static_cast<std::size_t>(E) * n * k);
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng) * 0.05f;
  std::vector<float> av, bv;
  std::vector<std::uint8_t> abytes, bbytes;
  std::vector<float> sa, sb;
  if (fp8) {
    auto qa = quantize_act_1x128(a, rows, k);
    auto qb = quantize_weight_128x128(b, E, n, k);
    abytes = qa.q, bbytes = qb.q, sa = qa.scales, sb = qb.scales, av = qa.dequant, bv = qb.dequant;
  } else {
    for (float x : a) {
      auto h = float_to_bf16(x);
      abytes.push_back(h & 0xff), abytes.push_back(h >> 8), av.push_back(bf16_to_float(h));
    }
    for (float x : b) {
      auto h = float_to_bf16(x);
      bbytes.push_back(h & 0xff), bbytes.push_back(h >> 8), bv.push_back(bf16_to_float(h));
    }
  }
  DeviceArray<std::uint8_t> da(abytes), db(bbytes);
  DeviceArray<float> dsa(std::max<std::size_t>(sa.size(), 1)), dsb(std::max<std::size_t>(sb.size(), 1));
  dsa.upload(sa);
  dsb.upload(sb);
  DeviceArray<std::int32_t> d_off(offsets_of({10, 50, 36}));
  DeviceArray<std::uint16_t> d_out(static_cast<std::size_t>(rows) * n);
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(t, E);
  DeviceArray<std::uint8_t> d_ws(ws);
  GroupedGemmArgs args;
  args.scheme = t;
  args.num_experts = E, args.n = n, args.k = k, args.rows = rows;
  args.expert_offsets = d_off.get(), args.a = da.get(), args.w = db.get(), args.out = d_out.get();
  args.a_scales = fp8 ? dsa.get() : nullptr, args.w_scales = fp8 ? dsb.get() : nullptr;
  args.workspace = d_ws.get(), args.workspace_bytes = ws;
  const gemm::GemmConfig config = tuning::sm90::gemm_config(t, E, rows, n, k, false, true);
  SCOPED_TRACE(config.str());
  cudaStream_t stream;
  MOEKIT_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  args.stream = stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOEKIT_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  gemm::grouped_gemm(args, config);
  MOEKIT_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  MOEKIT_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const auto& counts : {std::vector<int>{10, 50, 36}, std::vector<int>{0, 96, 0}}) {
    const auto off = offsets_of(counts);
    d_off.upload(off);
    MOEKIT_TEST_CUDA(cudaMemset(d_out.get(), 0xff, static_cast<std::size_t>(rows) * n * 2));
    MOEKIT_TEST_CUDA(cudaGraphLaunch(exec, stream));
    MOEKIT_TEST_CUDA(cudaStreamSynchronize(stream));
    const auto ref = grouped_reference(av, bv, off, n, k);
    const auto bits = d_out.download();
    std::vector<double> out(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) out[i] = bf16_to_float(bits[i]);
    EXPECT_LT(rel_l2(out, ref), kGemmBound) << "counts " << counts[0] << "," << counts[1];
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_P(GroupedGemm, RejectsBadArgumentsNamingThem) {
  MOEKIT_REQUIRE_GPU();
  const auto t = GetParam();
  DeviceArray<std::uint8_t> buf(1 << 20);
  DeviceArray<std::int32_t> off(std::vector<std::int32_t>{0, 0});
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(t, 1);
  DeviceArray<std::uint8_t> d_ws(ws);
  GroupedGemmArgs good;
  good.scheme = t;
  good.num_experts = 1, good.n = 128, good.k = 128, good.rows = 4;
  good.expert_offsets = off.get(), good.a = buf.get(), good.w = buf.get(), good.out = buf.get();
  const bool fp8 = t == GemmScheme::kFP8Block;
  good.a_scales = fp8 ? reinterpret_cast<const float*>(buf.get()) : nullptr;
  good.w_scales = fp8 ? buf.get() : nullptr;
  good.workspace = d_ws.get(), good.workspace_bytes = ws;
  const gemm::GemmConfig config = tuning::sm90::gemm_config(t, 1, 4, 128, 128, false, true);
  EXPECT_NO_THROW(gemm::grouped_gemm(good, config));
  auto expect_error = [&](GroupedGemmArgs a, const char* arg) {
    try {
      gemm::grouped_gemm(a, config);
      ADD_FAILURE() << "no error for " << arg;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string(arg) + ": expected")) << e.what();
    }
  };
  GroupedGemmArgs a = good;
  a.n = 12;
  expect_error(a, "n");
  a = good, a.k = t == GemmScheme::kFP8Block ? 64 : 12;
  expect_error(a, "k");
  a = good, a.num_experts = 0;
  expect_error(a, "num_experts");
  a = good, a.lda = 100;
  expect_error(a, "lda");
  a = good, a.ldo = 64;
  expect_error(a, "ldo");
  a = good, a.expert_offsets = nullptr;
  expect_error(a, "expert_offsets");
  a = good, a.w = static_cast<const std::uint8_t*>(good.w) + 2;
  expect_error(a, "w");
  a = good, a.workspace_bytes = ws - 1;
  expect_error(a, "workspace_bytes");
  a = good, a.rows = -1;
  expect_error(a, "rows");
  if (fp8) {
    a = good, a.a_scales = nullptr;
    expect_error(a, "a_scales");
  }
  MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
}

INSTANTIATE_TEST_SUITE_P(Types, GroupedGemm,
                         ::testing::Values(GemmScheme::kBF16, GemmScheme::kFP8Block),
                         [](const auto& info) { return gemm::gemm_scheme_name(info.param); });

}  // namespace
}  // namespace moekit
