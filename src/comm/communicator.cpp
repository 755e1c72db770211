// Communicator: what every engine shares (timeouts, host helpers, launcher environment), and the
// factories' stand-ins when the build lacks an engine.
#include "moekit/comm/communicator.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "core/env_switch.hpp"
#include "moekit/core/error.hpp"

namespace moekit {

double Communicator::default_timeout() {
  // Seconds; a week at most.
  return env::real("MOEKIT_COMM_TIMEOUT_S", 0.0, 7 * 24 * 3600.0).value_or(300.0);
}

void Communicator::set_timeout_seconds(double seconds) {
  MOEKIT_CHECK_ARG(seconds > 0, "timeout seconds", "> 0", seconds);
  timeout_s_ = seconds;
}

void Communicator::all_to_all_host(const std::int64_t* send, std::int64_t* recv) {
  // Every rank's full row, then each rank keeps the column addressed to it: one all-gather of
  // size() values per rank (small: token counts).
  const int n = size();
  std::vector<std::int64_t> all(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  all_gather_host(send, all.data(), static_cast<std::size_t>(n) * sizeof(std::int64_t));
  for (int s = 0; s < n; ++s)
    recv[s] = all[static_cast<std::size_t>(s) * static_cast<std::size_t>(n) +
                  static_cast<std::size_t>(rank())];
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

int launcher_local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MOEKIT_LOCAL_RANK",
                        "MOEKIT_RANK"}) {
    if (const auto r = env::integer(v, 0, 1 << 20)) return static_cast<int>(*r);
  }
  return -1;
}

#if !MOEKIT_WITH_MPI
bool mpi_available() { return false; }
std::shared_ptr<Communicator> mpi_world() {
  MOEKIT_FAIL("mpi_world: this build has no MPI (configure with MPI installed: apt-get install "
              "libopenmpi-dev openmpi-bin, or scripts/install_deps.sh; -DMOEKIT_WITH_MPI=ON)");
}
#endif

#if !MOEKIT_WITH_NCCL
bool nccl_available() { return false; }
std::shared_ptr<Communicator> make_nccl_communicator(int, NcclBootstrap) {
  MOEKIT_FAIL("make_nccl_communicator: this build has no NCCL (a CUDA build with "
              ".deps/nccl from scripts/install_deps.sh; -DMOEKIT_WITH_NCCL=ON)");
}
#endif

}  // namespace moekit
