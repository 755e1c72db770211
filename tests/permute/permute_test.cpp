// Tests of the CPU permutation reference (include/moekit/permute/permute.hpp).
#include "moekit/permute/permute.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "framework/seed_util.hpp"
#include "moekit/core/error.hpp"
#include "moekit/quant/codecs.hpp"

namespace moekit {
namespace {

using moekit::testing::expect_error;
using moekit::testing::test_seed;

struct Perm {
  Tensor counts, offsets, sorted, rows;
};

Perm permute(const Tensor& ids, const Tensor* map, int e_local, int block) {
  const std::int64_t m = ids.shape()[0];
  const int k = static_cast<int>(ids.shape()[1]);
  Perm p{Tensor(DType::kI32, {e_local}), Tensor(DType::kI32, {e_local + 1}),
         Tensor(DType::kI32, {permute_capacity(m, k, e_local, block)}),
         Tensor(DType::kI32, {m, k})};
  compute_permutation(ids, map ? map->view() : TensorView{}, e_local, block,
                      {p.counts, p.offsets, p.sorted, p.rows});
  return p;
}

Tensor i32(std::vector<std::int32_t> v, Shape s) {
  Tensor t(DType::kI32, s);
  // An empty vector's data() may be null, and memcpy from null is undefined even for 0 bytes.
  if (!v.empty()) std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}

std::vector<std::int32_t> vec(const Tensor& t) {
  return {t.ptr<std::int32_t>(), t.ptr<std::int32_t>() + t.numel()};
}

TEST(Permute, HandWorkedExample) {
  // 3 tokens, k = 2, 4 experts.
  Tensor ids = i32({2, 0, 0, 3, 2, 0}, {3, 2});
  Perm p = permute(ids, nullptr, 4, 1);
  EXPECT_EQ(vec(p.counts), (std::vector<std::int32_t>{3, 0, 2, 1}));
  EXPECT_EQ(vec(p.offsets), (std::vector<std::int32_t>{0, 3, 3, 5, 6}));
  // expert 0: a = 1 (t0 j1), 2 (t1 j0), 5 (t2 j1); expert 2: a = 0, 4; expert 3: a = 3.
  EXPECT_EQ(vec(p.sorted), (std::vector<std::int32_t>{1, 2, 5, 0, 4, 3}));
  EXPECT_EQ(vec(p.rows), (std::vector<std::int32_t>{3, 0, 1, 5, 4, 2}));
}

TEST(Permute, HandWorkedPaddedWithExpertMap) {
  // 4 global experts; this rank owns global 1 -> local 0 and global 3 -> local 1.
  Tensor ids = i32({1, 3, 3, 0, 1, 2}, {3, 2});
  Tensor map = i32({-1, 0, -1, 1}, {4});
  Perm p = permute(ids, &map, 2, 4);
  EXPECT_EQ(vec(p.counts), (std::vector<std::int32_t>{2, 2}));
  EXPECT_EQ(vec(p.offsets), (std::vector<std::int32_t>{0, 4, 8}));
  // capacity = 6 + 2*3 = 12; entries past offsets[2] = 8 are -1.
  EXPECT_EQ(vec(p.sorted), (std::vector<std::int32_t>{0, 4, -1, -1, 1, 2, -1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(vec(p.rows), (std::vector<std::int32_t>{0, 4, 5, -1, 1, -1}));
}

// Checks every documented property of a permutation against topk_ids.
void check_properties(const Tensor& ids, const std::vector<int>& local_of_global, int e_local,
                      int block, const Perm& p) {
  const std::int64_t n = ids.numel();
  const auto* id = ids.ptr<std::int32_t>();
  std::vector<std::int32_t> hist(static_cast<std::size_t>(e_local), 0);
  for (std::int64_t a = 0; a < n; ++a) {
    int l = local_of_global[static_cast<std::size_t>(id[a])];
    if (l >= 0) ++hist[static_cast<std::size_t>(l)];
  }
  ASSERT_EQ(vec(p.counts), hist);
  const auto off = vec(p.offsets);
  ASSERT_EQ(off[0], 0);
  for (int e = 0; e < e_local; ++e) {
    const int padded = (hist[static_cast<std::size_t>(e)] + block - 1) / block * block;
    ASSERT_EQ(off[static_cast<std::size_t>(e) + 1] - off[static_cast<std::size_t>(e)], padded);
  }
  const auto sorted = vec(p.sorted);
  const auto rows = vec(p.rows);
  for (int e = 0; e < e_local; ++e) {
    std::int32_t prev = -1;
    for (int r = off[static_cast<std::size_t>(e)]; r < off[static_cast<std::size_t>(e) + 1]; ++r) {
      const int i = r - off[static_cast<std::size_t>(e)];
      const std::int32_t a = sorted[static_cast<std::size_t>(r)];
      if (i < hist[static_cast<std::size_t>(e)]) {
        ASSERT_GT(a, prev) << "ascending within expert " << e;
        ASSERT_EQ(local_of_global[static_cast<std::size_t>(id[a])], e);
        ASSERT_EQ(rows[static_cast<std::size_t>(a)], r);
        prev = a;
      } else {
        ASSERT_EQ(a, -1) << "padding row " << r;
      }
    }
  }
  for (std::size_t r = static_cast<std::size_t>(off.back()); r < sorted.size(); ++r)
    ASSERT_EQ(sorted[r], -1);
  for (std::int64_t a = 0; a < n; ++a) {
    if (local_of_global[static_cast<std::size_t>(id[a])] < 0) {
      ASSERT_EQ(rows[static_cast<std::size_t>(a)], -1);
    }
  }
}

TEST(Permute, RandomPropertiesAdversarialShapes) {
  const auto seed = test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  struct Case {
    std::int64_t m;
    int k, e, block;
    bool one_expert, with_map;
  };
  const Case cases[] = {{0, 2, 4, 1, false, false},   {1, 1, 1, 1, false, false},
                        {1, 4, 8, 16, false, false},  {3, 8, 16, 1, false, true},
                        {37, 2, 8, 1, true, false},   {64, 4, 32, 128, false, true},
                        {129, 8, 64, 8, false, true}, {200, 1, 3, 1, true, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " k=" + std::to_string(c.k));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(c.m * c.k));
    for (std::int64_t t = 0; t < c.m; ++t) {
      // Distinct experts per token as routing produces (k <= E).
      std::vector<int> perm(static_cast<std::size_t>(c.e));
      for (int e = 0; e < c.e; ++e) perm[static_cast<std::size_t>(e)] = e;
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int j = 0; j < c.k; ++j)
        ids[static_cast<std::size_t>(t * c.k + j)] =
            c.one_expert
                ? (j == 0                                   ? 0
                   : perm[static_cast<std::size_t>(j)] == 0 ? perm[0]
                                                            : perm[static_cast<std::size_t>(j)])
                : perm[static_cast<std::size_t>(j)];
    }
    std::vector<int> local(static_cast<std::size_t>(c.e));
    int e_local = c.e;
    std::vector<std::int32_t> map(static_cast<std::size_t>(c.e));
    if (c.with_map) {
      e_local = 0;
      for (int g = 0; g < c.e; ++g) map[static_cast<std::size_t>(g)] = (rng() % 2) ? e_local++ : -1;
      if (e_local == 0) map[0] = e_local++;
      for (int g = 0; g < c.e; ++g)
        local[static_cast<std::size_t>(g)] = map[static_cast<std::size_t>(g)];
    } else {
      for (int g = 0; g < c.e; ++g) local[static_cast<std::size_t>(g)] = g;
    }
    Tensor tids = i32(ids, {c.m, c.k});
    Tensor tmap = i32(map, {c.e});
    Perm p = permute(tids, c.with_map ? &tmap : nullptr, e_local, c.block);
    check_properties(tids, local, e_local, c.block, p);
  }
}

TEST(Permute, GatherCopiesRowsAndZeroesPadding) {
  const auto seed = test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937 rng(static_cast<unsigned>(seed));
  const std::int64_t m = 5, h = 7;
  Tensor ids = i32({0, 1, 1, 2, 2, 0, 1, 0, 2, 1}, {m, 2});
  Perm p = permute(ids, nullptr, 3, 4);
  Tensor x(DType::kBF16, {m, h});
  for (std::int64_t i = 0; i < m * h; ++i)
    x.ptr<std::uint16_t>()[i] = static_cast<std::uint16_t>(rng());
  const std::int64_t rows = p.sorted.numel();
  Tensor out(DType::kBF16, {rows, h});
  std::memset(out.data(), 0xAB, out.nbytes());  // poison
  permute_gather(x, p.sorted, 2, out);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int32_t a = p.sorted.ptr<std::int32_t>()[r];
    for (std::int64_t c = 0; c < h; ++c) {
      const std::uint16_t want = a < 0 ? 0 : x.ptr<std::uint16_t>()[(a / 2) * h + c];
      ASSERT_EQ(out.ptr<std::uint16_t>()[r * h + c], want) << "row " << r;
    }
  }
  // Scales [M, Kb] u8 go through the same raw-row path.
  Tensor sc(DType::kU8, {m, 3});
  for (int i = 0; i < 15; ++i) sc.ptr<std::uint8_t>()[i] = static_cast<std::uint8_t>(i + 1);
  Tensor sc_out(DType::kU8, {rows, 3});
  permute_gather(sc, p.sorted, 2, sc_out);
  EXPECT_EQ(sc_out.ptr<std::uint8_t>()[0], 1);  // row 0 = a 0 -> token 0
}

TEST(Permute, ScatterBatchedAndBatchedRowsAgree) {
  const std::int64_t m = 4, h = 3, t_max = 5;
  Tensor ids = i32({3, 1, 1, 0, 3, 0, 1, 2}, {m, 2});
  Tensor map = i32({-1, 0, -1, 1}, {4});  // local: global 1 -> 0, global 3 -> 1
  Tensor x(DType::kF32, {m, h});
  for (int i = 0; i < m * h; ++i) x.ptr<float>()[i] = static_cast<float>(i + 1);
  Tensor out(DType::kF32, {2, t_max, h}), n(DType::kI32, {2});
  std::memset(out.data(), 0xFF, out.nbytes());
  scatter_batched(x, ids, map, 2, out, n);
  EXPECT_EQ(vec(n), (std::vector<std::int32_t>{3, 2}));
  // local 0 (global 1): a = 1 (t0), 2 (t1), 6 (t3); local 1 (global 3): a = 0 (t0), 4 (t2).
  const int want_tok[2][5] = {{0, 1, 3, -1, -1}, {0, 2, -1, -1, -1}};
  for (int e = 0; e < 2; ++e)
    for (int i = 0; i < t_max; ++i)
      for (int c = 0; c < h; ++c) {
        const float got = out.ptr<float>()[(e * t_max + i) * h + c];
        const int t = want_tok[e][i];
        EXPECT_EQ(got, t < 0 ? 0.0f : x.ptr<float>()[t * h + c]) << e << "," << i << "," << c;
      }
  Perm p = permute(ids, &map, 2, 1);
  Tensor br(DType::kI32, {m, 2});
  batched_rows(ids, map, p.rows, p.offsets, t_max, br);
  EXPECT_EQ(vec(br), (std::vector<std::int32_t>{5, 0, 1, -1, 6, -1, 2, -1}));
}

TEST(Permute, UnpermuteReduceOrderIsSlotOrderUnfused) {
  const auto seed = test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::int64_t m = 9, k = 4, h = 33, e = 6;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(m * k));
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t j = 0; j < k; ++j)
      ids[static_cast<std::size_t>(t * k + j)] = static_cast<int>((t + j * 2) % e);
  Tensor tids = i32(ids, {m, k});
  Tensor map = i32({0, -1, 1, 2, -1, 3}, {e});
  Perm p = permute(tids, &map, 4, 1);
  const std::int64_t rows = p.sorted.numel();
  Tensor y(DType::kF32, {rows, h}), w(DType::kF32, {m, k});
  for (std::int64_t i = 0; i < rows * h; ++i) y.ptr<float>()[i] = nd(rng);
  for (std::int64_t i = 0; i < m * k; ++i) w.ptr<float>()[i] = nd(rng);
  Tensor out(DType::kF32, {m, h}), out_bf(DType::kBF16, {m, h});
  unpermute_reduce(y, p.rows, w, out);
  unpermute_reduce(y, p.rows, w, out_bf);
  for (std::int64_t t = 0; t < m; ++t) {
    for (std::int64_t c = 0; c < h; ++c) {
      float acc = 0.0f;
      double exact = 0.0;
      for (std::int64_t j = 0; j < k; ++j) {
        const int r = p.rows.ptr<std::int32_t>()[t * k + j];
        if (r < 0) continue;
        const float prod = w.ptr<float>()[t * k + j] * y.ptr<float>()[r * h + c];
        acc = acc + prod;
        exact += static_cast<double>(w.ptr<float>()[t * k + j]) * y.ptr<float>()[r * h + c];
      }
      ASSERT_EQ(std::memcmp(&acc, &out.ptr<float>()[t * h + c], 4), 0) << t << "," << c;
      ASSERT_EQ(out_bf.ptr<std::uint16_t>()[t * h + c], float_to_bf16(acc));
      ASSERT_NEAR(acc, exact, 1e-5 * (1 + std::fabs(exact)));
    }
  }
  // No local slot at all -> +0.
  Tensor none = i32(std::vector<std::int32_t>(static_cast<std::size_t>(m * k), -1), {m, k});
  unpermute_reduce(y, none, w, out);
  for (std::int64_t i = 0; i < m * h; ++i) ASSERT_EQ(f32_to_bits(out.ptr<float>()[i]), 0u);
}

TEST(Permute, ErrorsNameTheArgument) {
  Tensor ids = i32({0, 5}, {1, 2});
  expect_error([&] { permute(ids, nullptr, 4, 1); }, {"topk_ids[0, 1]", "[0, 4)", "5"});
  Tensor ok = i32({0, 1}, {1, 2});
  Tensor bad_map = i32({0, 0}, {2});
  expect_error([&] { permute(ok, &bad_map, 2, 1); }, {"expert_map[1]"});
  Tensor bad_map2 = i32({0, 7}, {2});
  expect_error([&] { permute(ok, &bad_map2, 2, 1); }, {"expert_map[1]", "7"});
  expect_error([&] { permute(ok, nullptr, 2, 0); }, {"block_size"});
  Perm p = permute(ok, nullptr, 2, 1);
  Tensor small(DType::kI32, {1});
  expect_error(
      [&] {
        compute_permutation(ok, {}, 2, 1, {p.counts, p.offsets, small, p.rows});
      },
      {"sorted_ids size"});
  Tensor f(DType::kF32, {1, 2});
  expect_error(
      [&] {
        compute_permutation(f, {}, 2, 1, {p.counts, p.offsets, p.sorted, p.rows});
      },
      {"topk_ids dtype"});
  Tensor x(DType::kF32, {1, 4}), out(DType::kF32, {2, 1, 4}), n(DType::kI32, {2});
  Tensor two = i32({0, 0}, {1, 2});
  expect_error([&] { scatter_batched(x, two, {}, 2, out, n); },
               {"assignments to local expert 0", "T_max"});
  Tensor y(DType::kF32, {2, 4}), o(DType::kF32, {1, 5});
  expect_error([&] { unpermute_reduce(y, p.rows, {}, o); }, {"out shape"});
}

}  // namespace
}  // namespace moekit
