// The decode GEMMs' fused routing (cuda/gemm/decode_routing.hpp) against the four-kernel path it
// replaces, on the same inputs: permute_by_expert -> GEMM1 (expert_offsets, row_index) -> GEMM2 ->
// weighted_reduce. The fused GEMM1's rows, GEMM2's rows and the reduced output must be
// BITWISE equal to those (the same sort order, the same sums in the same order): W4A16 decode8
// (both formats, SiLU-and-mul / SwiGLU-OAI with biases) and the bf16 decode config (GEMM1 bias in
// its epilogue, GEMM2's bias in the reduce). Routings: random, all rows to one expert, ids of other
// ranks (-1 / >= E), none routed at all (output 0), top_k = 1, the row limit (64); grids capped
// at 1-3 CTAs (many units per CTA: the completed-block list grows) and a 2-CTA cluster split.
// The counters start as garbage (GEMM1 clears them) and a second fused run gives the same bits.
// Then argument validation (each error names the argument).
#include "cuda/gemm/decode_routing.hpp"

#include <gmock/gmock.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cuda/finalize/weighted_reduce.hpp"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm_w4/w4a16_test_util.hpp"
#include "cuda/gpu_test_util.hpp"
#include "cuda/permute/permute_kernels.hpp"
#include "moekit/core/error.hpp"

namespace moekit {
namespace {

using gemm::w4a16_test::DeviceArray;
using gemm::w4a16_test::float_to_bf16;
using gemm::w4a16_test::test_seed;
using u16 = std::uint16_t;
using gemm::EpilogueKind;
using gemm::GemmConfig;
using gemm::GemmKernel;
using gemm::GemmScheme;
using gemm::GroupedGemmArgs;
using gemm::w4a16_test::W4Format;

enum class Ids { kRandom, kOneExpert, kOtherRanks, kNoneRouted };

struct Case {
  int tokens, top_k, experts;
  Ids ids;
  int max_ctas = 0;
  int k_split = 0;
};

std::string case_name(const Case& c) {
  return "tokens " + std::to_string(c.tokens) + " top_k " + std::to_string(c.top_k) + " E " +
         std::to_string(c.experts) + " ids " + std::to_string(static_cast<int>(c.ids)) +
         " max_ctas " + std::to_string(c.max_ctas) + " k_split " + std::to_string(c.k_split);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {1, 8, 64, Ids::kRandom},    {8, 8, 64, Ids::kRandom},  // 64 rows: the limit
      {3, 2, 8, Ids::kRandom},     {5, 1, 4, Ids::kRandom},   // top_k = 1
      {6, 4, 16, Ids::kOneExpert}, {7, 4, 32, Ids::kOtherRanks}, {4, 2, 8, Ids::kNoneRouted},
      {8, 8, 64, Ids::kRandom, 3}, {2, 4, 8, Ids::kRandom, 1},   {1, 2, 8, Ids::kRandom, 0, 2},
  };
  return c;
}

// topk ids [tokens, top_k] (distinct per token unless kOneExpert) and weights.
void random_routing(const Case& c, std::mt19937& rng, std::vector<std::int32_t>& ids,
                    std::vector<float>& w) {
  ids.assign(static_cast<std::size_t>(c.tokens) * c.top_k, 0);
  w.assign(ids.size(), 0.0f);
  std::uniform_real_distribution<float> wd(0.05f, 1.0f);
  for (int t = 0; t < c.tokens; ++t) {
    std::vector<int> perm(c.experts);
    for (int j = 0; j < c.experts; ++j) perm[j] = j;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < c.top_k; ++j) {
      int id = perm[j];
      if (c.ids == Ids::kOneExpert) id = 3 % c.experts;
      if (c.ids == Ids::kOtherRanks && (t + j) % 3 == 0) id = (t % 2) ? -1 : c.experts + j;
      if (c.ids == Ids::kNoneRouted) id = -1;
      ids[static_cast<std::size_t>(t) * c.top_k + j] = id;
      w[static_cast<std::size_t>(t) * c.top_k + j] = wd(rng);
    }
  }
}

std::vector<u16> random_bf16(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<u16> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}
std::vector<float> random_f32(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Device buffers both paths share (inputs) or each has (outputs, all first filled with the same
// pattern so that rows neither path writes compare equal too).
struct Buffers {
  int rows, h, i;
  DeviceArray<std::int32_t> ids;
  DeviceArray<float> weights;
  DeviceArray<u16> x;
  DeviceArray<std::int32_t> offsets, sorted, prow, tokens;
  DeviceArray<u16> act, out2, out;
  DeviceArray<int> counters;
  Buffers(const Case& c, int h_, int i_, const std::vector<std::int32_t>& id,
          const std::vector<float>& w, const std::vector<u16>& xv)
      : rows(c.tokens * c.top_k),
        h(h_),
        i(i_),
        ids(id),
        weights(w),
        x(xv),
        offsets(c.experts + 1),
        sorted(rows),
        prow(rows),
        tokens(rows),
        act(static_cast<std::size_t>(rows) * i_),
        out2(static_cast<std::size_t>(rows) * h_),
        out(static_cast<std::size_t>(c.tokens) * h_),
        counters(static_cast<std::size_t>(gemm::decode_routing_counters(h_))) {
    cudaMemset(act.ptr, 0x5a, act.count * 2);
    cudaMemset(out2.ptr, 0x5a, out2.count * 2);
    cudaMemset(out.ptr, 0x5a, out.count * 2);
    cudaMemset(counters.ptr, 0x7f, counters.count * 4);  // garbage: GEMM1 clears them
  }
};

void expect_same(const Buffers& a, const Buffers& b) {
  EXPECT_EQ(a.act.download(), b.act.download()) << "GEMM1 rows";
  EXPECT_EQ(a.out2.download(), b.out2.download()) << "GEMM2 rows";
  EXPECT_EQ(a.out.download(), b.out.download()) << "reduced output";
  EXPECT_EQ(b.counters.download(), std::vector<int>(b.counters.count, 0)) << "counters left zero";
}

// The four-kernel path's permutation and reduce.
void permute(const Case& c, Buffers& b) {
  cuda::PermuteArgs p;
  p.topk_ids = b.ids.ptr;
  p.num_assignments = b.rows;
  p.num_experts = p.num_local_experts = c.experts;
  p.expert_offsets = b.offsets.ptr;
  p.sorted_ids = b.sorted.ptr;
  p.permuted_row = b.prow.ptr;
  p.top_k = c.top_k;
  p.sorted_tokens = b.tokens.ptr;
  cuda::permute_by_expert(p, nullptr);
}
void reduce(const Case& c, Buffers& b, const float* bias) {
  cuda::WeightedReduceArgs r;
  r.expert_out = b.out2.ptr;
  r.source_row = b.prow.ptr;
  r.topk_weights = b.weights.ptr;
  r.num_tokens = c.tokens;
  r.top_k = c.top_k;
  r.hidden = b.h;
  r.out = b.out.ptr;
  r.bias = bias;
  r.topk_ids = bias != nullptr ? b.ids.ptr : nullptr;
  cuda::weighted_reduce(r, nullptr);
}

// ---- W4A16 ----

void run_w4a16(const Case& c, W4Format f, EpilogueKind epi, std::uint32_t seed) {
  SCOPED_TRACE(case_name(c) + " format " + gemm::w4a16_test::w4_format_name(f) + " epi " +
               std::to_string(static_cast<int>(epi)) + " seed " + std::to_string(seed));
  constexpr int kH = 256, kI = 192;
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids;
  std::vector<float> w;
  random_routing(c, rng, ids, w);
  const auto w13 = gemm::w4a16_test::random_weights(rng, f, c.experts, 2 * kI, kH, true);
  const auto w2 = gemm::w4a16_test::random_weights(rng, f, c.experts, kH, kI, false);
  const auto xv = random_bf16(static_cast<std::size_t>(c.tokens) * kH, rng, 1.0f);
  const auto b13 = random_f32(static_cast<std::size_t>(c.experts) * 2 * kI, rng);
  const auto b2 = random_f32(static_cast<std::size_t>(c.experts) * kH, rng);
  DeviceArray<std::uint8_t> c13(w13.shuffled_codes), s13(w13.shuffled_scales),
      c2(w2.shuffled_codes), s2(w2.shuffled_scales);
  DeviceArray<float> a13(w13.alpha), a2(w2.alpha), db13(b13), db2(b2);
  Buffers ref(c, kH, kI, ids, w, xv), fused(c, kH, kI, ids, w, xv);
  const int rows = ref.rows;
  const bool nv = f == W4Format::kNVFP4;

  GroupedGemmArgs g1;
  g1.scheme = gemm::w4a16_test::w4a16_scheme(f);
  g1.epilogue.kind = epi;
  g1.num_experts = c.experts;
  g1.rows = rows;
  g1.n = 2 * kI;
  g1.k = kH;
  g1.w = c13.ptr, g1.w_scales = s13.ptr, g1.w_expert_scale = nv ? a13.ptr : nullptr;
  g1.epilogue.bias = db13.ptr;
  GroupedGemmArgs g2 = g1;
  g2.epilogue.kind = EpilogueKind::kNone;
  g2.n = kH;
  g2.k = kI;
  g2.w = c2.ptr, g2.w_scales = s2.ptr, g2.w_expert_scale = nv ? a2.ptr : nullptr;
  g2.epilogue.bias = db2.ptr;
  g2.overlap_previous = true;
  GemmConfig cfg1 = gemm::w4a16_test::w4_config(gemm::w4a16_test::W4Tile::kDecode8, c.experts,
                                                rows, 2 * kI, kH, true, c.max_ctas, c.k_split);
  GemmConfig cfg2 = gemm::w4a16_test::w4_config(gemm::w4a16_test::W4Tile::kDecode8, c.experts,
                                                rows, kH, kI, false, c.max_ctas, c.k_split);

  {  // the four-kernel path
    permute(c, ref);
    GroupedGemmArgs a = g1, b = g2;
    a.expert_offsets = b.expert_offsets = ref.offsets.ptr;
    a.a = ref.x.ptr, a.row_index = ref.tokens.ptr, a.out = ref.act.ptr;
    b.a = ref.act.ptr, b.out = ref.out2.ptr;
    gemm::grouped_gemm(a, cfg1);
    gemm::grouped_gemm(b, cfg2);
    reduce(c, ref, nullptr);
  }
  for (int rep = 0; rep < 2; ++rep) {  // fused; the second run starts from the left counters
    GroupedGemmArgs a = g1, b = g2;
    a.a = fused.x.ptr, a.out = fused.act.ptr;
    a.routing = gemm::decode_routing_gemm1(fused.ids.ptr, c.top_k, fused.counters.ptr, kH);
    b.a = fused.act.ptr, b.out = fused.out2.ptr;
    b.routing = gemm::decode_routing_gemm2(fused.ids.ptr, c.top_k, fused.out.ptr, fused.weights.ptr,
                                           nullptr, fused.counters.ptr);
    gemm::grouped_gemm(a, cfg1);
    gemm::grouped_gemm(b, cfg2);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    SCOPED_TRACE("run " + std::to_string(rep));
    expect_same(ref, fused);
  }
}

TEST(DecodeRouting, W4A16FusedEqualsFourKernels) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  std::cout << "seed " << seed << std::endl;
  for (const Case& c : cases())
    for (auto f : {W4Format::kNVFP4, W4Format::kMXFP4})
      run_w4a16(c, f, c.top_k % 2 ? EpilogueKind::kSwigluOai : EpilogueKind::kSiluAndMul,
                seed + static_cast<std::uint32_t>(c.tokens * 131 + c.experts));
}

// ---- bf16 decode ----

void run_bf16(const Case& c, EpilogueKind kind, std::uint32_t seed) {
  SCOPED_TRACE(case_name(c) + " act " + std::to_string(static_cast<int>(kind)) + " seed " +
               std::to_string(seed));
  constexpr int kH = 264, kI = 136;  // N % 16 == 8 for GEMM2: the bf16 codec's row tails
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids;
  std::vector<float> w;
  random_routing(c, rng, ids, w);
  const auto xv = random_bf16(static_cast<std::size_t>(c.tokens) * kH, rng, 1.0f);
  DeviceArray<u16> w13(random_bf16(static_cast<std::size_t>(c.experts) * 2 * kI * kH, rng, 0.05f)),
      w2(random_bf16(static_cast<std::size_t>(c.experts) * kH * kI, rng, 0.05f));
  DeviceArray<float> b13(random_f32(static_cast<std::size_t>(c.experts) * 2 * kI, rng)),
      b2(random_f32(static_cast<std::size_t>(c.experts) * kH, rng));
  Buffers ref(c, kH, kI, ids, w, xv), fused(c, kH, kI, ids, w, xv);
  const int rows = ref.rows;
  const std::size_t ws = gemm::grouped_gemm_workspace_bytes(GemmScheme::kBF16, c.experts);
  DeviceArray<std::uint8_t> d_ws(std::max<std::size_t>(ws, 16));

  GroupedGemmArgs g1;
  g1.scheme = GemmScheme::kBF16;
  g1.epilogue.kind = kind;
  g1.epilogue.bias = b13.ptr;
  g1.num_experts = c.experts;
  g1.rows = rows;
  g1.n = 2 * kI;
  g1.k = kH;
  g1.w = w13.ptr;
  g1.workspace = d_ws.ptr, g1.workspace_bytes = d_ws.count;
  GroupedGemmArgs g2 = g1;
  g2.epilogue = gemm::GemmEpilogue{};
  g2.n = kH;
  g2.k = kI;
  g2.w = w2.ptr;
  g2.overlap_previous = true;
  GemmConfig cfg;  // the decode kernel, 8 tokens per unit, the register ring (K 136: no TMA)
  cfg.kernel = GemmKernel::kDecode;
  cfg.decode_tma = false;
  cfg.max_ctas = c.max_ctas;

  {
    permute(c, ref);
    GroupedGemmArgs a = g1, b = g2;
    a.expert_offsets = b.expert_offsets = ref.offsets.ptr;
    a.a = ref.x.ptr, a.row_index = ref.tokens.ptr, a.out = ref.act.ptr;
    b.a = ref.act.ptr, b.out = ref.out2.ptr;
    gemm::grouped_gemm(a, cfg);
    gemm::grouped_gemm(b, cfg);
    reduce(c, ref, b2.ptr);
  }
  for (int rep = 0; rep < 2; ++rep) {
    GroupedGemmArgs a = g1, b = g2;
    a.a = fused.x.ptr, a.out = fused.act.ptr;
    a.routing = gemm::decode_routing_gemm1(fused.ids.ptr, c.top_k, fused.counters.ptr, kH);
    b.a = fused.act.ptr, b.out = fused.out2.ptr;
    b.routing = gemm::decode_routing_gemm2(fused.ids.ptr, c.top_k, fused.out.ptr, fused.weights.ptr,
                                           b2.ptr, fused.counters.ptr);
    gemm::grouped_gemm(a, cfg);
    gemm::grouped_gemm(b, cfg);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    SCOPED_TRACE("run " + std::to_string(rep));
    expect_same(ref, fused);
  }
}

TEST(DecodeRouting, Bf16FusedEqualsFourKernels) {
  MOEKIT_REQUIRE_GPU();
  const std::uint32_t seed = test_seed();
  std::cout << "seed " << seed << std::endl;
  for (const Case& c : cases()) {
    if (c.k_split != 0) continue;  // the W4A16 cases' cluster split
    run_bf16(c, c.top_k % 2 ? EpilogueKind::kSwigluOai : EpilogueKind::kSiluAndMul,
             seed + static_cast<std::uint32_t>(c.tokens * 71 + c.experts));
  }
}

// ---- validation ----

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << parts.front();
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
  }
}

TEST(DecodeRouting, ArgumentsAreValidated) {
  MOEKIT_REQUIRE_GPU();
  constexpr int kH = 128, kI = 64, kE = 8;
  std::mt19937 rng(1);
  const auto w2 = gemm::w4a16_test::random_weights(rng, W4Format::kMXFP4, kE, kH, kI, false);
  DeviceArray<std::uint8_t> c2(w2.shuffled_codes), s2(w2.shuffled_scales);
  DeviceArray<std::int32_t> ids(std::vector<std::int32_t>(128, 1)), offsets(kE + 1);
  DeviceArray<u16> a(128 * kI), out(128 * kH), red(128 * kH);
  DeviceArray<int> counters(kH / 16);
  GroupedGemmArgs base;
  base.scheme = GemmScheme::kW4A16MXFP4;
  base.num_experts = kE;
  base.rows = 16;
  base.n = kH;
  base.k = kI;
  base.a = a.ptr, base.w = c2.ptr, base.w_scales = s2.ptr, base.out = out.ptr;
  base.routing.topk_ids = ids.ptr;
  base.routing.top_k = 2;
  base.routing.reduce_out = red.ptr;
  base.routing.counters = counters.ptr;
  const GemmConfig decode8 =
      gemm::w4a16_test::w4_config(gemm::w4a16_test::W4Tile::kDecode8, kE, 16, kH, kI, false);
  auto with = [&](auto edit, GemmConfig cfg) {
    GroupedGemmArgs x = base;
    edit(x);
    return [x, cfg] { gemm::grouped_gemm(x, cfg); };
  };
  auto with8 = [&](auto edit) { return with(edit, decode8); };
  expect_error(with8([](auto& x) { x.rows = 65; }), {"rows: expected <= 64"});
  expect_error(with8([&](auto& x) { x.expert_offsets = offsets.ptr; }),
               {"expert_offsets: expected null with routing.topk_ids"});
  expect_error(with8([](auto& x) { x.routing.top_k = 3; }), {"routing.top_k", "dividing m = 16"});
  expect_error(with8([](auto& x) { x.routing.counters = nullptr; }), {"routing.counters"});
  GemmConfig mid32;
  mid32.kernel = GemmKernel::kW4Mid32;
  expect_error(with([](auto&) {}, mid32),
               {"routing.topk_ids: expected null unless the kernel is decode with 8 tokens"});
  expect_error(with8([](auto& x) { x.epilogue.kind = EpilogueKind::kSiluAndMul; }),
               {"routing.reduce_out: expected null with a gated epilogue"});
  expect_error(with8([](auto& x) { x.num_experts = 513; }), {"num_experts: expected <= 512"});
  expect_error(with8([&](auto& x) { x.routing.reduce_out = red.ptr + 1; }),
               {"routing.reduce_out: expected 16-byte aligned"});
  expect_error(with8([&](auto& x) {
                 x.routing = gemm::DecodeRouting{};
                 x.routing.reduce_out = x.out;
                 x.expert_offsets = offsets.ptr;
               }),
               {"routing.reduce_out: expected null without routing.topk_ids"});
  // The bf16 GEMM: routing only on the decode kernel.
  DeviceArray<std::uint8_t> d_ws(
      std::max<std::size_t>(16, gemm::grouped_gemm_workspace_bytes(GemmScheme::kBF16, kE)));
  GroupedGemmArgs g;
  g.scheme = GemmScheme::kBF16;
  g.num_experts = kE;
  g.n = kH;
  g.k = kI;
  g.rows = 16;
  g.a = a.ptr, g.w = c2.ptr, g.out = out.ptr;
  g.workspace = d_ws.ptr, g.workspace_bytes = d_ws.count;
  g.routing.topk_ids = ids.ptr;
  g.routing.top_k = 2;
  GemmConfig wgmma;
  wgmma.kernel = GemmKernel::kWgmma;
  expect_error([g, wgmma] { gemm::grouped_gemm(g, wgmma); },
               {"routing.topk_ids: expected null unless the kernel is decode", "wgmma"});
}

}  // namespace
}  // namespace moekit
