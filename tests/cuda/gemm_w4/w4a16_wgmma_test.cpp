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
#include "moekit/gemm/w4a16.hpp"

namespace moekit::gemm {
namespace {

using namespace w4a16_test;

// The wgmma tile on shapes its small cases do not reach: 20 / 21 K chunks (the
// weight and activation rings wrap several times; 21: a one-chunk last stage),
// n = 272 (two full 128-row tiles + one 16-row tile), gathered rows, bias, row
// scale. A reaches the kernel through the device conversion (w4a16_to_wgmma_k_order,
// gathering the rows through row_index) of the natural rows the reference reads. Routing A:
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
    W4Epilogue epi;
    std::int64_t k;
    int wgmma_tokens = 0;
  };
  const std::vector<int> routing_a = {31, 0, 129, 1, 300, 64, 65}, routing_b = {700, 1000},
                         routing_c = {150, 97, 130, 160, 0, 33, 120},
                         routing_d = {1, 8, 9, 0, 16, 17, 2, 32, 33, 70, 41, 7, 24, 0, 3};
  const Config configs[] = {{routing_a, W4Format::kNVFP4, W4Epilogue::kNone, 1280},
                            {routing_a, W4Format::kNVFP4, W4Epilogue::kSiluAndMul, 1344},
                            {routing_a, W4Format::kMXFP4, W4Epilogue::kNone, 1344},
                            {routing_a, W4Format::kMXFP4, W4Epilogue::kSiluAndMul, 1280},
                            {routing_b, W4Format::kNVFP4, W4Epilogue::kSiluAndMul, 1280},
                            {routing_b, W4Format::kMXFP4, W4Epilogue::kNone, 1344},
                            {routing_c, W4Format::kNVFP4, W4Epilogue::kNone, 1344},
                            {routing_c, W4Format::kMXFP4, W4Epilogue::kSiluAndMul, 1280},
                            {routing_d, W4Format::kNVFP4, W4Epilogue::kSiluAndMul, 1344, 32},
                            {routing_d, W4Format::kMXFP4, W4Epilogue::kNone, 1280, 32},
                            {routing_a, W4Format::kMXFP4, W4Epilogue::kSiluAndMul, 1344, 32},
                            {routing_d, W4Format::kNVFP4, W4Epilogue::kNone, 1280, 0}};
  for (const Config& cfg : configs) {
    const std::int64_t k = cfg.k;
    const W4Format f = cfg.f;
    const W4Epilogue epi = cfg.epi;
    const int e = static_cast<int>(cfg.rows_per_expert.size());
    std::vector<std::int32_t> offsets(e + 1, 0);
    for (int i = 0; i < e; ++i) offsets[i + 1] = offsets[i] + cfg.rows_per_expert[i];
    const int m = offsets[e];
    {
      SCOPED_TRACE(w4_format_name(f) + " epi " + std::to_string(static_cast<int>(epi)) + " m " +
                   std::to_string(m) + " k " + std::to_string(k) + " wgmma_tokens " +
                   std::to_string(cfg.wgmma_tokens));
      const bool gated = epi != W4Epilogue::kNone;
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
      w4a16_to_wgmma_k_order(d_a.ptr, 0, d_a_wgmma.ptr, 0, m, k, nullptr, d_row_index.ptr, a_rows);
      DeviceArray<u8> d_w(w.shuffled_codes), d_s(w.shuffled_scales);
      DeviceArray<float> d_alpha(w.alpha), d_bias(bias), d_row_scale(row_scale);
      W4A16GemmArgs args;
      args.format = f;
      args.epilogue = epi;
      args.tile = W4Tile::kWgmma;
      args.num_experts = e;
      args.m = m;
      args.n = n;
      args.k = k;
      args.expert_offsets = d_offsets.ptr;
      args.a = d_a_wgmma.ptr;
      args.a_order = W4KOrder::kWgmma;
      args.w = d_w.ptr;
      args.w_scales = d_s.ptr;
      args.alpha = d_alpha.ptr;
      args.bias = d_bias.ptr;
      args.row_scale = d_row_scale.ptr;
      args.out = d_out.ptr;
      args.wgmma_tokens = cfg.wgmma_tokens;
      auto run = [&](int max_ctas) {
        EXPECT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);
        args.max_ctas = max_ctas;
        w4a16_grouped_gemm(args);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return d_out.download();
      };
      const std::vector<std::uint16_t> first = run(0);
      EXPECT_EQ(run(0), first) << "repeated runs differ";
      EXPECT_EQ(run(3), first) << "capped grid differs";
      // Graph replay.
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      args.max_ctas = 0;
      args.stream = stream;
      ASSERT_EQ(cudaMemset(d_out.ptr, 0xFF, d_out.count * 2), cudaSuccess);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      w4a16_grouped_gemm(args);
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

// The device conversion to the wgmma K order equals its definition (the host
// helper) bitwise, with row strides on both sides (bytes between the rows stay
// untouched), and w4a16_wgmma_k_source is the same map; bad arguments are
// refused naming the argument.
TEST(W4A16Gemm, WgmmaKOrderConversionMatchesItsDefinition) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int j = 0; j < 64; ++j) {
    std::vector<std::uint16_t> one(64, 0);
    one[w4a16_wgmma_k_source(j)] = 1;
    EXPECT_EQ(to_wgmma_k_order(one, 1, 64)[j], 1) << "column " << j;
  }
  const std::int64_t rows = 37, k = 192, lds = 200, ldd = 256;
  std::vector<std::uint16_t> src(rows * lds), packed(rows * k);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (auto& v : src) v = static_cast<std::uint16_t>(bits(rng));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < k; ++c) packed[r * k + c] = src[r * lds + c];
  const std::vector<std::uint16_t> want = to_wgmma_k_order(packed, rows, k);
  DeviceArray<std::uint16_t> d_src(src), d_dst(rows * ldd);
  ASSERT_EQ(cudaMemset(d_dst.ptr, 0xAB, d_dst.count * 2), cudaSuccess);
  w4a16_to_wgmma_k_order(d_src.ptr, lds, d_dst.ptr, ldd, rows, k, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<std::uint16_t> got = d_dst.download();
  int bad = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < ldd; ++c) {
      const std::uint16_t expect = c < k ? want[r * k + c] : 0xABAB;
      if (got[r * ldd + c] != expect && bad++ < 5)
        ADD_FAILURE() << "row " << r << " column " << c << ": " << got[r * ldd + c] << " vs "
                      << expect;
    }
  EXPECT_EQ(bad, 0);
  // Gathered: dst row r is source row row_index[r] (repeats, any order), strides as above; an
  // index outside [0, rows) gives a zero row.
  std::vector<std::int32_t> row_index(53);
  std::uniform_int_distribution<int> pick(0, rows - 1);
  for (auto& r : row_index) r = pick(rng);
  row_index[5] = -1;
  row_index[17] = static_cast<std::int32_t>(rows);
  row_index[40] = 1 << 30;
  const std::int64_t grows = static_cast<std::int64_t>(row_index.size());
  std::vector<std::uint16_t> gpacked(grows * k, 0);
  for (std::int64_t r = 0; r < grows; ++r)
    if (row_index[r] >= 0 && row_index[r] < rows)
      for (std::int64_t c = 0; c < k; ++c) gpacked[r * k + c] = src[row_index[r] * lds + c];
  const std::vector<std::uint16_t> gwant = to_wgmma_k_order(gpacked, grows, k);
  DeviceArray<std::int32_t> d_row_index(row_index);
  DeviceArray<std::uint16_t> d_gdst(grows * ldd);
  ASSERT_EQ(cudaMemset(d_gdst.ptr, 0xAB, d_gdst.count * 2), cudaSuccess);
  w4a16_to_wgmma_k_order(d_src.ptr, lds, d_gdst.ptr, ldd, grows, k, nullptr, d_row_index.ptr, rows);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<std::uint16_t> ggot = d_gdst.download();
  for (std::int64_t r = 0; r < grows; ++r)
    for (std::int64_t c = 0; c < ldd; ++c) {
      const std::uint16_t expect = c < k ? gwant[r * k + c] : 0xABAB;
      if (ggot[r * ldd + c] != expect && bad++ < 5)
        ADD_FAILURE() << "gathered row " << r << " column " << c << ": " << ggot[r * ldd + c]
                      << " vs " << expect;
    }
  EXPECT_EQ(bad, 0);
  auto expect_error = [&](const char* what, auto&& call) {
    try {
      call();
      ADD_FAILURE() << "expected moekit::Error naming " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("k:",
               [&] { w4a16_to_wgmma_k_order(d_src.ptr, 0, d_dst.ptr, 0, rows, 96, nullptr); });
  expect_error("lds",
               [&] { w4a16_to_wgmma_k_order(d_src.ptr, 100, d_dst.ptr, 0, 2, 128, nullptr); });
  expect_error("src",
               [&] { w4a16_to_wgmma_k_order(d_src.ptr + 1, 0, d_dst.ptr, 0, 2, 64, nullptr); });
  expect_error("dst",
               [&] { w4a16_to_wgmma_k_order(d_src.ptr, 0, d_src.ptr + 64, 0, 2, 64, nullptr); });
  expect_error("src_rows", [&] {
    w4a16_to_wgmma_k_order(d_src.ptr, lds, d_gdst.ptr, ldd, grows, k, nullptr, d_row_index.ptr, 0);
  });
  expect_error("j:", [&] { w4a16_wgmma_k_source(64); });
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
      W4A16GemmArgs g1;
      g1.format = f;
      g1.epilogue = W4Epilogue::kSwigluOai;
      g1.num_experts = e;
      g1.m = m;
      g1.n = 2 * inter;
      g1.k = h;
      g1.expert_offsets = d_offsets.ptr;
      g1.w = d_w13.ptr;
      g1.w_scales = d_s13.ptr;
      g1.alpha = f == W4Format::kNVFP4 ? d_a13.ptr : nullptr;
      g1.bias = d_b1.ptr;
      g1.out = d_act.ptr;
      W4A16GemmArgs g2 = g1;
      g2.epilogue = W4Epilogue::kNone;
      g2.n = h;
      g2.k = inter;
      g2.a = d_act.ptr;
      g2.w = d_w2.ptr;
      g2.w_scales = d_s2.ptr;
      g2.alpha = f == W4Format::kNVFP4 ? d_a2.ptr : nullptr;
      g2.bias = d_b2.ptr;
      g2.out = d_out.ptr;
      auto run = [&](const W4A16GemmArgs& g, DeviceArray<std::uint16_t>& out) {
        EXPECT_EQ(cudaMemset(out.ptr, 0xFF, out.count * 2), cudaSuccess);
        w4a16_grouped_gemm(g);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return out.download();
      };
      // Large tile, natural order.
      W4A16GemmArgs l1 = g1, l2 = g2;
      l1.tile = l2.tile = W4Tile::kLarge;
      l1.a = d_x.ptr;
      const std::vector<std::uint16_t> act_large = run(l1, d_act), out_large = run(l2, d_out);
      // wgmma (kAuto on wgmma-order A), natural then wgmma-order output, then GEMM2.
      g1.a = d_xw.ptr;
      g1.a_order = g2.a_order = W4KOrder::kWgmma;
      EXPECT_EQ(w4a16_resolve_tile(g1), W4Tile::kWgmma);
      const std::vector<std::uint16_t> act_natural = run(g1, d_act);
      g1.out_order = W4KOrder::kWgmma;
      const std::vector<std::uint16_t> act_k = run(g1, d_act);
      EXPECT_EQ(act_k, to_wgmma_k_order(act_natural, m, inter)) << "out_order changed values";
      const std::vector<std::uint16_t> out_wgmma = run(g2, d_out);
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

// a_order must be kWgmma exactly for the wgmma tile; out_order kWgmma needs the wgmma tile and an
// output width that is a multiple of 64; the wgmma tile takes no row_index (TMA reads A's rows in
// order); wgmma_tokens is one of its token tiles. Each refusal names the argument.
TEST(W4A16Gemm, WgmmaKOrderArgumentsAreChecked) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::int32_t> d_offsets(std::vector<std::int32_t>{0, 1});
  DeviceArray<std::uint16_t> d_a(128), d_out(128);
  DeviceArray<u8> d_w(16 * 128 / 2), d_s(256);
  W4A16GemmArgs args;
  args.num_experts = 1;
  args.m = 1;
  args.n = 16;
  args.k = 128;
  args.expert_offsets = d_offsets.ptr;
  args.a = d_a.ptr;
  args.w = d_w.ptr;
  args.w_scales = d_s.ptr;
  args.out = d_out.ptr;
  auto expect_error = [&](const W4A16GemmArgs& a, const char* what) {
    try {
      w4a16_grouped_gemm(a);
      ADD_FAILURE() << "expected moekit::Error naming " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  W4A16GemmArgs x = args;
  x.tile = W4Tile::kWgmma;  // natural A
  expect_error(x, "a_order");
  x = args;
  x.tile = W4Tile::kLarge;
  x.a_order = W4KOrder::kWgmma;
  expect_error(x, "a_order");
  x = args;
  x.out_order = W4KOrder::kWgmma;  // tile decode8
  expect_error(x, "out_order");
  x = args;
  x.a_order = x.out_order = W4KOrder::kWgmma;  // output width 16
  expect_error(x, "out_order");
  x = args;
  x.a_order = W4KOrder::kWgmma;
  x.row_index = d_offsets.ptr;  // any device array: refused before the launch
  expect_error(x, "row_index");
  x = args;
  x.wgmma_tokens = 64;  // no such token tile
  expect_error(x, "wgmma_tokens");
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The wgmma tile refuses scales that are not 16-byte aligned (bulk copies of
// the 16-byte-granular scale records).
TEST(W4A16Gemm, WgmmaRejectsMisalignedScales) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::int32_t> d_offsets(std::vector<std::int32_t>{0, 1});
  DeviceArray<std::uint16_t> d_a(64), d_out(16);
  DeviceArray<u8> d_w(512), d_s(128);
  W4A16GemmArgs args;
  args.tile = W4Tile::kWgmma;
  args.a_order = W4KOrder::kWgmma;
  args.num_experts = 1;
  args.m = 1;
  args.n = 16;
  args.k = 64;
  args.expert_offsets = d_offsets.ptr;
  args.a = d_a.ptr;
  args.w = d_w.ptr;
  args.w_scales = d_s.ptr + 2;
  args.out = d_out.ptr;
  try {
    w4a16_grouped_gemm(args);
    FAIL() << "expected moekit::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w_scales"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moekit::gemm
