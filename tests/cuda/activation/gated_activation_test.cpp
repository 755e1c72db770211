// SiLU-and-mul / SwiGLU-OAI (+ expert bias) kernels between the grouped GEMMs, and the whole expert chain
// (GEMM1 -> activation -> GEMM2) against a float64 reference.
// Bounds: silu_and_mul_bf16 rel L2 < 5e-3 (bf16 output rounding ~1.1e-3 RMS). The fp8 variant:
// every scale equals max(amax,1e-10)/448 of its group to 1e-5 relative, and every dequantized value
// is within half an e4m3 step of the fp32 activation (|q*s - y| <= 2^-4 |y| for normals,
// <= 2^-10 s for subnormals; x1.01 for __expf). Chain: bf16 < 1e-2; fp8 (activations re-quantized
// to e4m3 between the GEMMs, ~2.5% RMS per element) < 4e-2, against the dequantized weights.
#include <gmock/gmock.h>

#include "cuda/gemm_bf16fp8/gemm_test_util.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"
#include "cuda/activation/gated_activation.hpp"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/tuning/sm90_tuning.hpp"

namespace moekit {
namespace {

using namespace gemm_test;

double silu(double x) { return x / (1.0 + std::exp(-x)); }

TEST(SiluAndMul, Bf16MatchesReferenceAndRespectsRowCount) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int rows = 77, used = 70, inter = 264;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<std::uint16_t> in(static_cast<std::size_t>(rows) * 2 * inter);
  for (auto& x : in) x = float_to_bf16(dist(rng));
  DeviceArray<std::uint16_t> d_in(in), d_out(static_cast<std::size_t>(rows) * inter);
  DeviceArray<std::int32_t> d_rows(std::vector<std::int32_t>{used});
  MOEKIT_TEST_CUDA(cudaMemset(d_out.get(), 0xff, static_cast<std::size_t>(rows) * inter * 2));
  cuda::gated_activation_bf16(d_in.get(), d_out.get(), rows, inter, d_rows.get(), cuda::GatedActivationArgs{}, nullptr);
  MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
  const auto bits = d_out.download();
  std::vector<double> out, ref;
  for (int r = 0; r < used; ++r)
    for (int c = 0; c < inter; ++c) {
      const double g = bf16_to_float(in[static_cast<std::size_t>(r) * 2 * inter + c]);
      const double u = bf16_to_float(in[static_cast<std::size_t>(r) * 2 * inter + inter + c]);
      ref.push_back(silu(g) * u);
      out.push_back(bf16_to_float(bits[static_cast<std::size_t>(r) * inter + c]));
    }
  EXPECT_LT(rel_l2(out, ref), 5e-3);
  int clobbered = 0;
  for (std::size_t i = static_cast<std::size_t>(used) * inter; i < bits.size(); ++i)
    clobbered += bits[i] != 0xffff;
  EXPECT_EQ(clobbered, 0);
}

TEST(SiluAndMul, Fp8BlockQuantizesEachGroup) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int rows = 45, used = 41, inter = 384, kb = inter / 128;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<std::uint16_t> in(static_cast<std::size_t>(rows) * 2 * inter);
  for (auto& x : in) x = float_to_bf16(dist(rng));
  // One all-zero group (row 0, group 1): its scale must be 1e-10/448, its codes zero.
  for (int c = 128; c < 256; ++c) in[static_cast<std::size_t>(inter) + c] = 0;
  DeviceArray<std::uint16_t> d_in(in);
  DeviceArray<std::uint8_t> d_q(static_cast<std::size_t>(rows) * inter);
  DeviceArray<float> d_s(static_cast<std::size_t>(rows) * kb);
  DeviceArray<std::int32_t> d_rows(std::vector<std::int32_t>{used});
  MOEKIT_TEST_CUDA(cudaMemset(d_q.get(), 0x7f, static_cast<std::size_t>(rows) * inter));
  MOEKIT_TEST_CUDA(cudaMemset(d_s.get(), 0xff, static_cast<std::size_t>(rows) * kb * 4));
  cuda::gated_activation_quant_fp8_block(d_in.get(), d_q.get(), d_s.get(), rows, inter, d_rows.get(), cuda::GatedActivationArgs{}, nullptr);
  MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
  const auto q = d_q.download();
  const auto s = d_s.download();
  int bad_scale = 0, bad_value = 0;
  for (int r = 0; r < used; ++r)
    for (int b = 0; b < kb; ++b) {
      float y[128], amax = 0;
      for (int j = 0; j < 128; ++j) {
        const int c = b * 128 + j;
        const float g = bf16_to_float(in[static_cast<std::size_t>(r) * 2 * inter + c]);
        const float u = bf16_to_float(in[static_cast<std::size_t>(r) * 2 * inter + inter + c]);
        y[j] = g / (1.0f + std::exp(-g)) * u;
        amax = std::max(amax, std::fabs(y[j]));
      }
      const float s_ref = std::max(amax, 1e-10f) / 448.0f;
      const float sk = s[static_cast<std::size_t>(r) * kb + b];
      bad_scale += !(std::fabs(sk - s_ref) <= 1e-5f * s_ref);
      for (int j = 0; j < 128; ++j) {
        const float deq = e4m3_to_float(q[static_cast<std::size_t>(r) * inter + b * 128 + j]) * sk;
        const float tol = std::max(0.0625f * std::fabs(y[j]), std::ldexp(sk, -10)) * 1.01f;
        bad_value += !(std::fabs(deq - y[j]) <= tol);
      }
    }
  EXPECT_EQ(bad_scale, 0);
  EXPECT_EQ(bad_value, 0);
  EXPECT_FLOAT_EQ(s[1], 1e-10f / 448.0f);
  int clobbered = 0;
  for (std::size_t i = static_cast<std::size_t>(used) * inter; i < q.size(); ++i)
    clobbered += q[i] != 0x7f;
  EXPECT_EQ(clobbered, 0);
}

// SiLU-and-mul and SwiGLU-OAI (gpt-oss), each with and without GEMM1's per-expert bias: rows
// sorted by expert (with empty experts and one expert holding most rows), the bias row found from
// expert_offsets on the device; gate and up spread over [-12, 12] so both clamps at limit 7 are
// exercised. bf16: rel L2 < 5e-3 against float64; fp8: the per-group checks of
// Fp8BlockQuantizesEachGroup.
double swiglu_oai(double g, double u, double alpha, double limit) {
  g = std::min(g, limit);
  u = std::clamp(u, -limit, limit);
  return g / (1.0 + std::exp(-alpha * g)) * (u + 1.0);
}

void check_gated_activation(Activation kind, bool with_bias, std::uint64_t seed) {
  SCOPED_TRACE(std::string(activation_name(kind)) + (with_bias ? " + bias" : ""));
  const std::vector<int> counts{3, 0, 29, 0, 0, 1, 8};
  const int E = static_cast<int>(counts.size()), inter = 256, kb = inter / 128;
  const auto off = offsets_of(counts);
  const int used = off[E], rows = used + 5;  // 5 capacity rows past offsets[E]: untouched
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f);
  std::normal_distribution<float> small(0.0f, 1.0f);
  std::vector<std::uint16_t> in(static_cast<std::size_t>(rows) * 2 * inter);
  for (auto& x : in) x = float_to_bf16(wide(rng));
  std::vector<float> bias(static_cast<std::size_t>(E) * 2 * inter);
  for (auto& x : bias) x = small(rng);
  const float alpha = 1.702f, limit = 7.0f;
  std::vector<double> y(static_cast<std::size_t>(used) * inter);
  for (int e = 0; e < E; ++e)
    for (int r = off[e]; r < off[e + 1]; ++r)
      for (int c = 0; c < inter; ++c) {
        const std::size_t row = static_cast<std::size_t>(r) * 2 * inter;
        const float* b = bias.data() + static_cast<std::size_t>(e) * 2 * inter;
        const double g = bf16_to_float(in[row + c]) + (with_bias ? static_cast<double>(b[c]) : 0.0);
        const double u =
            bf16_to_float(in[row + inter + c]) + (with_bias ? static_cast<double>(b[inter + c]) : 0.0);
        y[static_cast<std::size_t>(r) * inter + c] =
            kind == Activation::kSwigluOai ? swiglu_oai(g, u, alpha, limit) : silu(g) * u;
      }
  DeviceArray<std::uint16_t> d_in(in), d_out(static_cast<std::size_t>(rows) * inter);
  DeviceArray<float> d_bias(bias);
  DeviceArray<std::int32_t> d_off(off);
  cuda::GatedActivationArgs act;
  act.kind = kind;
  act.swiglu_alpha = alpha;
  act.swiglu_limit = limit;
  act.bias = with_bias ? d_bias.get() : nullptr;
  act.expert_offsets = d_off.get();
  act.num_experts = E;

  MOEKIT_TEST_CUDA(cudaMemset(d_out.get(), 0xff, static_cast<std::size_t>(rows) * inter * 2));
  cuda::gated_activation_bf16(d_in.get(), d_out.get(), rows, inter, d_off.get() + E, act, nullptr);
  MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
  const auto bits = d_out.download();
  std::vector<double> out;
  for (std::size_t i = 0; i < y.size(); ++i) out.push_back(bf16_to_float(bits[i]));
  EXPECT_LT(rel_l2(out, y), 5e-3);
  int clobbered = 0;
  for (std::size_t i = y.size(); i < bits.size(); ++i) clobbered += bits[i] != 0xffff;
  EXPECT_EQ(clobbered, 0);

  DeviceArray<std::uint8_t> d_q(static_cast<std::size_t>(rows) * inter);
  DeviceArray<float> d_s(static_cast<std::size_t>(rows) * kb);
  MOEKIT_TEST_CUDA(cudaMemset(d_q.get(), 0x7f, static_cast<std::size_t>(rows) * inter));
  cuda::gated_activation_quant_fp8_block(d_in.get(), d_q.get(), d_s.get(), rows, inter,
                                         d_off.get() + E, act, nullptr);
  MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
  const auto q = d_q.download();
  const auto s = d_s.download();
  int bad_scale = 0, bad_value = 0;
  for (int r = 0; r < used; ++r)
    for (int b = 0; b < kb; ++b) {
      double amax = 0;
      for (int j = 0; j < 128; ++j)
        amax = std::max(amax, std::fabs(y[static_cast<std::size_t>(r) * inter + b * 128 + j]));
      const double s_ref = std::max(amax, 1e-10) / 448.0;
      const double sk = s[static_cast<std::size_t>(r) * kb + b];
      // __expf and the fp32 evaluation: 1e-5 relative on the scale (as in the bias-free test).
      bad_scale += !(std::fabs(sk - s_ref) <= 1e-5 * s_ref);
      for (int j = 0; j < 128; ++j) {
        const double yj = y[static_cast<std::size_t>(r) * inter + b * 128 + j];
        const double deq = e4m3_to_float(q[static_cast<std::size_t>(r) * inter + b * 128 + j]) * sk;
        const double tol = std::max(0.0625 * std::fabs(yj), std::ldexp(sk, -10)) * 1.01 + 1e-6 * s_ref;
        bad_value += !(std::fabs(deq - yj) <= tol);
      }
    }
  EXPECT_EQ(bad_scale, 0);
  EXPECT_EQ(bad_value, 0);
  clobbered = 0;
  for (std::size_t i = static_cast<std::size_t>(used) * inter; i < q.size(); ++i)
    clobbered += q[i] != 0x7f;
  EXPECT_EQ(clobbered, 0);
}


TEST(GatedActivation, EveryKindWithAndWithoutExpertBias) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const Activation kind : {Activation::kSiluAndMul, Activation::kSwigluOai})
    for (const bool with_bias : {false, true}) check_gated_activation(kind, with_bias, seed);
}

TEST(GatedActivation, RejectsBadArgumentsNamingThem) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::uint8_t> buf(1 << 16);
  DeviceArray<std::int32_t> n(std::vector<std::int32_t>{1});
  // Each case: the activation arguments, whether the fp8 entry point is called, the message.
  auto expect_error = [&](const cuda::GatedActivationArgs& act, bool fp8, const char* what) {
    SCOPED_TRACE(what);
    try {
      if (fp8)
        cuda::gated_activation_quant_fp8_block(buf.get(), buf.get(),
                                               reinterpret_cast<float*>(buf.get()), 4, 128, n.get(),
                                               act, nullptr);
      else
        cuda::gated_activation_bf16(buf.get(), buf.get(), 4, 64, n.get(), act, nullptr);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(what));
    }
  };
  cuda::GatedActivationArgs bias_without_offsets;
  bias_without_offsets.bias = reinterpret_cast<const float*>(buf.get());
  expect_error(bias_without_offsets, false, "act.expert_offsets: expected");
  cuda::GatedActivationArgs gelu;
  gelu.kind = Activation::kGeluErfAndMul;
  expect_error(gelu, false, "act.kind: expected");
  cuda::GatedActivationArgs bad_limit;
  bad_limit.kind = Activation::kSwigluOai;
  bad_limit.swiglu_limit = -1.0f;
  expect_error(bad_limit, true, "act.swiglu_limit: expected");
}

TEST(SiluAndMul, RejectsBadArgumentsNamingThem) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::uint8_t> buf(1 << 16);
  DeviceArray<std::int32_t> n(std::vector<std::int32_t>{1});
  try {
    cuda::gated_activation_quant_fp8_block(buf.get(), buf.get(), reinterpret_cast<float*>(buf.get()), 4,
                                       96, n.get(), cuda::GatedActivationArgs{}, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("intermediate: expected"));
  }
  try {
    cuda::gated_activation_bf16(buf.get(), buf.get(), 4, 64, nullptr, cuda::GatedActivationArgs{}, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("num_rows: expected"));
  }
}

// GEMM1 [R, 2I] -> SiLU-and-mul -> GEMM2 [R, H] over experts, the chain an Experts backend runs.
void run_chain(gemm::GemmScheme t, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  if (!gemm::grouped_gemm_available(t, gemm::GemmKernel::kCutlassWide))
    GTEST_SKIP() << "built without CUTLASS";
  const bool fp8 = t == gemm::GemmScheme::kFP8Block;
  const std::vector<int> counts{5, 0, 130, 1, 64};
  const int E = static_cast<int>(counts.size()), H = 256, I = 384;
  const auto off = offsets_of(counts);
  const int R = off[E];
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(R) * H), w13(static_cast<std::size_t>(E) * 2 * I * H),
      w2(static_cast<std::size_t>(E) * H * I);
  for (auto& v : x) v = dist(rng);
  for (auto& v : w13) v = dist(rng) * 0.08f;
  for (auto& v : w2) v = dist(rng) * 0.05f;
  DeviceArray<std::int32_t> d_off(off);
  DeviceArray<std::uint16_t> d_h1(static_cast<std::size_t>(R) * 2 * I), d_out(static_cast<std::size_t>(R) * H);
  DeviceArray<std::uint8_t> d_act(static_cast<std::size_t>(R) * I * 2);
  DeviceArray<float> d_act_s(static_cast<std::size_t>(R) * I / 128);
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(t, E);
  DeviceArray<std::uint8_t> d_ws(ws);
  std::vector<std::uint8_t> xb, w13b, w2b;
  std::vector<float> xs, w13s, w2s, xv = x, w13v = w13, w2v = w2;
  auto to_bf16_bytes = [](std::vector<float>& v) {
    std::vector<std::uint8_t> b;
    for (auto& f : v) {
      auto h = float_to_bf16(f);
      f = bf16_to_float(h);
      b.push_back(h & 0xff), b.push_back(h >> 8);
    }
    return b;
  };
  if (fp8) {
    auto qx = quantize_act_1x128(x, R, H);
    auto q13 = quantize_weight_128x128(w13, E, 2 * I, H);
    auto q2 = quantize_weight_128x128(w2, E, H, I);
    xb = qx.q, xs = qx.scales, xv = qx.dequant;
    w13b = q13.q, w13s = q13.scales, w13v = q13.dequant;
    w2b = q2.q, w2s = q2.scales, w2v = q2.dequant;
  } else {
    xb = to_bf16_bytes(xv), w13b = to_bf16_bytes(w13v), w2b = to_bf16_bytes(w2v);
  }
  DeviceArray<std::uint8_t> dx(xb), d13(w13b), d2(w2b);
  DeviceArray<float> dxs(std::max<std::size_t>(xs.size(), 1)), d13s(std::max<std::size_t>(w13s.size(), 1)),
      d2s(std::max<std::size_t>(w2s.size(), 1));
  dxs.upload(xs), d13s.upload(w13s), d2s.upload(w2s);

  gemm::GroupedGemmArgs g1;
  g1.scheme = t;
  g1.num_experts = E, g1.n = 2 * I, g1.k = H, g1.rows = R, g1.expert_offsets = d_off.get();
  g1.a = dx.get(), g1.w = d13.get(), g1.out = d_h1.get();
  g1.a_scales = fp8 ? dxs.get() : nullptr, g1.w_scales = fp8 ? d13s.get() : nullptr;
  g1.workspace = d_ws.get(), g1.workspace_bytes = ws;
  gemm::grouped_gemm(g1, tuning::sm90::gemm_config(t, E, R, 2 * I, H, false, true));
  if (fp8) {
    cuda::gated_activation_quant_fp8_block(d_h1.get(), d_act.get(), d_act_s.get(), R, I,
                                       d_off.get() + E, cuda::GatedActivationArgs{}, nullptr);
  } else {
    cuda::gated_activation_bf16(d_h1.get(), d_act.get(), R, I, d_off.get() + E, cuda::GatedActivationArgs{}, nullptr);
  }
  gemm::GroupedGemmArgs g2 = g1;
  g2.n = H, g2.k = I, g2.a = d_act.get(), g2.w = d2.get(), g2.out = d_out.get();
  g2.a_scales = fp8 ? d_act_s.get() : nullptr, g2.w_scales = fp8 ? d2s.get() : nullptr;
  gemm::grouped_gemm(g2, tuning::sm90::gemm_config(t, E, R, H, I, false, true));
  MOEKIT_TEST_CUDA(cudaDeviceSynchronize());

  auto h1 = grouped_reference(xv, w13v, off, 2 * I, H);
  std::vector<float> act(static_cast<std::size_t>(R) * I);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < I; ++c)
      act[static_cast<std::size_t>(r) * I + c] = static_cast<float>(
          silu(h1[static_cast<std::size_t>(r) * 2 * I + c]) * h1[static_cast<std::size_t>(r) * 2 * I + I + c]);
  const auto ref = grouped_reference(act, w2v, off, H, I);
  const auto bits = d_out.download();
  std::vector<double> out(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) out[i] = bf16_to_float(bits[i]);
  const double err = rel_l2(out, ref);
  ::testing::Test::RecordProperty("rel_l2", std::to_string(err));
  EXPECT_LT(err, fp8 ? 4e-2 : 1e-2) << "rel L2 " << err;
}

TEST(ExpertChain, Bf16) {
  MOEKIT_REQUIRE_GPU();
  run_chain(gemm::GemmScheme::kBF16, test_seed());
}

TEST(ExpertChain, Fp8Block) {
  MOEKIT_REQUIRE_GPU();
  run_chain(gemm::GemmScheme::kFP8Block, test_seed());
}

}  // namespace
}  // namespace moekit
