// Tests of the SM90 W4A16 wgmma tile (W4Tile::kWgmma, sm90_w4a16_wgmma_gemm.cuh) beyond the
// parametrized grouped-GEMM cases (w4a16_grouped_gemm_test.cpp, which run it too): long K, large
// and partial token tiles, both of its configurations, graph replay, argument validation. Error
// bound as there: relative L2 < 4e-3 vs float64 (fp32 accumulation + the final bf16 rounding).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemm_w4/w4a16_test_util.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_weight_shuffle.hpp"
#include "cuda/permute/permute_kernels.hpp"

namespace moekit::gemm {
namespace {

using namespace w4a16_test;

// The wgmma tile on shapes its small cases do not reach: 20 / 21 K chunks (the
// weight and activation rings wrap several times; 21: a one-chunk last stage),
// n = 272 (two full 128-row tiles + one 16-row tile), gathered rows, bias, row
// scale. A reaches the kernel through the row gather in the wgmma K order (cuda::gather_rows,
// the experts' path) of the natural rows the reference reads. Routing A:
// experts with 0, 1, 31, 64, 65, 129 and 300 rows (the 128-token tile: full
// tiles, partial ones and every N = 32 tail); routing B: 700 and 1000 rows
// (many full tiles); routing C: 97..160 rows per expert (the 160-token tile,
// one tile per expert, and a 33-row expert on the full N); routing D on the 32-token tile:
// 0..70 rows per expert (units of N = 8 / 16 / 32, experts of several token tiles with short
// last ones), and routing A on it too. Checked against
// float64 (same bound as above); repeated runs, a capped grid (3 CTAs) and a
// CUDA-graph replay bitwise equal to the first run.
TEST(W4A16Gemm, WgmmaLongKMatchesFloat64AndReplays) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Config {
    std::vector<int> rows_per_expert;
    W4Format f;
    EpilogueKind epi;
    std::int64_t k;
    int wgmma_tokens = 0;
  };
  const std::vector<int> routing_a = {31, 0, 129, 1, 300, 64, 65}, routing_b = {700, 1000},
                         routing_c = {150, 97, 130, 160, 0, 33, 120},
                         routing_d = {1, 8, 9, 0, 16, 17, 2, 32, 33, 70, 41, 7, 24, 0, 3};
  const Config configs[] = {{routing_a, W4Format::kNVFP4, EpilogueKind::kNone, 1280},
                            {routing_a, W4Format::kNVFP4, EpilogueKind::kSiluAndMul, 1344},
                            {routing_a, W4Format::kMXFP4, EpilogueKind::kNone, 1344},
                            {routing_a, W4Format::kMXFP4, EpilogueKind::kSiluAndMul, 1280},
                            {routing_b, W4Format::kNVFP4, EpilogueKind::kSiluAndMul, 1280},
                            {routing_b, W4Format::kMXFP4, EpilogueKind::kNone, 1344},
                            {routing_c, W4Format::kNVFP4, EpilogueKind::kNone, 1344},
                            {routing_c, W4Format::kMXFP4, EpilogueKind::kSiluAndMul, 1280},
                            {routing_d, W4Format::kNVFP4, EpilogueKind::kSiluAndMul, 1344, 32},
                            {routing_d, W4Format::kMXFP4, EpilogueKind::kNone, 1280, 32},
                            {routing_a, W4Format::kMXFP4, EpilogueKind::kSiluAndMul, 1344, 32},
                            {routing_d, W4Format::kNVFP4, EpilogueKind::kNone, 1280, 0}};
  for (const Config& cfg : configs) {
    const std::int64_t k = cfg.k;
    const W4Format f = cfg.f;
    const EpilogueKind epi = cfg.epi;
    const int e = static_cast<int>(cfg.rows_per_expert.size());
    std::vector<std::int32_t> offsets(e + 1, 0);
    for (int i = 0; i < e; ++i) offsets[i + 1] = offsets[i] + cfg.rows_per_expert[i];
    const int m = offsets[e];
    {
      SCOPED_TRACE(w4_format_name(f) + " epi " + std::to_string(static_cast<int>(epi)) + " m " +
                   std::to_string(m) + " k " + std::to_string(k) + " wgmma_tokens " +
                   std::to_string(cfg.wgmma_tokens));
      const bool gated = epi != EpilogueKind::kNone;
      const std::int64_t n = 272, width = gated ? n / 2 : n;
      const W4Weights w = random_weights(rng, f, e, n, k, gated);
      const int a_rows = m / 2 + 1;
      std::vector<std::uint16_t> a(a_rows * k);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto& v : a) v = float_to_bf16(normal(rng));
      std::vector<std::int32_t> row_index(m);
      std::uniform_int_distribution<int> src(0, a_rows - 1);
      for (auto& r : row_index) r = src(rng);
      std::vector<float> bias(e * n), row_scale(m);
      for (auto& v : bias) v = normal(rng);
      for (auto& v : row_scale) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
      DeviceArray<std::int32_t> d_offsets(offsets), d_row_index(row_index);
      DeviceArray<std::uint16_t> d_a(a), d_a_wgmma(static_cast<std::size_t>(m) * k),
          d_out(m * width);
      cuda::GatherArgs gather;
      gather.src = d_a.ptr;
      gather.row_bytes = k * 2;
      gather.sorted_ids = d_row_index.ptr;
      gather.max_rows = m;
      gather.out = d_a_wgmma.ptr;
      gather.order = KOrder::kWgmma;
      cuda::gather_rows(gather, nullptr);
      DeviceArray<u8> d_w(w.shuffled_codes), d_s(w.shuffled_scales);
      DeviceArray<float> d_alpha(w.alpha), d_bias(bias), d_row_scale(row_scale);
      GroupedGemmArgs args;
      args.scheme = w4a16_scheme(f);
      args.epilogue.kind = epi;
      args.num_experts = e;
      args.rows = m;
      args.n = n;
      args.k = k;
      args.expert_offsets = d_offsets.ptr;
      args.a = d_a_wgmma.ptr;
      args.w = d_w.ptr;
      args.w_scales = d_s.ptr;
      args.w_expert_scale = f == W4Format::kNVFP4 ? d_alpha.ptr : nullptr;
      args.epilogue.bias = d_bias.ptr;
      args.epilogue.row_scale = d_row_scale.ptr;
      args.out = d_out.ptr;
      auto config_for = [&](int max_ctas) {
        return w4_config(W4Tile::kWgmma, e, m, n, k, gated, max_ctas, 0, cfg.wgmma_tokens);
      };
      auto run = [&](int max_ctas) {
        EXPECT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);
        grouped_gemm(args, config_for(max_ctas));
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return d_out.download();
      };
      const std::vector<std::uint16_t> first = run(0);
      EXPECT_EQ(run(0), first) << "repeated runs differ";
      EXPECT_EQ(run(3), first) << "capped grid differs";
      // Graph replay.
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      args.stream = stream;
      ASSERT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      grouped_gemm(args, config_for(0));
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(d_out.download(), first) << "graph replay differs";
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
      args.stream = nullptr;
      // float64 reference
      double num = 0, den = 0;
      std::int64_t unwritten = 0;
      std::vector<double> col(n), wdeq(static_cast<std::size_t>(e) * n * k), arow(k);
      for (int ex = 0; ex < e; ++ex)
        for (std::int64_t j = 0; j < n; ++j)
          for (std::int64_t kk = 0; kk < k; ++kk) wdeq[(ex * n + j) * k + kk] = w.deq(ex, j, kk);
      for (int ex = 0; ex < e; ++ex) {
        for (int r = offsets[ex]; r < offsets[ex + 1]; ++r) {
          for (std::int64_t kk = 0; kk < k; ++kk)
            arow[kk] = bf16_to_float(a[row_index[r] * k + kk]);
          for (std::int64_t j = 0; j < n; ++j) {
            double acc = 0;
            const double* wr = &wdeq[(ex * n + j) * k];
            for (std::int64_t kk = 0; kk < k; ++kk) acc += wr[kk] * arow[kk];
            col[j] = acc + bias[ex * n + j];
          }
          for (std::int64_t j = 0; j < width; ++j) {
            const double v =
                (gated ? col[j] / (1 + std::exp(-col[j])) * col[j + width] : col[j]) * row_scale[r];
            const float got = bf16_to_float(first[r * width + j]);
            if (std::isnan(got)) {
              ++unwritten;
              continue;
            }
            num += (got - v) * (got - v);
            den += v * v;
          }
        }
      }
      EXPECT_EQ(unwritten, 0);
      ASSERT_GT(den, 0.0);
      EXPECT_LT(std::sqrt(num / den), 4e-3);
    }
  }
}

// The row gather in the wgmma K order (cuda::gather_rows, KOrder::kWgmma) equals its definition
// (the host helper) bitwise, in order and gathered (repeats, any order; a negative index gives a
// zero row; the device row count caps the rows written); a row size the order cannot take is
// refused naming the argument.
// wgmma_k_source is the host definition's map (no device needed); a column outside a chunk is
// refused.
TEST(W4A16Gemm, WgmmaKSourceIsTheKOrderMap) {
  for (int j = 0; j < 64; ++j) {
    std::vector<std::uint16_t> one(64, 0);
    one[wgmma_k_source(j)] = 1;
    EXPECT_EQ(to_wgmma_k_order(one, 1, 64)[j], 1) << "column " << j;
  }
  EXPECT_THROW(wgmma_k_source(64), Error);
  EXPECT_THROW(wgmma_k_source(-1), Error);
}

TEST(W4A16Gemm, WgmmaKOrderGatherMatchesItsDefinition) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::int64_t rows = 37, k = 192;
  std::vector<std::uint16_t> src(rows * k);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (auto& v : src) v = static_cast<std::uint16_t>(bits(rng));
  DeviceArray<std::uint16_t> d_src(src);
  auto gather = [&](const std::int32_t* sorted, std::int64_t out_rows, const std::int32_t* count,
                    DeviceArray<std::uint16_t>& out) {
    ASSERT_EQ(cudaMemset(out.ptr, 0xAB, out.count * 2), cudaSuccess);
    cuda::GatherArgs g;
    g.src = d_src.ptr;
    g.row_bytes = k * 2;
    g.sorted_ids = sorted;
    g.max_rows = out_rows;
    g.num_rows = count;
    g.out = out.ptr;
    g.order = KOrder::kWgmma;
    cuda::gather_rows(g, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  auto compare = [&](const std::vector<std::uint16_t>& got, const std::vector<std::uint16_t>& want,
                     const char* what) {
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i] && bad++ < 5)
        ADD_FAILURE() << what << " row " << i / k << " column " << i % k << ": " << got[i]
                      << " vs " << want[i];
    EXPECT_EQ(bad, 0) << what;
  };
  DeviceArray<std::uint16_t> d_dst(rows * k);
  gather(nullptr, rows, nullptr, d_dst);
  compare(d_dst.download(), to_wgmma_k_order(src, rows, k), "in order");
  std::vector<std::int32_t> row_index(53);
  std::uniform_int_distribution<int> pick(0, rows - 1);
  for (auto& r : row_index) r = pick(rng);
  row_index[5] = -1;
  row_index[17] = -7;
  const std::int64_t grows = static_cast<std::int64_t>(row_index.size());
  std::vector<std::uint16_t> gpacked(grows * k, 0);
  for (std::int64_t r = 0; r < grows; ++r)
    if (row_index[r] >= 0)
      for (std::int64_t c = 0; c < k; ++c) gpacked[r * k + c] = src[row_index[r] * k + c];
  const std::vector<std::uint16_t> gwant = to_wgmma_k_order(gpacked, grows, k);
  DeviceArray<std::int32_t> d_row_index(row_index), d_count(std::vector<std::int32_t>{40});
  DeviceArray<std::uint16_t> d_gdst(grows * k);
  gather(d_row_index.ptr, grows, nullptr, d_gdst);
  compare(d_gdst.download(), gwant, "gathered");
  // Device count 40: rows >= 40 untouched (0xABAB).
  gather(d_row_index.ptr, grows, d_count.ptr, d_gdst);
  std::vector<std::uint16_t> capped = gwant;
  std::fill(capped.begin() + 40 * k, capped.end(), static_cast<std::uint16_t>(0xABAB));
  compare(d_gdst.download(), capped, "counted");
  try {
    cuda::GatherArgs g;
    g.src = d_src.ptr;
    g.row_bytes = 96 * 2;  // not a whole number of 64-wide chunks
    g.max_rows = 2;
    g.out = d_dst.ptr;
    g.order = KOrder::kWgmma;
    cuda::gather_rows(g, nullptr);
    ADD_FAILURE() << "expected moekit::Error naming order";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("order"), std::string::npos) << e.what();
  }
}

// GEMM1 (gated) writing its rows in the wgmma K order is BITWISE its natural-order output
// converted (only the store addresses differ); GEMM2 reading those rows agrees with the large
// mma.sync tile's natural-order chain within relative L2 1e-3 (the same exact products summed in
// fp32 by another instruction, wgmma instead of mma.sync: the rounding of the fp32 sums may
// differ; on the H200, 2026-12-01, MXFP4 came out bitwise equal here, NVFP4 not), for
// 128- and 160-token tiles and one-chunk last stages (K = 320 and 192).
TEST(W4A16Gemm, WgmmaChainInKOrderMatchesNaturalOrderAndLargeTile) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  auto rel_l2 = [](const std::vector<std::uint16_t>& x, const std::vector<std::uint16_t>& y) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double a = bf16_to_float(x[i]), b = bf16_to_float(y[i]);
      num += (a - b) * (a - b);
      den += b * b;
    }
    return std::sqrt(num / std::max(den, 1e-300));
  };
  for (const std::vector<int>& rows_per_expert :
       {std::vector<int>{400, 0, 57, 330}, std::vector<int>{120, 140, 101, 159}}) {
    for (W4Format f : {W4Format::kNVFP4, W4Format::kMXFP4}) {
      SCOPED_TRACE(w4_format_name(f) + " rows " + std::to_string(rows_per_expert[0]));
      const int e = static_cast<int>(rows_per_expert.size());
      std::vector<std::int32_t> offsets(e + 1, 0);
      for (int i = 0; i < e; ++i) offsets[i + 1] = offsets[i] + rows_per_expert[i];
      const int m = offsets[e];
      const std::int64_t h = 320, inter = 192;  // GEMM1: N = 384, K = 320; GEMM2: N = 320, K = 192
      const W4Weights w13 = random_weights(rng, f, e, 2 * inter, h, true);
      const W4Weights w2 = random_weights(rng, f, e, h, inter, false);
      std::vector<std::uint16_t> x(m * h);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto& v : x) v = float_to_bf16(normal(rng));
      std::vector<float> bias1(e * 2 * inter), bias2(e * h);
      for (auto& v : bias1) v = normal(rng);
      for (auto& v : bias2) v = normal(rng);
      DeviceArray<std::int32_t> d_offsets(offsets);
      DeviceArray<std::uint16_t> d_x(x), d_xw(to_wgmma_k_order(x, m, h)), d_act(m * inter),
          d_out(m * h);
      DeviceArray<u8> d_w13(w13.shuffled_codes), d_s13(w13.shuffled_scales),
          d_w2(w2.shuffled_codes), d_s2(w2.shuffled_scales);
      DeviceArray<float> d_a13(w13.alpha), d_a2(w2.alpha), d_b1(bias1), d_b2(bias2);
      GroupedGemmArgs g1;
      g1.scheme = w4a16_scheme(f);
      g1.epilogue.kind = EpilogueKind::kSwigluOai;
      g1.num_experts = e;
      g1.rows = m;
      g1.n = 2 * inter;
      g1.k = h;
      g1.expert_offsets = d_offsets.ptr;
      g1.w = d_w13.ptr;
      g1.w_scales = d_s13.ptr;
      g1.w_expert_scale = f == W4Format::kNVFP4 ? d_a13.ptr : nullptr;
      g1.epilogue.bias = d_b1.ptr;
      g1.out = d_act.ptr;
      GroupedGemmArgs g2 = g1;
      g2.epilogue.kind = EpilogueKind::kNone;
      g2.n = h;
      g2.k = inter;
      g2.a = d_act.ptr;
      g2.w = d_w2.ptr;
      g2.w_scales = d_s2.ptr;
      g2.w_expert_scale = f == W4Format::kNVFP4 ? d_a2.ptr : nullptr;
      g2.epilogue.bias = d_b2.ptr;
      g2.out = d_out.ptr;
      auto run = [&](const GroupedGemmArgs& g, const GemmConfig& c,
                     DeviceArray<std::uint16_t>& out) {
        EXPECT_EQ(cudaMemset(out.ptr, 0xFF, out.count * 2), cudaSuccess);
        grouped_gemm(g, c);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return out.download();
      };
      // Large tile, natural order.
      GroupedGemmArgs l1 = g1, l2 = g2;
      l1.a = d_x.ptr;
      const GemmConfig large1 = w4_config(W4Tile::kLarge, e, m, 2 * inter, h, true),
                       large2 = w4_config(W4Tile::kLarge, e, m, h, inter, false);
      const std::vector<std::uint16_t> act_large = run(l1, large1, d_act),
                                       out_large = run(l2, large2, d_out);
      // wgmma (the rules' choice at these sizes), natural then wgmma-order output, then GEMM2.
      g1.a = d_xw.ptr;
      GemmConfig wg1 = tuning::sm90::gemm_config(g1.scheme, e, m, 2 * inter, h, true, true);
      const GemmConfig wg2 = w4_config(W4Tile::kWgmma, e, m, h, inter, false);
      EXPECT_EQ(wg1.kernel, GemmKernel::kWgmma) << wg1.str();
      wg1 = w4_config(W4Tile::kWgmma, e, m, 2 * inter, h, true);
      const std::vector<std::uint16_t> act_natural = run(g1, wg1, d_act);
      wg1.out_order = KOrder::kWgmma;
      const std::vector<std::uint16_t> act_k = run(g1, wg1, d_act);
      EXPECT_EQ(act_k, to_wgmma_k_order(act_natural, m, inter)) << "out_order changed values";
      const std::vector<std::uint16_t> out_wgmma = run(g2, wg2, d_out);
      const double e1 = rel_l2(act_natural, act_large), e2 = rel_l2(out_wgmma, out_large);
      std::cout << w4_format_name(f) << " m " << m << ": relative L2 to the large tile GEMM1 " << e1
                << ", GEMM2 " << e2 << "\n";
      EXPECT_LT(e1, 1e-3);
      EXPECT_LT(e2, 1e-3);
      int nan = 0;
      for (std::uint16_t v : out_wgmma) nan += std::isnan(bf16_to_float(v));
      EXPECT_EQ(nan, 0);
    }
  }
}

// out_order kWgmma needs the wgmma kernel and an output width that is a multiple of 64; the W4A16
// wgmma kernel takes no row_index (TMA reads A's rows in order); its token tile is one of 32, 128,
// 160, 256. Each refusal names the argument.
TEST(W4A16Gemm, WgmmaKOrderArgumentsAreChecked) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::int32_t> d_offsets(std::vector<std::int32_t>{0, 1});
  DeviceArray<std::uint16_t> d_a(128), d_out(128);
  DeviceArray<u8> d_w(16 * 128 / 2), d_s(256);
  GroupedGemmArgs args;
  args.scheme = GemmScheme::kW4A16MXFP4;
  args.num_experts = 1;
  args.rows = 1;
  args.n = 16;
  args.k = 128;
  args.expert_offsets = d_offsets.ptr;
  args.a = d_a.ptr;
  args.w = d_w.ptr;
  args.w_scales = d_s.ptr;
  args.out = d_out.ptr;
  const GemmConfig wgmma = w4_config(W4Tile::kWgmma, 1, 1, 16, 128, false);
  auto expect_error = [&](const GroupedGemmArgs& a, const GemmConfig& c, const char* what) {
    try {
      grouped_gemm(a, c);
      ADD_FAILURE() << "expected moekit::Error naming " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  GemmConfig c = w4_config(W4Tile::kDecode8, 1, 1, 16, 128, false);
  c.out_order = KOrder::kWgmma;  // decode
  expect_error(args, c, "out_order");
  c = wgmma;
  c.out_order = KOrder::kWgmma;  // output width 16
  expect_error(args, c, "out_order");
  GroupedGemmArgs x = args;
  x.row_index = d_offsets.ptr;  // any device array: refused before the launch
  expect_error(x, wgmma, "row_index");
  c = wgmma;
  c.tokens = 64;  // no such token tile
  expect_error(args, c, "tokens");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The wgmma tile refuses scales that are not 16-byte aligned (bulk copies of
// the 16-byte-granular scale records).
TEST(W4A16Gemm, WgmmaRejectsMisalignedScales) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::int32_t> d_offsets(std::vector<std::int32_t>{0, 1});
  DeviceArray<std::uint16_t> d_a(64), d_out(16);
  DeviceArray<u8> d_w(512), d_s(128);
  GroupedGemmArgs args;
  args.scheme = GemmScheme::kW4A16MXFP4;
  args.num_experts = 1;
  args.rows = 1;
  args.n = 16;
  args.k = 64;
  args.expert_offsets = d_offsets.ptr;
  args.a = d_a.ptr;
  args.w = d_w.ptr;
  args.w_scales = d_s.ptr + 2;
  args.out = d_out.ptr;
  try {
    grouped_gemm(args, w4_config(W4Tile::kWgmma, 1, 1, 16, 64, false));
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w_scales"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moekit::gemm
