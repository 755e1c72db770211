// The device glue of the grouped-GEMM experts (cuda/permute/permute_kernels.hpp,
// cuda/finalize/weighted_reduce.hpp), bitwise against a host computation on random inputs (seed
// logged):
//   - permute_by_expert: offsets, sorted ids (ascending inside each expert), permuted rows (-1 for
//     ids outside [0, E)), and the optional sorted_tokens (= sorted_ids / k, GEMM1's row_index);
//     adversarial routings: every assignment to one expert, empty experts, invalid ids, M = 1;
//     the one-block and the multi-block path (with scratch, > 2048 assignments).
//   - gather_rows: long and short rows, a device row count;
//   - weighted_reduce (bf16 in and out): out[t] = sum over slots j in order of RN(w[t,j] * row) (separate
//     multiply and add), rows with permuted_row -1 skipped, weights null = 1; top_k not a
//     multiple of the kernel's unroll, H not a multiple of its CTA width; M = 0 writes nothing;
//     with GEMM2's per-expert bias: RN(w[t,j] * RN(row + bias[topk_ids[t,j]])).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda/finalize/weighted_reduce.hpp"
#include "cuda/permute/permute_kernels.hpp"
#include "cuda/gpu_test_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/core/tensor.hpp"
#include "moekit/quant/codecs.hpp"
#include "test_seed.hpp"

namespace moekit {
namespace {

template <typename T>
Tensor upload(const std::vector<T>& v, DType dt) {
  Tensor h(dt, Shape{static_cast<std::int64_t>(v.size())});
  std::memcpy(h.data(), v.data(), h.nbytes());
  Tensor d(dt, h.shape(), Device::cuda(0));
  copy(d, h);
  return d;
}
template <typename T>
std::vector<T> download(const Tensor& d) {
  Tensor h(d.dtype(), d.shape());
  copy(h, d);
  std::vector<T> v(static_cast<std::size_t>(h.numel()));
  std::memcpy(v.data(), h.data(), h.nbytes());
  return v;
}

// scratch: also run the multi-block path (permute_scratch_bytes; > 2048 assignments).
void check_permute(const std::vector<std::int32_t>& ids, int e, int k, const std::string& what,
                   bool scratch = false) {
  SCOPED_TRACE(what + (scratch ? " (multi-block)" : ""));
  const auto n = static_cast<std::int64_t>(ids.size());
  // Host: counting sort, stable in the assignment index.
  std::vector<std::int32_t> off(static_cast<std::size_t>(e) + 1, 0), sorted, prow(ids.size(), -1);
  for (const auto x : ids)
    if (x >= 0 && x < e) ++off[static_cast<std::size_t>(x) + 1];
  for (int x = 0; x < e; ++x) off[static_cast<std::size_t>(x) + 1] += off[static_cast<std::size_t>(x)];
  sorted.assign(static_cast<std::size_t>(off[static_cast<std::size_t>(e)]), -1);
  std::vector<std::int32_t> cursor(off.begin(), off.end() - 1);
  for (std::int64_t a = 0; a < n; ++a) {
    const int x = ids[static_cast<std::size_t>(a)];
    if (x < 0 || x >= e) continue;
    const int pos = cursor[static_cast<std::size_t>(x)]++;
    sorted[static_cast<std::size_t>(pos)] = static_cast<std::int32_t>(a);
    prow[static_cast<std::size_t>(a)] = pos;
  }
  const Tensor d_ids = upload(ids, DType::kI32);
  Tensor d_off(DType::kI32, Shape{e + 1}, Device::cuda(0));
  Tensor d_sorted(DType::kI32, Shape{std::max<std::int64_t>(n, 1)}, Device::cuda(0));
  Tensor d_prow(DType::kI32, Shape{std::max<std::int64_t>(n, 1)}, Device::cuda(0));
  Tensor d_tok(DType::kI32, Shape{std::max<std::int64_t>(n, 1)}, Device::cuda(0));
  const std::size_t scratch_bytes = scratch ? cuda::permute_scratch_bytes(n, e) : 0;
  Tensor d_scratch(DType::kU8, Shape{static_cast<std::int64_t>(std::max<std::size_t>(scratch_bytes, 1))},
                   Device::cuda(0));
  for (const Tensor* t : {&d_off, &d_sorted, &d_prow, &d_tok, &d_scratch})
    ASSERT_EQ(cudaMemset(t->data(), 0xA5, t->nbytes()), cudaSuccess);
  cuda::PermuteArgs p;
  p.topk_ids = d_ids.ptr<const std::int32_t>();
  p.num_assignments = n;
  p.num_experts = p.num_local_experts = e;
  p.expert_offsets = d_off.ptr<std::int32_t>();
  p.sorted_ids = d_sorted.ptr<std::int32_t>();
  p.permuted_row = d_prow.ptr<std::int32_t>();
  p.top_k = k;
  p.sorted_tokens = d_tok.ptr<std::int32_t>();
  p.scratch = scratch_bytes > 0 ? d_scratch.data() : nullptr;
  cuda::permute_by_expert(p, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(download<std::int32_t>(d_off), off);
  const auto got_sorted = download<std::int32_t>(d_sorted);
  const auto got_tok = download<std::int32_t>(d_tok);
  const auto got_prow = download<std::int32_t>(d_prow);
  for (std::size_t r = 0; r < sorted.size(); ++r) {
    EXPECT_EQ(got_sorted[r], sorted[r]) << "row " << r;
    EXPECT_EQ(got_tok[r], sorted[r] / k) << "row " << r;
  }
  for (std::int64_t a = 0; a < n; ++a)
    EXPECT_EQ(got_prow[static_cast<std::size_t>(a)], prow[static_cast<std::size_t>(a)]) << a;
}

TEST(ExpertsGlueCuda, PermuteByExpertWithSortedTokens) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = process_test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Sizes from one assignment to the multi-block path (> 2048 assignments: 4500 x 8 = 36 blocks,
  // 400 x 7 = 3 blocks with a partial last one, 683 x 3 = 2049 the first size that takes it,
  // 1024 x 2 = 2048 the last that does not; 512 experts = kMaxPermuteExperts).
  for (const auto& [m, e, k] : {std::tuple{1, 256, 8}, std::tuple{3, 8, 2}, std::tuple{129, 128, 8},
                                std::tuple{700, 64, 6}, std::tuple{2, 16, 1}, std::tuple{4500, 256, 8},
                                std::tuple{400, 512, 7}, std::tuple{683, 32, 3},
                                std::tuple{1024, 16, 2}}) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(m * k));
    std::uniform_int_distribution<int> pick(0, e - 1);
    for (auto& x : ids) x = pick(rng);
    for (const bool scratch : {false, true}) {
      check_permute(ids, e, k, "random m=" + std::to_string(m) + " e=" + std::to_string(e), scratch);
      std::vector<std::int32_t> one(ids.size(), e / 2);  // every assignment to one expert
      check_permute(one, e, k, "one expert", scratch);
      std::vector<std::int32_t> bad = ids;
      for (std::size_t i = 0; i < bad.size(); i += 3) bad[i] = i % 2 ? -1 : e + 5;  // invalid ids
      check_permute(bad, e, k, "invalid ids", scratch);
    }
  }
}

// gather_rows, bitwise against the host: long rows (one CTA per row) and short ones (the flat
// (row, vector) kernel: the fp8 1x128 scales of K 7168, 224 bytes), 16- and 4-byte vectors, a
// device row count below max_rows (rows past it keep their poison), 0 and 1 rows.
TEST(ExpertsGlueCuda, GatherRowsMatchesHost) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = process_test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed + 2);
  for (const auto& [tokens, k, row_bytes, used] :
       {std::tuple{512, 8, 224, 4000}, std::tuple{300, 8, 7168, 2400}, std::tuple{33, 3, 12, 99},
        std::tuple{9, 2, 4, 17}, std::tuple{40, 6, 1020, 200}, std::tuple{5, 1, 16, 1},
        std::tuple{7, 2, 224, 0}}) {
    SCOPED_TRACE("tokens=" + std::to_string(tokens) + " k=" + std::to_string(k) +
                 " row_bytes=" + std::to_string(row_bytes) + " used=" + std::to_string(used));
    const std::int64_t max_rows = static_cast<std::int64_t>(tokens) * k;
    std::vector<std::uint8_t> src(static_cast<std::size_t>(tokens) * row_bytes);
    for (auto& x : src) x = static_cast<std::uint8_t>(rng());
    std::vector<std::int32_t> sorted(static_cast<std::size_t>(max_rows));
    std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(max_rows - 1));
    for (auto& x : sorted) x = pick(rng);
    const Tensor d_src = upload(src, DType::kU8);
    const Tensor d_sorted = upload(sorted, DType::kI32);
    const Tensor d_used = upload(std::vector<std::int32_t>{used}, DType::kI32);
    Tensor d_out(DType::kU8, Shape{max_rows * row_bytes}, Device::cuda(0));
    ASSERT_EQ(cudaMemset(d_out.data(), 0xA5, d_out.nbytes()), cudaSuccess);
    cuda::GatherArgs g;
    g.src = d_src.data();
    g.row_bytes = row_bytes;
    g.sorted_ids = d_sorted.ptr<const std::int32_t>();
    g.top_k = k;
    g.max_rows = max_rows;
    g.num_rows = d_used.ptr<const std::int32_t>();
    g.out = d_out.data();
    cuda::gather_rows(g, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = download<std::uint8_t>(d_out);
    std::int64_t bad = 0;
    for (std::int64_t r = 0; r < max_rows; ++r)
      for (int b = 0; b < row_bytes; ++b) {
        const std::size_t at = static_cast<std::size_t>(r * row_bytes + b);
        const std::uint8_t want =
            r < used ? src[static_cast<std::size_t>(sorted[static_cast<std::size_t>(r)] / k) *
                               row_bytes + b]
                     : 0xA5;
        if (got[at] != want && bad++ < 5)
          ADD_FAILURE() << "row " << r << " byte " << b << ": " << int(got[at]) << " vs "
                        << int(want);
      }
    EXPECT_EQ(bad, 0);
  }
}

TEST(ExpertsGlueCuda, WeightedReduceMatchesHostInSlotOrder) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = process_test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (const auto& [m, k, h] : {std::tuple{1, 8, 7168}, std::tuple{5, 1, 8}, std::tuple{3, 5, 1032},
                                std::tuple{64, 9, 2880}, std::tuple{17, 2, 4096}}) {
    for (const auto& [weighted, biased] : {std::pair{true, false}, std::pair{false, false},
                                            std::pair{true, true}}) {
      SCOPED_TRACE("m=" + std::to_string(m) + " k=" + std::to_string(k) + " h=" +
                   std::to_string(h) + (weighted ? " weighted" : " unweighted") +
                   (biased ? " biased" : ""));
      const std::int64_t rows = static_cast<std::int64_t>(m) * k;
      std::vector<std::uint16_t> src(static_cast<std::size_t>(rows * h));
      for (auto& x : src) x = float_to_bf16(normal(rng));
      // A permutation of the rows, with some slots dropped (-1).
      std::vector<std::int32_t> prow(static_cast<std::size_t>(rows));
      for (std::int64_t i = 0; i < rows; ++i) prow[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
      std::shuffle(prow.begin(), prow.end(), rng);
      for (std::size_t i = 0; i < prow.size(); ++i)
        if (unit(rng) < 0.15f) prow[i] = -1;
      std::vector<float> w(static_cast<std::size_t>(rows));
      for (auto& x : w) x = unit(rng);
      // Each slot's expert (of 6) and the experts' biases [6, h].
      constexpr int kExperts = 6;
      std::vector<std::int32_t> ids(static_cast<std::size_t>(rows));
      for (auto& x : ids) x = static_cast<std::int32_t>(rng() % kExperts);
      std::vector<float> bias(static_cast<std::size_t>(kExperts * h));
      for (auto& x : bias) x = normal(rng);
      std::vector<std::uint16_t> want(static_cast<std::size_t>(m * h));
      for (int t = 0; t < m; ++t)
        for (std::int64_t c = 0; c < h; ++c) {
          float acc = 0.0f;
          for (int j = 0; j < k; ++j) {
            const int r = prow[static_cast<std::size_t>(t * k + j)];
            if (r < 0) continue;
            float v = bf16_to_float(src[static_cast<std::size_t>(r * h + c)]);
            if (biased) v = v + bias[static_cast<std::size_t>(ids[static_cast<std::size_t>(t * k + j)] * h + c)];
            // Host code is compiled without FP contraction (ISO C++ mode): two roundings.
            const float p = mul_rn(weighted ? w[static_cast<std::size_t>(t * k + j)] : 1.0f, v);
            acc = acc + p;
          }
          want[static_cast<std::size_t>(t * h + c)] = float_to_bf16(acc);
        }
      const Tensor d_src = upload(src, DType::kBF16), d_prow = upload(prow, DType::kI32);
      const Tensor d_w = upload(w, DType::kF32), d_ids = upload(ids, DType::kI32),
                   d_bias = upload(bias, DType::kF32);
      Tensor d_out(DType::kBF16, Shape{static_cast<std::int64_t>(m) * h}, Device::cuda(0));
      ASSERT_EQ(cudaMemset(d_out.data(), 0xA5, d_out.nbytes()), cudaSuccess);
      cuda::WeightedReduceArgs r;
      r.expert_out = d_src.data();
      r.source_row = d_prow.ptr<const std::int32_t>();
      r.topk_weights = weighted ? d_w.ptr<const float>() : nullptr;
      r.num_tokens = m;
      r.top_k = k;
      r.hidden = h;
      r.out = d_out.data();
      r.bias = biased ? d_bias.ptr<const float>() : nullptr;
      r.topk_ids = biased ? d_ids.ptr<const std::int32_t>() : nullptr;
      cuda::weighted_reduce(r, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = download<std::uint16_t>(d_out);
      std::int64_t bad = 0;
      for (std::size_t i = 0; i < want.size(); ++i)
        if (got[i] != want[i] && ++bad <= 5)
          ADD_FAILURE() << "element " << i << ": 0x" << std::hex << got[i] << ", want 0x" << want[i];
      EXPECT_EQ(bad, 0);
    }
  }
  // M = 0: nothing launched, nothing written.
  Tensor d_out(DType::kBF16, Shape{8}, Device::cuda(0));
  ASSERT_EQ(cudaMemset(d_out.data(), 0x5A, d_out.nbytes()), cudaSuccess);
  cuda::WeightedReduceArgs r;
  r.expert_out = d_out.data();
  r.top_k = 4;
  r.hidden = 8;
  r.out = d_out.data();
  cuda::weighted_reduce(r, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const auto x : download<std::uint16_t>(d_out)) EXPECT_EQ(x, 0x5A5A);
}

}  // namespace
}  // namespace moekit
