// A rank that stops answering (dead, hung, or never entering the collective) makes the others fail
// with a clear error within the communicator's timeout instead of hanging. Run alone with 2 ranks
// and MOEKIT_COMM_TIMEOUT_S=3 (tests/CMakeLists.txt: EpMpi.DeadRankTimesOut); the job then aborts
// (the broken world), so the test passes on rank 0's printed line.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "framework/seed_util.hpp"
#include "mpi/ep_mpi_util.hpp"

namespace moekit {
namespace {

TEST(EpMpiFailure, SilentRankMakesOthersTimeOut) {
  auto world = mpi_world();
  ASSERT_GE(world->size(), 2);
  testing::EpCase c;
  c.layer = testing::small_layer(RoutingMethod::kRenormalize, Activation::kSiluAndMul, 8, 4);
  c.wq = parse_quant_config("bf16");
  c.aq = parse_quant_config("bf16");
  c.tokens_per_rank.assign(static_cast<std::size_t>(world->size()), 3);
  const testing::EpInputs in = testing::make_ep_inputs(c, 5);
  if (world->rank() == world->size() - 1) {
    // The silent rank: alive but never enters a collective again, until the job is aborted.
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = testing::expect_error(
      [&] {
        testing::run_ep_rank(*world, world, c, in, DispatchKind::kAllToAll, false,
                             ReducePolicy::kContiguous);
      },
      {"timed out", "MOEKIT_COMM_TIMEOUT_S"});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2 * world->timeout_seconds() + 2);
  if (world->rank() == 0 && !msg.empty()) {
    std::printf("EP_TIMEOUT_DETECTED within %.1f s: %s\n", s, msg.c_str());
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace moekit
