// Expert parallelism over MPI ranks (run with mpirun -np 2 and -np 4, tests/CMakeLists.txt):
// every dispatch mode, every routing method, bf16 and 4-bit schemes, against the single-process
// CPU layer BITWISE (the reduction order of ep_prepare_finalize.hpp), with adversarial token
// splits; and the collective checks (ranks that disagree, bad expert maps).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/seed_util.hpp"
#include "mpi/ep_mpi_util.hpp"

namespace moekit {
namespace {

using testing::EpCase;
using testing::first_bit_difference;
using testing::small_layer;

std::shared_ptr<Communicator> world() { return mpi_world(); }

struct Mode {
  const char* name;
  DispatchKind kind;
  bool batched;
};
constexpr Mode kModes[] = {{"naive", DispatchKind::kNaive, false},
                           {"a2a", DispatchKind::kAllToAll, false},
                           {"a2a_batched", DispatchKind::kAllToAll, true}};

// Uneven split of `total` tokens: rank r gets a different count, the last rank none when asked.
std::vector<std::int64_t> split(std::int64_t total, int ranks, bool last_empty) {
  std::vector<std::int64_t> n(static_cast<std::size_t>(ranks), 0);
  const int users = last_empty && ranks > 1 ? ranks - 1 : ranks;
  for (std::int64_t t = 0; t < total; ++t) ++n[static_cast<std::size_t>((t * 7 / 3) % users)];
  return n;
}

// Runs every mode for a case and compares each rank's rows with the single-process output.
void expect_bitwise(const EpCase& c, std::uint64_t seed, const std::string& what) {
  const testing::EpInputs in = testing::make_ep_inputs(c, seed);
  const Tensor ref = testing::single_process_output(c, in);
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(what + " dispatch " + mode.name);
    const testing::EpRun run = testing::run_ep_rank(*world(), world(), c, in, mode.kind,
                                                    mode.batched, ReducePolicy::kContiguous);
    const std::int64_t m = run.out.shape()[0];
    Tensor ref_f32(DType::kF32, Shape{m, c.layer.hidden_size});
    const TensorView mine = testing::rows_of(ref, run.first, m);
    for (std::int64_t i = 0; i < ref_f32.numel(); ++i)
      ref_f32.ptr<float>()[i] = c.dtype == DType::kF32
                                    ? mine.ptr<const float>()[i]
                                    : bf16_to_float(mine.ptr<const std::uint16_t>()[i]);
    const std::int64_t diff = first_bit_difference(run.out, ref_f32);
    EXPECT_EQ(diff, -1) << "rank " << world()->rank() << ": "
                        << testing::describe_difference(run.out, ref_f32, diff);
  }
}

struct Scheme {
  const char* w;
  const char* a;
  bool static_scales;
};
constexpr Scheme kSchemes[] = {{"bf16", "bf16", false},
                               {"mxfp4", "mxfp8", false},     // 4-bit weights, 8-bit bytes sent
                               {"nvfp4", "nvfp4", true}};     // 4-bit bytes + static global scale

TEST(EpMpi, EveryRoutingMethodAndSchemeMatchesSingleProcessBitwise) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const RoutingMethod methods[] = {
      RoutingMethod::kDefault,    RoutingMethod::kRenormalize, RoutingMethod::kRenormalizeNaive,
      RoutingMethod::kTopK,       RoutingMethod::kSigmoid,     RoutingMethod::kSigmoidRenorm,
      RoutingMethod::kDeepSeekV3, RoutingMethod::kLlama4,      RoutingMethod::kMiniMax2};
  const int ranks = world()->size();
  for (const Scheme& s : kSchemes) {
    for (RoutingMethod method : methods) {
      EpCase c;
      c.layer = small_layer(method, Activation::kSiluAndMul, 8, 4);
      c.wq = parse_quant_config(s.w);
      c.aq = parse_quant_config(s.a);
      c.static_scales = s.static_scales;
      c.tokens_per_rank = split(5 * ranks + 1, ranks, false);  // not divisible by the ranks
      expect_bitwise(c, seed, std::string(s.w) + "/" + s.a + " " +
                                  std::string(routing_method_name(method)));
    }
  }
}

TEST(EpMpi, AdversarialSplitsMatchSingleProcessBitwise) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const int ranks = world()->size();
  EpCase c;
  c.layer = small_layer(RoutingMethod::kRenormalize, Activation::kSwigluOai, 16, 4);
  c.wq = parse_quant_config("mxfp4");
  c.aq = parse_quant_config("mxfp8");
  c.dtype = DType::kBF16;
  c.tokens_per_rank = split(3 * ranks + 2, ranks, true);  // the last rank has M = 0
  expect_bitwise(c, seed, "last rank empty");
  c.tokens_per_rank.assign(static_cast<std::size_t>(ranks), 0);
  c.tokens_per_rank[0] = 1;  // one token in the world: most ranks and experts receive nothing
  expect_bitwise(c, seed + 1, "one token");
  c.tokens_per_rank.assign(static_cast<std::size_t>(ranks), 0);
  expect_bitwise(c, seed + 2, "no token anywhere");
}

// Every token routed to the experts of rank 0: the other ranks receive no tokens (a2a) and most
// experts get none; the EP result still equals the single-process one bitwise.
TEST(EpMpi, RanksThatReceiveNoTokens) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const int ranks = world()->size();
  EpCase c;
  c.layer = small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul, 16, 4);
  c.wq = parse_quant_config("bf16");
  c.aq = parse_quant_config("bf16");
  c.tokens_per_rank = split(4 * ranks, ranks, false);
  testing::EpInputs in = testing::make_ep_inputs(c, seed);
  const int per_rank = 16 / ranks;
  for (std::int64_t t = 0; t < in.total; ++t)  // rank 0's experts, distinct per token
    for (int j = 0; j < 4; ++j)
      in.ids.ptr<std::int32_t>()[t * 4 + j] = static_cast<std::int32_t>(j % per_rank);
  const Tensor ref = testing::single_process_output(c, in);
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    const testing::EpRun run = testing::run_ep_rank(*world(), world(), c, in, mode.kind,
                                                    mode.batched, ReducePolicy::kContiguous);
    EXPECT_EQ(first_bit_difference(run.out,
                                   testing::rows_of(ref, run.first, run.out.shape()[0])),
              -1);
  }
}

// A non-contiguous ownership (expert g on rank g % P, local ids descending) changes nothing.
TEST(EpMpi, StridedExpertMap) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const int ranks = world()->size(), rank = world()->rank();
  EpCase c;
  c.layer = small_layer(RoutingMethod::kDeepSeekV3, Activation::kSiluAndMul, 8, 4);
  c.wq = parse_quant_config("fp8_block");
  c.aq = parse_quant_config("fp8_1x128");
  c.tokens_per_rank = split(3 * ranks + 1, ranks, false);
  const testing::EpInputs in = testing::make_ep_inputs(c, seed);
  const Tensor ref = testing::single_process_output(c, in);
  std::vector<std::int32_t> map(8, -1);
  const int local = 8 / ranks;
  for (int g = 0; g < 8; ++g)
    if (g % ranks == rank) map[static_cast<std::size_t>(g)] = local - 1 - g / ranks;
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    const testing::EpRun run = testing::run_ep_rank(*world(), world(), c, in, mode.kind,
                                                    mode.batched, ReducePolicy::kContiguous, map);
    EXPECT_EQ(first_bit_difference(run.out,
                                   testing::rows_of(ref, run.first, run.out.shape()[0])),
              -1);
  }
}

// Experts that reduce themselves: one partial sum per rank, summed in rank order. Deterministic
// and close to the single-process output, not bitwise (the sum is reassociated).
TEST(EpMpi, AlreadyReducedExpertsCombinePartialSums) {
  const auto seed = testing::test_seed();
  MOEKIT_LOG_SEED(seed);
  const int ranks = world()->size();
  EpCase c;
  c.layer = small_layer(RoutingMethod::kSigmoidRenorm, Activation::kSiluAndMul, 8, 4);
  c.wq = parse_quant_config("bf16");
  c.aq = parse_quant_config("bf16");
  c.tokens_per_rank = split(4 * ranks + 3, ranks, false);
  const testing::EpInputs in = testing::make_ep_inputs(c, seed);
  const Tensor ref = testing::single_process_output(c, in);
  for (DispatchKind kind : {DispatchKind::kNaive, DispatchKind::kAllToAll}) {
    SCOPED_TRACE(std::string(dispatch_kind_name(kind)));
    const testing::EpRun a = testing::run_ep_rank(*world(), world(), c, in, kind, false,
                                                  ReducePolicy::kAlreadyReduced);
    const testing::EpRun b = testing::run_ep_rank(*world(), world(), c, in, kind, false,
                                                  ReducePolicy::kAlreadyReduced);
    EXPECT_EQ(first_bit_difference(a.out, b.out), -1);  // run to run
    const TensorView r = testing::rows_of(ref, a.first, a.out.shape()[0]);
    double err = 0, norm = 0;
    for (std::int64_t i = 0; i < a.out.numel(); ++i) {
      const double d = a.out.ptr<float>()[i] - r.ptr<const float>()[i];
      err += d * d;
      norm += double(r.ptr<const float>()[i]) * r.ptr<const float>()[i];
    }
    EXPECT_LE(err, 1e-12 * (norm + 1e-30)) << "relative L2^2 " << err / (norm + 1e-30);
  }
}

// Ranks that prepared different problems: every rank throws at prepare, naming the field and both
// values (no hang: the handshake is one all-gather).
TEST(EpMpi, RanksThatDisagreeFailOnEveryRankNamingTheField) {
  const int ranks = world()->size(), rank = world()->rank();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  struct Variant {
    const char* field;
    std::function<void(EpCase&)> change;
    const char* ours;
    const char* theirs;
  };
  const Variant variants[] = {
      {"hidden_size", [](EpCase& c) { c.layer.hidden_size = 256; }, "128", "256"},
      {"num_experts", [](EpCase& c) { c.layer.num_experts = 16; }, "8", "16"},
      {"top_k", [](EpCase& c) { c.layer.routing.top_k = 2; }, "4", "2"},
      {"activation_dtype", [](EpCase& c) { c.dtype = DType::kBF16; }, "f32", "bf16"},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.field);
    EpCase c;
    c.layer = small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul, 8, 4);
    c.wq = parse_quant_config("bf16");
    c.aq = parse_quant_config("bf16");
    if (rank == ranks - 1) v.change(c);
    MoeProblem p = testing::ep_problem(c, 4);
    p.parallel = ParallelConfig::expert_parallel(c.layer.num_experts, ranks, rank, ranks);
    const MoeWeights w = testing::local_weights(
        random_moe_weights(c.layer, c.wq, 1), p.parallel);
    FusedMoEKernel k(make_cpu_ep_prepare_finalize(world(), p, {DispatchKind::kAllToAll}),
                     make_cpu_standard_experts());
    testing::expect_error([&] { k.prepare(p, w); },
                          {v.field, v.ours, v.theirs, "rank 0", "disagree"});
  }
}

TEST(EpMpi, ExpertMapsMustPartitionTheExperts) {
  const int ranks = world()->size(), rank = world()->rank();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  EpCase c;
  c.layer = small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul, 8, 4);
  c.wq = parse_quant_config("bf16");
  c.aq = parse_quant_config("bf16");
  const MoeWeights full = random_moe_weights(c.layer, c.wq, 1);
  // Owned twice: the last rank also claims expert 0. Unowned: the last rank drops its last one.
  for (bool twice : {true, false}) {
    SCOPED_TRACE(twice ? "owned twice" : "unowned");
    MoeProblem p = testing::ep_problem(c, 4);
    p.parallel = ParallelConfig::expert_parallel(8, ranks, rank, ranks);
    if (rank == ranks - 1) {
      auto& map = p.parallel.expert_map;
      const int n_local = p.parallel.num_local_experts(8);
      if (twice) {
        map[0] = n_local;  // one more local expert
      } else {
        map[7] = -1;
      }
    }
    const MoeWeights w = testing::local_weights(full, p.parallel);
    FusedMoEKernel k(make_cpu_ep_prepare_finalize(world(), p, {DispatchKind::kNaive}),
                     make_cpu_standard_experts());
    if (twice)
      testing::expect_error([&] { k.prepare(p, w); }, {"expert 0", "owned twice", "rank 0"});
    else
      testing::expect_error([&] { k.prepare(p, w); }, {"expert 7", "owned by no rank"});
  }
}

TEST(EpMpi, DynamicPerTensorScalesAreRefused) {
  const int ranks = world()->size(), rank = world()->rank();
  EpCase c;
  c.layer = small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul, 8, 4);
  c.wq = parse_quant_config("nvfp4");
  c.aq = parse_quant_config("nvfp4");
  c.tokens_per_rank.assign(static_cast<std::size_t>(ranks), 2);
  const testing::EpInputs in = testing::make_ep_inputs(c, 3);  // no static scales
  testing::expect_error(
      [&] {
        testing::run_ep_rank(*world(), world(), c, in, DispatchKind::kNaive, false,
                             ReducePolicy::kContiguous);
      },
      {"static input scale"});
  (void)rank;
}

}  // namespace
}  // namespace moekit
