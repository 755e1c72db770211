// The MPI engine of Communicator: MPI_COMM_WORLD with MPI_ERRORS_RETURN, host buffers. Every
// collective is the nonblocking MPI call (MPI_Iallgather, MPI_Ialltoallv, ...) completed by a
// polling loop with a deadline, so that a rank that died or never arrives turns into a
// moekit::Error on the others instead of a hang (blocking MPI collectives cannot time out).
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moekit/comm/communicator.hpp"
#include "moekit/core/error.hpp"

namespace moekit {
namespace {

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<std::size_t>(len));
}

int to_int_bytes(std::size_t bytes, const char* what) {
  MOEKIT_CHECK_ARG(bytes <= static_cast<std::size_t>(INT_MAX), what,
                   "<= 2^31-1 bytes per rank (MPI int counts)", bytes);
  return static_cast<int>(bytes);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::host(); }
  bool broken() const { return broken_; }

  void all_gather(const void* send, void* recv, std::size_t bytes, StreamHandle) override {
    const int n = to_int_bytes(bytes, "all_gather bytes");
    MPI_Request req;
    check(MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD, &req),
          "all_gather");
    wait(req, "all_gather");
  }

  void all_gather_v(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    const std::vector<std::size_t>& recv_offsets, StreamHandle) override {
    std::vector<int> counts = ints(recv_bytes, "all_gather_v recv_bytes");
    std::vector<int> displs = ints(recv_offsets, "all_gather_v recv_offsets");
    MPI_Request req;
    check(MPI_Iallgatherv(send, counts[static_cast<std::size_t>(rank_)], MPI_BYTE, recv,
                          counts.data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD, &req),
          "all_gather_v");
    wait(req, "all_gather_v");
  }

  void reduce_scatter_sum(const void* send, void* recv, std::size_t count, DType dtype,
                          StreamHandle) override {
    MOEKIT_CHECK_ARG(dtype == DType::kF32, "reduce_scatter_sum dtype", "f32 (mpi engine)",
                     dtype_name(dtype));
    const int n = to_int_bytes(count, "reduce_scatter_sum count");
    MPI_Request req;
    check(MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
          "reduce_scatter_sum");
    wait(req, "reduce_scatter_sum");
  }

  void all_reduce_sum(void* buf, std::size_t count, DType dtype, StreamHandle) override {
    MOEKIT_CHECK_ARG(dtype == DType::kF32, "all_reduce_sum dtype", "f32 (mpi engine)",
                     dtype_name(dtype));
    const int n = to_int_bytes(count, "all_reduce_sum count");
    MPI_Request req;
    check(MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req),
          "all_reduce_sum");
    wait(req, "all_reduce_sum");
  }

  void all_to_all_v(const void* send, const std::vector<std::size_t>& send_bytes,
                    const std::vector<std::size_t>& send_offsets, void* recv,
                    const std::vector<std::size_t>& recv_bytes,
                    const std::vector<std::size_t>& recv_offsets, StreamHandle) override {
    const std::vector<int> sc = ints(send_bytes, "all_to_all_v send_bytes");
    const std::vector<int> sd = ints(send_offsets, "all_to_all_v send_offsets");
    const std::vector<int> rc = ints(recv_bytes, "all_to_all_v recv_bytes");
    const std::vector<int> rd = ints(recv_offsets, "all_to_all_v recv_offsets");
    MPI_Request req;
    check(MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(),
                         MPI_BYTE, MPI_COMM_WORLD, &req),
          "all_to_all_v");
    wait(req, "all_to_all_v");
  }

  void broadcast(void* buf, std::size_t bytes, int root, StreamHandle) override {
    MOEKIT_CHECK_ARG(root >= 0 && root < size_, "broadcast root",
                     "in [0, " + std::to_string(size_) + ")", root);
    MPI_Request req;
    check(MPI_Ibcast(buf, to_int_bytes(bytes, "broadcast bytes"), MPI_BYTE, root, MPI_COMM_WORLD,
                     &req),
          "broadcast");
    wait(req, "broadcast");
  }

  void barrier(StreamHandle) override {
    MPI_Request req;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "barrier");
    wait(req, "barrier");
  }

  void synchronize(StreamHandle) override { usable("synchronize"); }

  void all_gather_host(const void* send, void* recv, std::size_t bytes) override {
    all_gather(send, recv, bytes, nullptr);
  }

 private:
  std::vector<int> ints(const std::vector<std::size_t>& v, const char* what) const {
    MOEKIT_CHECK_ARG(static_cast<int>(v.size()) == size_, what,
                     std::to_string(size_) + " entries (one per rank)", v.size());
    std::vector<int> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_int_bytes(v[i], what);
    return out;
  }

  void usable(const char* what) const {
    MOEKIT_CHECK(!broken_, "mpi ", what, " on rank ", rank_, ": the communicator is broken by an "
                 "earlier failure (", failure_, ")");
  }

  void check(int rc, const char* what) {
    usable(what);
    if (rc == MPI_SUCCESS) return;
    broken_ = true;
    failure_ = std::string(what) + ": " + mpi_error_string(rc);
    MOEKIT_FAIL("mpi ", what, " failed on rank ", rank_, " of ", size_, ": ",
                mpi_error_string(rc));
  }

  // Polls the request until it completes, an error is reported, or the deadline passes. Sleeps
  // between polls (ranks are often oversubscribed: a busy loop would starve the peers).
  void wait(MPI_Request& req, const char* what) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration<double>(timeout_s_);
    auto pause = std::chrono::microseconds(1);
    while (true) {
      int done = 0;
      const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) check(rc, what);
      if (done) return;
      if (clock::now() > deadline) {
        broken_ = true;
        failure_ = std::string(what) + " timed out";
        MOEKIT_FAIL("mpi ", what, " on rank ", rank_, " of ", size_, " timed out after ",
                    timeout_s_, " s (MOEKIT_COMM_TIMEOUT_S): another rank died or did not enter "
                    "the same collective");
      }
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::microseconds(200)) pause *= 2;
    }
  }

  int rank_ = 0, size_ = 1;
  bool broken_ = false;
  std::string failure_;
};

std::mutex g_world_mutex;
std::shared_ptr<MpiCommunicator> g_world;

void finalize_world() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A collective that failed or timed out may still be pending: MPI_Finalize could wait for it
  // forever. Abort the job instead (mpirun then reports a non-zero exit).
  if (g_world && g_world->broken()) MPI_Abort(MPI_COMM_WORLD, 3);
  MPI_Finalize();
}

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<Communicator> mpi_world() {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  if (g_world) return g_world;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    MOEKIT_CHECK(rc == MPI_SUCCESS, "mpi_world: MPI_Init_thread failed: ", mpi_error_string(rc));
    std::atexit(finalize_world);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  g_world = std::make_shared<MpiCommunicator>();
  return g_world;
}

}  // namespace moekit
