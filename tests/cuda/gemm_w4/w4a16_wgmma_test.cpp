// Tests of the SM90 W4A16 wgmma tile (W4Tile::kWgmma, sm90_w4a16_wgmma_gemm.cuh) beyond the
// parametrized grouped-GEMM cases (w4a16_grouped_gemm_test.cpp, which run it too): long K, large
// and partial token tiles, both of its configurations, graph replay, argument validation. Error
// bound as there: relative L2 < 4e-3 vs float64 (fp32 accumulation + the final bf16 rounding).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
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

// The wgmma tile on shapes its small cases do not reach: 20 K chunks (the
// weight and activation rings wrap several times), n = 272 (two full 128-row
// tiles + one 16-row tile), gathered rows, bias, row scale. Routing A: experts
// with 0, 1, 31, 64, 65, 129 and 300 rows (the 128-token configuration: full
// tiles and every narrower tail); routing B: 700 and 1000 rows (>= 384 rows
// per expert: the 256-token configuration, partial last tiles). Checked
// against float64 (same bound as above); repeated runs, a capped grid (3 CTAs)
// and a CUDA-graph replay bitwise equal to the first run.
TEST(W4A16Gemm, WgmmaLongKMatchesFloat64AndReplays) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  struct Config {
    std::vector<int> rows_per_expert;
    W4Format f;
    W4Epilogue epi;
  };
  const std::vector<int> routing_a = {31, 0, 129, 1, 300, 64, 65}, routing_b = {700, 1000};
  const Config configs[] = {{routing_a, W4Format::kNVFP4, W4Epilogue::kNone},
                            {routing_a, W4Format::kNVFP4, W4Epilogue::kSiluAndMul},
                            {routing_a, W4Format::kMXFP4, W4Epilogue::kNone},
                            {routing_a, W4Format::kMXFP4, W4Epilogue::kSiluAndMul},
                            {routing_b, W4Format::kNVFP4, W4Epilogue::kSiluAndMul},
                            {routing_b, W4Format::kMXFP4, W4Epilogue::kNone}};
  const std::int64_t k = 1280;
  for (const Config& cfg : configs) {
    const W4Format f = cfg.f;
    const W4Epilogue epi = cfg.epi;
    const int e = static_cast<int>(cfg.rows_per_expert.size());
    std::vector<std::int32_t> offsets(e + 1, 0);
    for (int i = 0; i < e; ++i) offsets[i + 1] = offsets[i] + cfg.rows_per_expert[i];
    const int m = offsets[e];
    {
      SCOPED_TRACE(w4_format_name(f) + " epi " + std::to_string(static_cast<int>(epi)) + " m " +
                   std::to_string(m));
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
      DeviceArray<std::uint16_t> d_a(a), d_out(m * width);
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
      args.a = d_a.ptr;
      args.row_index = d_row_index.ptr;
      args.w = d_w.ptr;
      args.w_scales = d_s.ptr;
      args.alpha = d_alpha.ptr;
      args.bias = d_bias.ptr;
      args.row_scale = d_row_scale.ptr;
      args.out = d_out.ptr;
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

// The wgmma tile refuses scales that are not 16-byte aligned (bulk copies of
// the 16-byte-granular scale records).
TEST(W4A16Gemm, WgmmaRejectsMisalignedScales) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::int32_t> d_offsets(std::vector<std::int32_t>{0, 1});
  DeviceArray<std::uint16_t> d_a(64), d_out(16);
  DeviceArray<u8> d_w(512), d_s(128);
  W4A16GemmArgs args;
  args.tile = W4Tile::kWgmma;
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
