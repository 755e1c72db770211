// main() of moekit_mpi_tests, run under mpirun (tests/CMakeLists.txt registers the runs): MPI is
// initialized first, rank 0's test seed is broadcast so that every rank builds the same layer and
// inputs, rank 0 prints the usual GoogleTest output and the other ranks print only their failures.
// A failure on any rank makes that rank exit non-zero, and mpirun with it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "moekit/comm/communicator.hpp"
#include "test_seed.hpp"

namespace {

class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto world = moekit::mpi_world();
  // Only rank 0 draws the seed; the others read it from the environment on first use.
  std::uint64_t seed = world->rank() == 0 ? moekit::process_test_seed() : 0;
  world->broadcast(&seed, sizeof(seed), 0);
  setenv("MOEKIT_TEST_SEED", std::to_string(seed).c_str(), 1);
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly(world->rank()));
  } else {
    std::printf("moekit_mpi_tests: %d ranks, seed %llu (MOEKIT_TEST_SEED to reproduce)\n",
                world->size(), static_cast<unsigned long long>(seed));
  }
  return RUN_ALL_TESTS();
}
