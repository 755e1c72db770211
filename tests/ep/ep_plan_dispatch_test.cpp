// The host pieces of expert parallelism that need no MPI: the all-to-all routing plan (orders and
// counts of ep_plan.hpp) and the oracle's dispatch choice (oracle/dispatch.hpp).
#include <gtest/gtest.h>

#include <vector>

#include "ep/ep_plan.hpp"
#include "framework/seed_util.hpp"
#include "moekit/oracle/dispatch.hpp"

namespace moekit {
namespace {

TEST(EpPlan, DispatchSendsEachTokenOncePerOwningRankInTokenOrder) {
  // 4 experts on 2 ranks (0,1 -> rank 0; 2,3 -> rank 1), k = 2, 3 tokens.
  const std::vector<int> owner{0, 0, 1, 1};
  const std::int32_t ids[] = {0, 1, /*t1*/ 2, 0, /*t2*/ 3, 2};
  const ep::DispatchPlan p = ep::plan_dispatch(ids, 3, 2, owner, 2);
  EXPECT_EQ(p.send_count, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(p.send_token, (std::vector<std::int32_t>{0, 1, 1, 2}));
  EXPECT_EQ(p.send_first, (std::vector<std::int64_t>{0, 2}));
  const std::int32_t bad[] = {0, 4};
  testing::expect_error([&] { ep::plan_dispatch(bad, 1, 2, owner, 2); }, {"topk_ids[0, 1]", "4"});
}

TEST(EpPlan, CombineRowsComeHomeInSlotPositions) {
  // Rank 0's view of the example above (it is also its own only source: one rank world for the
  // receive side, so the send and home orders can be checked together).
  const std::vector<int> owner{0, 0, 0, 0};
  const std::int32_t ids[] = {0, 1, 2, 0, 3, 2};
  const ep::DispatchPlan d = ep::plan_dispatch(ids, 3, 2, owner, 1);
  const ep::CombinePlan c = ep::plan_combine(ids, {3}, ids, 3, 2, d, owner, 0, false,
                                             [](std::int64_t i, int j) {
                                               return static_cast<std::int32_t>(i * 2 + j);
                                             });
  EXPECT_EQ(c.send_row, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(c.home_row, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  const ep::CombinePlan partial = ep::plan_combine(ids, {3}, ids, 3, 2, d, owner, 0, true,
                                                   [](std::int64_t, int) { return 0; });
  EXPECT_EQ(partial.send_row, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(partial.home_row, (std::vector<std::int32_t>{0, 1, 2}));  // [m, ranks = 1]
}

MoeProblem ep_problem(int ep, int k, bool low_latency, int dp) {
  MoeProblem p;
  p.num_tokens = 8;
  p.layer.num_experts = 16;
  p.layer.routing.top_k = k;
  p.parallel = ParallelConfig::expert_parallel(16, ep, 0, dp);
  p.parallel.low_latency_dispatch = low_latency;
  return p;
}

TEST(Dispatch, OracleChoosesAndExplains) {
  const DispatchSelection one = select_dispatch(ep_problem(1, 8, false, 1));
  EXPECT_FALSE(one.expert_parallel);
  const DispatchSelection decode = select_dispatch(ep_problem(8, 8, true, 8));
  EXPECT_EQ(decode.kind, DispatchKind::kAllToAll);
  EXPECT_TRUE(decode.batched);
  EXPECT_NE(decode.table().find("refused: naive all-gathers"), std::string::npos) << decode.table();
  EXPECT_EQ(select_dispatch(ep_problem(8, 8, false, 8)).kind, DispatchKind::kAllToAll);  // 66%
  EXPECT_EQ(select_dispatch(ep_problem(2, 8, false, 2)).kind, DispatchKind::kNaive);     // 99.6%
  const DispatchSelection forced = select_dispatch(ep_problem(8, 8, false, 8), "naive");
  EXPECT_TRUE(forced.overridden);
  EXPECT_EQ(forced.kind, DispatchKind::kNaive);
}

TEST(Dispatch, ImpossibleCombinationsAreRefusedWithAReason) {
  testing::expect_error([] { select_dispatch(ep_problem(8, 8, true, 8), "naive"); },
                        {"naive", "refused", "batched"});
  testing::expect_error([] { select_dispatch(ep_problem(1, 8, false, 1), "a2a"); },
                        {"nothing to dispatch"});
  testing::expect_error([] { select_dispatch(ep_problem(4, 8, false, 1)); },
                        {"dp_size == ep_size", "dp_size 1"});
  testing::expect_error([] { select_dispatch(ep_problem(4, 8, false, 4), "ring"); },
                        {"--dispatch", "auto | naive | a2a", "ring"});
}

}  // namespace
}  // namespace moekit
