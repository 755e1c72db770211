// The CUDA permutation ops against the CPU reference (permute.hpp), byte for byte: counts,
// padded offsets, sorted_ids (its whole capacity), permuted_row, gathers of several row widths,
// batched rows and the batched scatter. Adversarial: M = 0, tokens < top-k, every token to one
// expert, empty experts, an expert_map dropping half of the experts, block sizes 1 / 16 / 128.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/quant/device_test_util.hpp"
#include "moekit/permute/permute.hpp"
#include "moekit/permute/permute_cuda.hpp"

namespace moekit {
namespace {

using cuda_test::bytes_equal;
using cuda_test::poison;
using cuda_test::to_device;

enum class Pattern { kUniform, kOneExpert, kFewExperts };

struct PermCase {
  std::int64_t m;
  int k, e_global, e_local;
  bool map;
  int block;
  Pattern pattern;
  std::string str() const {
    return "M=" + std::to_string(m) + " k=" + std::to_string(k) + " E=" + std::to_string(e_global) +
           "/" + std::to_string(e_local) + (map ? " map" : "") + " block=" + std::to_string(block) +
           " pattern=" + std::to_string(static_cast<int>(pattern));
  }
};

Tensor make_ids(const PermCase& c, std::mt19937_64& rng) {
  Tensor ids(DType::kI32, Shape{c.m, c.k});
  std::uniform_int_distribution<int> any(0, c.e_global - 1), few(0, std::min(2, c.e_global - 1));
  for (std::int64_t t = 0; t < c.m; ++t) {
    // Distinct experts per token where possible (as routers produce), else repeats.
    std::vector<int> row;
    for (int j = 0; j < c.k; ++j) {
      int x = c.pattern == Pattern::kOneExpert ? c.e_global - 1
              : c.pattern == Pattern::kFewExperts ? few(rng)
                                                  : any(rng);
      if (c.pattern == Pattern::kUniform && c.k <= c.e_global)
        while (std::find(row.begin(), row.end(), x) != row.end()) x = any(rng);
      row.push_back(x);
      ids.ptr<std::int32_t>()[t * c.k + j] = x;
    }
  }
  return ids;
}

Tensor make_map(const PermCase& c, std::mt19937_64& rng) {
  // A shuffled half of the global experts are local (ids 0..e_local-1), the rest -1.
  std::vector<int> g(static_cast<std::size_t>(c.e_global));
  std::iota(g.begin(), g.end(), 0);
  std::shuffle(g.begin(), g.end(), rng);
  Tensor map(DType::kI32, Shape{c.e_global});
  for (int i = 0; i < c.e_global; ++i) map.ptr<std::int32_t>()[i] = -1;
  for (int l = 0; l < c.e_local; ++l) map.ptr<std::int32_t>()[g[static_cast<std::size_t>(l)]] = l;
  return map;
}

struct Perm {
  Tensor counts, offsets, sorted, rows;
  PermutationView view() const { return {counts, offsets, sorted, rows}; }
};

Perm alloc_perm(const PermCase& c, std::int64_t capacity, Device d) {
  return {Tensor(DType::kI32, Shape{c.e_local}, d), Tensor(DType::kI32, Shape{c.e_local + 1}, d),
          Tensor(DType::kI32, Shape{capacity}, d), Tensor(DType::kI32, Shape{c.m, c.k}, d)};
}

void check_case(const PermCase& c, std::mt19937_64& rng) {
  SCOPED_TRACE(c.str());
  const Tensor ids = make_ids(c, rng);
  const Tensor map = c.map ? make_map(c, rng) : Tensor{};
  const std::int64_t capacity = permute_capacity(c.m, c.k, c.e_local, c.block) + 5;  // + slack
  Perm ref = alloc_perm(c, capacity, Device::host());
  compute_permutation(ids, map.defined() ? map.view() : TensorView{}, c.e_local, c.block, ref.view());

  const Tensor ids_d = to_device(ids);
  Tensor map_d;
  if (map.defined()) map_d = to_device(map);
  const TensorView map_view = map_d.defined() ? map_d.view() : TensorView{};
  Perm dev = alloc_perm(c, capacity, Device::cuda());
  for (int byte : {0xA5, 0x5A}) {
    for (const Tensor* t : {&dev.counts, &dev.offsets, &dev.sorted, &dev.rows}) poison(*t, byte);
    compute_permutation_cuda(ids_d, map_view, c.e_local, c.block, dev.view());
    cuda_test::sync();
    EXPECT_TRUE(bytes_equal(ref.counts, dev.counts, "expert_counts"));
    EXPECT_TRUE(bytes_equal(ref.offsets, dev.offsets, "expert_offsets"));
    EXPECT_TRUE(bytes_equal(ref.sorted, dev.sorted, "sorted_ids"));
    EXPECT_TRUE(bytes_equal(ref.rows, dev.rows, "permuted_row"));
  }

  // Gathers of rows of 7168 bf16 (16-byte units), 3 bytes (byte units) and one f32 (4 bytes).
  const std::int64_t rows_used = ref.offsets.ptr<std::int32_t>()[c.e_local];
  for (auto [dtype, shape] : std::vector<std::pair<DType, Shape>>{
           {DType::kBF16, Shape{c.m, 7168}}, {DType::kU8, Shape{c.m, 3}}, {DType::kF32, Shape{c.m}}}) {
    Tensor src(dtype, shape);
    auto* b = static_cast<std::uint8_t*>(src.data());
    for (std::size_t i = 0; i < src.nbytes(); ++i) b[i] = static_cast<std::uint8_t>(rng());
    Shape out_shape = shape;
    out_shape[0] = rows_used + 3;  // a few rows past the used ones (sorted_ids -1 there)
    Tensor out_ref(dtype, out_shape);
    permute_gather(src, ref.sorted, c.k, out_ref);
    const Tensor src_d = to_device(src);
    Tensor out_d(dtype, out_shape, Device::cuda());
    poison(out_d, 0xA5);
    permute_gather_cuda(src_d, dev.sorted, c.k, out_d);
    cuda_test::sync();
    EXPECT_TRUE(bytes_equal(out_ref, out_d, "gathered " + shape.str()));
  }

  if (c.block != 1) return;
  // Batched format.
  std::int64_t t_max = 1;
  for (int e = 0; e < c.e_local; ++e) t_max = std::max<std::int64_t>(t_max, ref.counts.ptr<std::int32_t>()[e]);
  t_max += 2;
  Tensor br_ref(DType::kI32, Shape{c.m, c.k});
  batched_rows(ids, map.defined() ? map.view() : TensorView{}, ref.rows, ref.offsets, t_max, br_ref);
  Tensor br_d(DType::kI32, Shape{c.m, c.k}, Device::cuda());
  poison(br_d, 0xA5);
  batched_rows_cuda(ids_d, map_view, dev.rows, dev.offsets, t_max, br_d);
  cuda_test::sync();
  EXPECT_TRUE(bytes_equal(br_ref, br_d, "batched_row"));

  Tensor src(DType::kBF16, Shape{c.m, 136});
  for (std::int64_t i = 0; i < src.numel(); ++i) src.ptr<std::uint16_t>()[i] = static_cast<std::uint16_t>(rng());
  Tensor out_ref(DType::kBF16, Shape{c.e_local, t_max, 136});
  Tensor ent_ref(DType::kI32, Shape{c.e_local});
  scatter_batched(src, ids, map.defined() ? map.view() : TensorView{}, c.e_local, out_ref, ent_ref);
  const Tensor src_d = to_device(src);
  Tensor out_d(DType::kBF16, Shape{c.e_local, t_max, 136}, Device::cuda());
  Tensor ent_d(DType::kI32, Shape{c.e_local}, Device::cuda());
  poison(out_d, 0xA5);
  poison(ent_d, 0xA5);
  scatter_batched_cuda(src_d, dev.view(), c.k, out_d, ent_d);
  cuda_test::sync();
  EXPECT_TRUE(bytes_equal(out_ref, out_d, "batched activations"));
  EXPECT_TRUE(bytes_equal(ent_ref, ent_d, "expert_num_tokens"));
}

TEST(PermuteCuda, MatchesReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed);
  std::vector<PermCase> cases;
  for (std::int64_t m : {0, 1, 3, 127, 128, 129, 1000}) {
    for (int block : {1, 16, 128}) {
      cases.push_back({m, 8, 256, 256, false, block, Pattern::kUniform});
      cases.push_back({m, 4, 128, 64, true, block, Pattern::kUniform});
    }
    cases.push_back({m, 8, 256, 256, false, 1, Pattern::kOneExpert});
    cases.push_back({m, 2, 512, 512, false, 1, Pattern::kFewExperts});  // most experts empty
    cases.push_back({m, 1, 8, 8, false, 1, Pattern::kUniform});
    cases.push_back({m, 32, 16, 16, false, 1, Pattern::kUniform});  // k > E: repeated experts
  }
  cases.push_back({2, 8, 16, 16, false, 1, Pattern::kUniform});     // tokens < top-k
  cases.push_back({4096, 8, 256, 256, false, 1, Pattern::kUniform});  // many tiles
  cases.push_back({5000, 6, 64, 1, true, 4, Pattern::kUniform});      // one local expert
  for (const PermCase& c : cases) check_case(c, rng);
}

TEST(PermuteCuda, RejectsBadArguments) {
  MOEKIT_REQUIRE_GPU();
  Tensor ids(DType::kI32, Shape{2, 2}, Device::cuda());
  Tensor ids_h(DType::kI32, Shape{2, 2});
  PermCase c{2, 2, 8, 8, false, 1, Pattern::kUniform};
  Perm p = alloc_perm(c, 4, Device::cuda());
  testing::expect_error([&] { compute_permutation_cuda(ids_h, {}, 8, 1, p.view()); },
                        {"topk_ids device"});
  testing::expect_error([&] { compute_permutation_cuda(ids, {}, 1000, 1, p.view()); },
                        {"num_local_experts"});
  testing::expect_error([&] { compute_permutation_cuda(ids, {}, 8, 0, p.view()); }, {"block_size"});
  Perm small = alloc_perm(c, 3, Device::cuda());
  testing::expect_error([&] { compute_permutation_cuda(ids, {}, 8, 1, small.view()); },
                        {"sorted_ids size"});
  Tensor src(DType::kBF16, Shape{2, 8}, Device::cuda()), out(DType::kF32, Shape{4, 8}, Device::cuda());
  testing::expect_error([&] { permute_gather_cuda(src, p.sorted, 2, out); }, {"out dtype"});
}

}  // namespace
}  // namespace moekit
