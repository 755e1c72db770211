// The bf16 grouped GEMM's decode kernel (GemmKernel::kDecode) against a float64 reference and
// against the CUTLASS narrow kernel on the same inputs.
//
// Bound, per element (inputs are bf16, so every product is exact in fp32 and the kernel's only
// errors are its fp32 summation and the final bf16 rounding):
//   |out - ref| <= 2^-8 |ref| + K 2^-24 sum_k |a_k b_k|
// (half a bf16 ulp is <= 2^-9 |x|; doubled for the rounding of the perturbed fp32 sum; the second
// term bounds any order of fp32 summation of K terms). Against CUTLASS (also fp32 accumulation,
// another order): twice that. Besides, at most 2% of the outputs may differ from the bf16-rounded
// reference at all (the fp32 error crosses a rounding boundary rarely), repeated runs (and PDL
// launches) are bitwise equal, rows past expert_offsets[E] and the ldd pad keep their poison.
#include <gmock/gmock.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>

#include "cuda/gemm_bf16fp8/gemm_test_util.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/tuning/sm90_tuning.hpp"

namespace moekit {
namespace {

using gemm::GroupedGemmArgs;
using gemm::GemmScheme;

// The decode kernel's config for E experts and `rows` rows (the rules' 8 / 16 tokens per unit), on
// the TMA weight ring or the register ring.
gemm::GemmConfig decode_config(int experts, std::int64_t rows, bool tma = true) {
  gemm::GemmConfig c = tuning::sm90::gemm_config_for(GemmScheme::kBF16, gemm::GemmKernel::kDecode,
                                                     experts, rows, 128, 128, false, true);
  c.decode_tma = tma;
  return c;
}

gemm::GemmConfig kernel_config(gemm::GemmKernel kernel) {
  gemm::GemmConfig c;
  c.kernel = kernel;
  return c;
}
using namespace gemm_test;

constexpr std::uint16_t kPoison = 0xffff;  // bf16 NaN
constexpr double kFp32Unit = 1.0 / (1 << 24);

struct DecodeShape {
  std::vector<int> counts;  // rows per expert
  int n, k;
  int extra_rows = 0;  // capacity past the used rows (must stay untouched)
  int lda_pad = 0;     // A row stride k + lda_pad (pad = NaN: reading it would show)
  int ldd_pad = 0;     // D row stride n + ldd_pad (pad must stay untouched)
};

// Random bf16 operands of one shape: the bits (A with its NaN pad) and the values.
struct HostOperands {
  std::vector<std::uint16_t> a_bits, b_bits;  // [rows, lda], [E, n, k]
  std::vector<float> a, b;                    // [rows, k], [E, n, k]
};
HostOperands random_operands(const DecodeShape& s, int rows, std::uint64_t seed) {
  const int experts = static_cast<int>(s.counts.size()), lda = s.k + s.lda_pad;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  HostOperands h;
  h.a_bits.assign(static_cast<std::size_t>(rows) * lda, kPoison);
  h.a.resize(static_cast<std::size_t>(rows) * s.k);
  h.b_bits.resize(static_cast<std::size_t>(experts) * s.n * s.k);
  h.b.resize(h.b_bits.size());
  for (int r = 0; r < rows; ++r)
    for (int x = 0; x < s.k; ++x) {
      const std::uint16_t bits = float_to_bf16(dist(rng));
      h.a_bits[static_cast<std::size_t>(r) * lda + x] = bits;
      h.a[static_cast<std::size_t>(r) * s.k + x] = bf16_to_float(bits);
    }
  for (std::size_t i = 0; i < h.b.size(); ++i)
    h.b[i] = bf16_to_float(h.b_bits[i] = float_to_bf16(dist(rng) * 0.05f));
  return h;
}

int used_rows(const DecodeShape& s) {
  int used = 0;
  for (int c : s.counts) used += c;
  return used;
}

// One shape's operands, their float64 products and the device copies.
struct Problem {
  DecodeShape s;
  int experts, used, rows, lda, ldd;
  std::vector<std::int32_t> offsets;
  HostOperands host;
  std::vector<double> ref, abs_ref;  // [used, n]: sum a b, sum |a b|
  DeviceArray<std::uint16_t> d_a, d_b;
  DeviceArray<std::int32_t> d_off;

  Problem(const DecodeShape& shape, std::uint64_t seed)
      : s(shape),
        experts(static_cast<int>(shape.counts.size())),
        used(used_rows(shape)),
        rows(used + shape.extra_rows),
        lda(shape.k + shape.lda_pad),
        ldd(shape.n + shape.ldd_pad),
        offsets(offsets_of(shape.counts)),
        host(random_operands(shape, rows, seed)),
        d_a(host.a_bits),
        d_b(host.b_bits),
        d_off(offsets) {
    ref = grouped_reference(host.a, host.b, offsets, s.n, s.k);
    std::vector<float> abs_a(host.a.size()), abs_b(host.b.size());
    for (std::size_t i = 0; i < abs_a.size(); ++i) abs_a[i] = std::fabs(host.a[i]);
    for (std::size_t i = 0; i < abs_b.size(); ++i) abs_b[i] = std::fabs(host.b[i]);
    abs_ref = grouped_reference(abs_a, abs_b, offsets, s.n, s.k);
  }

  // D bits [rows, ldd] of one launch (poisoned first).
  std::vector<std::uint16_t> run(const gemm::GemmConfig& config, bool overlap_previous = false) {
    DeviceArray<std::uint16_t> d(static_cast<std::size_t>(rows) * ldd);
    EXPECT_EQ(cudaMemset(d.get(), 0xff, static_cast<std::size_t>(rows) * ldd * 2), cudaSuccess);
    const std::size_t ws = gemm::grouped_gemm_workspace_bytes(GemmScheme::kBF16, experts);
    DeviceArray<std::uint8_t> d_ws(ws);
    GroupedGemmArgs args;
    args.scheme = GemmScheme::kBF16;
    args.num_experts = experts;
    args.n = s.n;
    args.k = s.k;
    args.rows = rows;
    args.lda = lda;
    args.ldo = ldd;
    args.expert_offsets = d_off.get();
    args.a = d_a.get();
    args.w = d_b.get();
    args.out = d.get();
    args.workspace = d_ws.get();
    args.workspace_bytes = ws;
    args.overlap_previous = overlap_previous;
    gemm::grouped_gemm(args, config);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return d.download();
  }

  double out(const std::vector<std::uint16_t>& bits, int r, int j) const {
    return bf16_to_float(bits[static_cast<std::size_t>(r) * ldd + j]);
  }
  std::size_t at(int r, int j) const { return static_cast<std::size_t>(r) * s.n + j; }
  double bound(int r, int j) const {
    return std::ldexp(std::fabs(ref[at(r, j)]), -8) + s.k * kFp32Unit * abs_ref[at(r, j)];
  }

  // Poison kept outside [used, n], every used element within the bound, few off the rounded
  // reference.
  void check(const std::vector<std::uint16_t>& bits) const {
    int clobbered = 0, outside = 0, off_rounded = 0;
    double worst = 0;
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < ldd; ++j) {
        if (r >= used || j >= s.n) {
          clobbered += bits[static_cast<std::size_t>(r) * ldd + j] != kPoison;
          continue;
        }
        const double v = out(bits, r, j), want = ref[at(r, j)];
        const double err = std::fabs(v - want);  // NaN (unwritten) fails the next comparison
        if (!(err <= bound(r, j))) ++outside;
        worst = std::max(worst, err / bound(r, j));
        off_rounded += v != round_bf16(static_cast<float>(want));
      }
    EXPECT_EQ(clobbered, 0) << "elements past expert_offsets[E] or in the ldd pad written";
    EXPECT_EQ(outside, 0) << "elements outside the bound (worst error / bound " << worst << ")";
    const double total = static_cast<double>(used) * s.n;
    EXPECT_LE(off_rounded, 0.02 * total)
        << off_rounded << " of " << total << " differ from the rounded reference";
    ::testing::Test::RecordProperty("worst_error_over_bound", std::to_string(worst));
  }
};

// Decode against the reference, against CUTLASS narrow, and against itself (repeated, PDL).
void check_shape(const DecodeShape& shape) {
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (MOEKIT_TEST_SEED) n " << shape.n
                                    << " k " << shape.k << " E " << shape.counts.size());
  Problem p(shape, seed);
  std::vector<std::uint16_t> decode;
  const int e = static_cast<int>(shape.counts.size());
  decode = p.run(decode_config(e, p.rows));
  p.check(decode);
  EXPECT_TRUE(p.run(decode_config(e, p.rows)) == decode) << "repeated run differs";
  EXPECT_TRUE(p.run(decode_config(e, p.rows), true) == decode) << "PDL launch differs";
  // The register ring (Bf16CodecT) puts the same weight bits into the same fragments as the TMA
  // ring (Bf16TmaCodecT): the same output bits.
  EXPECT_TRUE(p.run(decode_config(e, p.rows, false)) == decode) << "register ring differs";
  EXPECT_TRUE(p.run(decode_config(e, p.rows, false), true) == decode)
      << "register ring PDL differs";
  if (p.used == 0) return;
  const auto narrow = p.run(kernel_config(gemm::GemmKernel::kCutlassNarrow));
  int outside = 0;
  std::vector<double> dv, nv;
  for (int r = 0; r < p.used; ++r)
    for (int j = 0; j < shape.n; ++j) {
      const double x = p.out(decode, r, j), y = p.out(narrow, r, j);
      outside += !(std::fabs(x - y) <= 2 * p.bound(r, j));
      dv.push_back(x), nv.push_back(y);
    }
  EXPECT_EQ(outside, 0) << "decode vs CUTLASS narrow: elements outside twice the bound";
  const double diff = rel_l2(dv, nv);
  ::testing::Test::RecordProperty("rel_l2_vs_narrow", std::to_string(diff));
  std::cout << "  rel L2 decode vs narrow " << diff << "\n";
}

class Bf16DecodeGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gemm::grouped_gemm_available(GemmScheme::kBF16, gemm::GemmKernel::kCutlassNarrow))
      GTEST_SKIP() << "built without CUTLASS";
  }
};

TEST_F(Bf16DecodeGemm, SingleRow) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{0, 0, 1, 0}, 256, 512, 3});
}

TEST_F(Bf16DecodeGemm, FewerThanEightRowsPerExpertAndEmptyExperts) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{3, 0, 5, 7, 1, 0}, 384, 1024, 2});
}

TEST_F(Bf16DecodeGemm, AllRowsToOneExpert) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{0, 0, 16, 0}, 128, 256});  // two 8-token tiles of one expert
  check_shape({{0, 40, 0}, 128, 256});     // 16-token units: three tiles, the last partial
}

TEST_F(Bf16DecodeGemm, NoRowsLeavesOutputUntouched) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{0, 0, 0}, 128, 128, 17});
}

// K past the last full 64-wide chunk (whole 16-byte halves masked), N % 16 == 8 (row g + 8 of the
// last tile absent), strided A (NaN pad) and D.
TEST_F(Bf16DecodeGemm, KAndNTailsStrided) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{2, 1, 3}, 8, 8, 1});
  check_shape({{2, 1, 3}, 24, 72, 0, 8, 8});
  check_shape({{5, 0, 9}, 200, 200, 2, 24, 16});
}

// Few units and a long K: the launcher splits K over a 2-CTA cluster (DSMEM reduction).
TEST_F(Bf16DecodeGemm, ClusterSplitK) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{1, 1}, 64, 4096});
}

// More units than CTA slots: every CTA streams several units (the ring crosses unit boundaries).
TEST_F(Bf16DecodeGemm, ManyUnitsPerCta) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{3, 8, 1, 0, 6, 2, 8, 4}, 2048, 512});
}

// A layer-like shape (qwen3-235b-a22b GEMM1 at one token: 8 of 16 experts, N = 2I, K = H).
TEST_F(Bf16DecodeGemm, LayerShape) {
  MOEKIT_REQUIRE_GPU();
  check_shape({{1, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0}, 3072, 4096});
}

// GEMM1 -> GEMM2 in one captured graph, GEMM2 a programmatic dependent of GEMM1 (it must wait for
// GEMM1's output before reading it); replayed after the routing changed on the device.
TEST_F(Bf16DecodeGemm, PdlChainInGraphFollowsDeviceOffsets) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  const int E = 4, n1 = 512, k1 = 1024, n2 = 256, rows = 12;
  Problem g1({{3, 0, 4, 5}, n1, k1}, seed);
  Problem g2({{3, 0, 4, 5}, n2, n1}, seed + 1);  // its b; A is GEMM1's output
  DeviceArray<std::uint16_t> d1(static_cast<std::size_t>(rows) * n1),
      d2(static_cast<std::size_t>(rows) * n2);
  GroupedGemmArgs a1;
  a1.scheme = GemmScheme::kBF16;
  a1.num_experts = E, a1.n = n1, a1.k = k1, a1.rows = rows;
  a1.expert_offsets = g1.d_off.get(), a1.a = g1.d_a.get(), a1.w = g1.d_b.get(), a1.out = d1.get();
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(GemmScheme::kBF16, E);
  DeviceArray<std::uint8_t> d_ws(ws);
  a1.workspace = d_ws.get(), a1.workspace_bytes = ws;
  GroupedGemmArgs a2 = a1;
  a2.n = n2, a2.k = n1, a2.a = d1.get(), a2.w = g2.d_b.get(), a2.out = d2.get();
  a2.overlap_previous = true;
  cudaStream_t stream;
  MOEKIT_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  a1.stream = a2.stream = stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  MOEKIT_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  gemm::grouped_gemm(a1, decode_config(E, rows));
  gemm::grouped_gemm(a2, decode_config(E, rows));
  MOEKIT_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  MOEKIT_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (const auto& counts : {std::vector<int>{3, 0, 4, 5}, std::vector<int>{0, 12, 0, 0}}) {
    const auto off = offsets_of(counts);
    g1.d_off.upload(off);
    MOEKIT_TEST_CUDA(cudaMemset(d1.get(), 0xff, static_cast<std::size_t>(rows) * n1 * 2));
    MOEKIT_TEST_CUDA(cudaMemset(d2.get(), 0xff, static_cast<std::size_t>(rows) * n2 * 2));
    MOEKIT_TEST_CUDA(cudaGraphLaunch(exec, stream));
    MOEKIT_TEST_CUDA(cudaStreamSynchronize(stream));
    const auto h1 = d1.download(), h2 = d2.download();
    std::vector<float> act(h1.size());
    for (std::size_t i = 0; i < h1.size(); ++i) act[i] = bf16_to_float(h1[i]);
    const auto ref1 = grouped_reference(g1.host.a, g1.host.b, off, n1, k1);
    const auto ref2 = grouped_reference(act, g2.host.b, off, n2, n1);
    std::vector<double> o1(ref1.size()), o2(ref2.size());
    for (std::size_t i = 0; i < o1.size(); ++i) o1[i] = bf16_to_float(h1[i]);
    for (std::size_t i = 0; i < o2.size(); ++i) o2[i] = bf16_to_float(h2[i]);
    // rel L2 of bf16 outputs: their rounding alone is ~1.1e-3 RMS.
    EXPECT_LT(rel_l2(o1, ref1), 2e-3) << "GEMM1, counts " << counts[0] << "," << counts[1];
    EXPECT_LT(rel_l2(o2, ref2), 2e-3) << "GEMM2 (PDL), counts " << counts[0] << "," << counts[1];
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(Bf16DecodeGemmConfig, OnlyBuiltForBf16AndW4A16) {
  EXPECT_TRUE(gemm::gemm_kernel_runs(gemm::GemmKernel::kDecode, GemmScheme::kBF16));
  EXPECT_TRUE(gemm::gemm_kernel_runs(gemm::GemmKernel::kDecode, GemmScheme::kW4A16MXFP4));
  EXPECT_FALSE(gemm::gemm_kernel_runs(gemm::GemmKernel::kDecode, GemmScheme::kFP8Block));
  EXPECT_FALSE(gemm::gemm_kernel_runs(gemm::GemmKernel::kDecode, GemmScheme::kW4A8MXFP4));
}

TEST_F(Bf16DecodeGemm, Fp8RefusesDecodeNamingTheConfig) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::uint8_t> buf(1 << 20);
  DeviceArray<std::int32_t> off(std::vector<std::int32_t>{0, 0});
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(GemmScheme::kFP8Block, 1);
  DeviceArray<std::uint8_t> d_ws(ws);
  GroupedGemmArgs a;
  a.scheme = GemmScheme::kFP8Block;
  a.num_experts = 1, a.n = 128, a.k = 128, a.rows = 4;
  a.expert_offsets = off.get(), a.a = buf.get(), a.w = buf.get(), a.out = buf.get();
  a.a_scales = reinterpret_cast<const float*>(buf.get());
  a.w_scales = buf.get();
  a.workspace = d_ws.get(), a.workspace_bytes = ws;
  try {
    gemm::grouped_gemm(a, kernel_config(gemm::GemmKernel::kDecode));
    ADD_FAILURE() << "no error for fp8 with the decode kernel";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("config.kernel: expected")) << e.what();
    EXPECT_THAT(e.what(), ::testing::HasSubstr("decode")) << e.what();
  }
}

// The decode config's fused GEMM1 (GroupedGemmArgs::row_index + gated): rows gathered from the
// unpermuted token matrix through row_index, gate | up halves (N = 2I) with a per-expert bias,
// SiLU-and-mul and SwiGLU-OAI in the epilogue, D [R, I]. Shape 1: six experts with empty ones,
// K = 200 (a K tail), <= 8 rows per expert (the 8-token kernel). Shape 2: two experts of 17 / 23
// rows (the 16-token kernel) and K = 1024, so that the few units take the cluster split-K.
// Against float64: rel L2 < 5e-3 (bf16 output rounding ~1.1e-3 RMS, fp32 sums, __expf); rows past
// offsets[E] keep their poison; repeated and PDL launches give the same bits.
TEST_F(Bf16DecodeGemm, GatedEpilogueWithRowIndexMatchesReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  struct GatedShape {
    std::vector<int> counts;
    int inter, k, tokens;
  };
  for (const GatedShape& shape : {GatedShape{{3, 0, 5, 1, 0, 2}, 72, 200, 6},
                                  GatedShape{{17, 23}, 72, 1024, 29}}) {
    const std::vector<int>& counts = shape.counts;
    const int E = static_cast<int>(counts.size()), I = shape.inter, N = 2 * I, K = shape.k,
              tokens = shape.tokens;
    SCOPED_TRACE("E " + std::to_string(E) + " K " + std::to_string(K));
    const auto off = offsets_of(counts);
    const int used = off[E], rows = used + 3;
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(K));
    const GatedInputs in = random_gated_inputs(rng, static_cast<std::size_t>(tokens), E, N, K);
    const std::vector<float>&x = in.x, &w = in.w, &bias = in.bias;
    std::vector<std::int32_t> row_index(static_cast<std::size_t>(rows));
    for (auto& r : row_index) r = static_cast<std::int32_t>(rng() % tokens);
    DeviceArray<std::uint16_t> d_x(in.x_bits), d_w(in.w_bits);
    DeviceArray<float> d_bias(bias);
    DeviceArray<std::int32_t> d_off(off), d_ri(row_index);
    const std::size_t ws = gemm::grouped_gemm_workspace_bytes(GemmScheme::kBF16, E);
    DeviceArray<std::uint8_t> d_ws(ws);
    for (const Activation kind : {Activation::kSiluAndMul, Activation::kSwigluOai}) {
      SCOPED_TRACE(std::string(activation_name(kind)));
      const gemm::GemmEpilogue act = test_gated_epilogue(kind, d_bias.get());
      const std::vector<double> ref =
          gated_grouped_reference(x, w, bias, off, row_index, N, K, kind == Activation::kSwigluOai,
                                  kTestSwigluAlpha, kTestSwigluLimit);
      std::vector<double> got;
      std::vector<std::uint16_t> first;
      // TMA ring (run, repeat, PDL), then the register ring (run, PDL): all the same bits.
      for (const auto& [pdl, tma] : {std::pair{false, true}, std::pair{false, true},
                                     std::pair{true, true}, std::pair{false, false},
                                     std::pair{true, false}}) {
        DeviceArray<std::uint16_t> d(static_cast<std::size_t>(rows) * I);
        MOEKIT_TEST_CUDA(cudaMemset(d.get(), 0xff, static_cast<std::size_t>(rows) * I * 2));
        GroupedGemmArgs a;
        a.scheme = GemmScheme::kBF16;
        a.num_experts = E, a.n = N, a.k = K, a.rows = rows;
        a.expert_offsets = d_off.get(), a.a = d_x.get(), a.w = d_w.get(), a.out = d.get();
        a.row_index = d_ri.get();
        a.epilogue = act;
        a.workspace = d_ws.get(), a.workspace_bytes = ws;
        a.overlap_previous = pdl;
        gemm::grouped_gemm(a, decode_config(E, rows, tma));
        MOEKIT_TEST_CUDA(cudaDeviceSynchronize());
        const auto bits = d.download();
        if (first.empty()) {
          first = bits;
          for (std::size_t i = 0; i < ref.size(); ++i) got.push_back(bf16_to_float(bits[i]));
          EXPECT_LT(rel_l2(got, ref), 5e-3);
          int clobbered = 0;
          for (std::size_t i = ref.size(); i < bits.size(); ++i) clobbered += bits[i] != kPoison;
          EXPECT_EQ(clobbered, 0);
        } else {
          EXPECT_TRUE(bits == first) << (pdl ? "PDL launch" : "repeated run") << " differs ("
                                     << (tma ? "TMA ring" : "register ring") << ")";
        }
      }
    }
  }
}

// row_index / a gated epilogue: only with the decode (or wgmma) kernel (an error naming the field
// and the kernel), and the epilogue itself (N % 16, SwiGLU's limit) is validated, naming it.
TEST_F(Bf16DecodeGemm, RowIndexAndGatedValidation) {
  MOEKIT_REQUIRE_GPU();
  DeviceArray<std::uint8_t> buf(1 << 20);
  DeviceArray<std::int32_t> off(std::vector<std::int32_t>{0, 4});
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(GemmScheme::kBF16, 1);
  DeviceArray<std::uint8_t> d_ws(ws);
  auto expect_error = [&](const GroupedGemmArgs& a, const gemm::GemmConfig& c,
                          const std::vector<std::string>& parts) {
    try {
      gemm::grouped_gemm(a, c);
      ADD_FAILURE() << "no error for " << parts[0];
    } catch (const Error& e) {
      for (const auto& p : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
    }
  };
  GroupedGemmArgs base;
  base.scheme = GemmScheme::kBF16;
  base.num_experts = 1, base.n = 128, base.k = 128, base.rows = 4;
  base.expert_offsets = off.get(), base.a = buf.get(), base.w = buf.get(), base.out = buf.get();
  base.workspace = d_ws.get(), base.workspace_bytes = ws;
  const gemm::GemmConfig narrow = kernel_config(gemm::GemmKernel::kCutlassNarrow);

  GroupedGemmArgs a = base;
  a.row_index = off.get();
  expect_error(a, narrow, {"row_index: expected", "cutlass_narrow"});
  a.row_index = nullptr;
  a.epilogue.kind = gemm::EpilogueKind::kSiluAndMul;
  expect_error(a, narrow, {"epilogue.kind: expected", "cutlass_narrow"});
  a.n = 136;  // 2I with I = 68: not whole 8-column gate tiles
  expect_error(a, decode_config(1, 4), {"n: expected", "multiple of 16"});
  a.n = 128;
  a.epilogue.kind = gemm::EpilogueKind::kSwigluOai;
  a.epilogue.swiglu_limit = 0.0f;
  expect_error(a, decode_config(1, 4), {"epilogue.swiglu_limit: expected"});
}

}  // namespace
}  // namespace moekit
