// main() of moekit_gpu_ep_tests: one process per GPU, started by mpirun (NCCL bootstrapped over
// MPI) or by bench/run_device_ep.sh's file launcher (MOEKIT_RANK / MOEKIT_WORLD_SIZE /
// MOEKIT_NCCL_ID_FILE). Each rank uses the GPU of its local rank (CUDA_VISIBLE_DEVICES, set here
// before the CUDA runtime starts unless the launcher set it). Rank 0's seed is shared.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gpu_ep/ep_gpu_util.hpp"
#include "test_seed.hpp"

namespace moekit::testing {
std::shared_ptr<Communicator>& gpu_world() {
  static std::shared_ptr<Communicator> comm;
  return comm;
}
}  // namespace moekit::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const int local = moekit::launcher_local_rank(); local >= 0 && !std::getenv("CUDA_VISIBLE_DEVICES"))
    setenv("CUDA_VISIBLE_DEVICES", std::to_string(local).c_str(), 1);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  auto comm = moekit::make_nccl_communicator(0);
  moekit::testing::gpu_world() = comm;
  std::uint64_t seed = comm->rank() == 0 ? moekit::process_test_seed() : 0;
  std::uint64_t all[64] = {};
  comm->all_gather_host(&seed, all, sizeof(seed));
  seed = all[0];
  setenv("MOEKIT_TEST_SEED", std::to_string(seed).c_str(), 1);
  if (comm->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  } else {
    std::printf("moekit_gpu_ep_tests: %d GPU ranks (nccl), seed %llu\n", comm->size(),
                static_cast<unsigned long long>(seed));
  }
  const int rc = RUN_ALL_TESTS();
  // Each rank's verdict reaches rank 0, so that its output tells the whole story.
  int verdict = rc, verdicts[64] = {};
  comm->all_gather_host(&verdict, verdicts, sizeof(int));
  if (comm->rank() == 0) {
    int failed = 0;
    for (int r = 0; r < comm->size(); ++r) failed += verdicts[r] != 0;
    std::printf("moekit_gpu_ep_tests: %d of %d ranks failed\n", failed, comm->size());
  }
  return rc;
}
