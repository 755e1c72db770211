// The NCCL engine of Communicator: one GPU per rank, collectives asynchronous on the caller's
// stream (legal inside CUDA-graph capture). The communicator is created NONBLOCKING
// (ncclConfig_t::blocking = 0) so that no NCCL call can block forever: every call that returns
// ncclInProgress, and every synchronize(), polls ncclCommGetAsyncError / cudaStreamQuery against
// the timeout, and a failure or timeout aborts the communicator (ncclCommAbort) and throws.
// Bootstrap (unique id of rank 0): MPI under mpirun, or a file (communicator.hpp).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/runtime/cuda_check.hpp"
#include "core/env_switch.hpp"
#include "moekit/comm/communicator.hpp"
#include "moekit/core/error.hpp"

namespace moekit {
namespace {

using clock_type = std::chrono::steady_clock;

cudaStream_t as_stream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

ncclDataType_t nccl_type(DType t, const char* what) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    default: break;
  }
  throw_arg_error("nccl", std::string(what) + " dtype", "f32 or bf16", dtype_name(t));
}

int env_int(const char* name) {
  const auto v = env::integer(name, 0, 1 << 20);
  MOEKIT_CHECK(v.has_value(), "NCCL file bootstrap: environment variable ", name, " is not set "
               "(set MOEKIT_RANK, MOEKIT_WORLD_SIZE and MOEKIT_NCCL_ID_FILE, or launch with mpirun)");
  return static_cast<int>(*v);
}

// Rank 0 writes the id to path.tmp and renames it (atomic); the others poll until it appears.
ncclUniqueId file_bootstrap(int rank, double timeout_s) {
  const auto path_env = env::value("MOEKIT_NCCL_ID_FILE");
  MOEKIT_CHECK(path_env.has_value(), "NCCL file bootstrap: MOEKIT_NCCL_ID_FILE is not set");
  const std::string path = *path_env;
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    MOEKIT_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: ", ncclGetErrorString(r));
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(id.internal, sizeof(id.internal));
      MOEKIT_CHECK(f.good(), "NCCL file bootstrap: cannot write ", tmp);
    }
    std::filesystem::rename(tmp, path);
    return id;
  }
  const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    std::ifstream f(path, std::ios::binary);
    if (f.read(id.internal, sizeof(id.internal))) return id;
    MOEKIT_CHECK(clock_type::now() < deadline, "NCCL file bootstrap on rank ", rank,
                 ": no unique id in ", path, " after ", timeout_s, " s (did rank 0 start?)");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int device, NcclBootstrap bootstrap) : device_(device) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast stays off unless the caller chose
    MOEKIT_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id;
    const bool use_mpi = bootstrap == NcclBootstrap::kMpi ||
                         (bootstrap == NcclBootstrap::kAuto && mpi_available() && launched_by_mpi());
    if (use_mpi) {
      auto world = mpi_world();
      rank_ = world->rank();
      size_ = world->size();
      if (rank_ == 0) {
        const ncclResult_t r = ncclGetUniqueId(&id);
        MOEKIT_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: ", ncclGetErrorString(r));
      }
      world->broadcast(id.internal, sizeof(id.internal), 0);
    } else {
      rank_ = env_int("MOEKIT_RANK");
      size_ = env_int("MOEKIT_WORLD_SIZE");
      MOEKIT_CHECK_ARG(size_ >= 1 && rank_ >= 0 && rank_ < size_, "MOEKIT_RANK / MOEKIT_WORLD_SIZE",
                       "0 <= rank < size", std::to_string(rank_) + " / " + std::to_string(size_));
      id = file_bootstrap(rank_, timeout_s_);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
    MOEKIT_CUDA_CHECK(cudaMalloc(&staging_, kStagingBytes));
  }
  ~NcclCommunicator() override {
    if (staging_) cudaFree(staging_);
    if (host_stream_) cudaStreamDestroy(host_stream_);
    if (!comm_) return;
    if (broken_) {
      ncclCommAbort(comm_);
    } else {
      cudaSetDevice(device_);
      ncclCommFinalize(comm_);
      // Finalize is nonblocking on this communicator: wait for it (bounded), then destroy.
      ncclResult_t state = ncclInProgress;
      const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s_);
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
             clock_type::now() < deadline)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (state == ncclSuccess) ncclCommDestroy(comm_);
      else ncclCommAbort(comm_);
    }
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cuda(device_); }

  void all_gather(const void* send, void* recv, std::size_t bytes, StreamHandle s) override {
    check(ncclAllGather(send, recv, bytes, ncclUint8, comm_, as_stream(s)), "ncclAllGather");
  }

  void all_gather_v(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                    const std::vector<std::size_t>& recv_offsets, StreamHandle s) override {
    // One broadcast per root inside a group: NCCL's recipe for a variable all-gather.
    check_sizes(recv_bytes, "all_gather_v recv_bytes");
    check_sizes(recv_offsets, "all_gather_v recv_offsets");
    check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      auto* dst = static_cast<unsigned char*>(recv) + recv_offsets[static_cast<std::size_t>(r)];
      check(ncclBroadcast(r == rank_ ? send : dst, dst, recv_bytes[static_cast<std::size_t>(r)],
                          ncclUint8, r, comm_, as_stream(s)),
            "ncclBroadcast");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void reduce_scatter_sum(const void* send, void* recv, std::size_t count, DType dtype,
                          StreamHandle s) override {
    check(ncclReduceScatter(send, recv, count, nccl_type(dtype, "reduce_scatter_sum"), ncclSum,
                            comm_, as_stream(s)),
          "ncclReduceScatter");
  }

  void all_reduce_sum(void* buf, std::size_t count, DType dtype, StreamHandle s) override {
    check(ncclAllReduce(buf, buf, count, nccl_type(dtype, "all_reduce_sum"), ncclSum, comm_,
                        as_stream(s)),
          "ncclAllReduce");
  }

  void all_to_all_v(const void* send, const std::vector<std::size_t>& send_bytes,
                    const std::vector<std::size_t>& send_offsets, void* recv,
                    const std::vector<std::size_t>& recv_bytes,
                    const std::vector<std::size_t>& recv_offsets, StreamHandle s) override {
    check_sizes(send_bytes, "all_to_all_v send_bytes");
    check_sizes(send_offsets, "all_to_all_v send_offsets");
    check_sizes(recv_bytes, "all_to_all_v recv_bytes");
    check_sizes(recv_offsets, "all_to_all_v recv_offsets");
    check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      const std::size_t i = static_cast<std::size_t>(r);
      if (send_bytes[i])
        check(ncclSend(static_cast<const unsigned char*>(send) + send_offsets[i], send_bytes[i],
                       ncclUint8, r, comm_, as_stream(s)),
              "ncclSend");
      if (recv_bytes[i])
        check(ncclRecv(static_cast<unsigned char*>(recv) + recv_offsets[i], recv_bytes[i],
                       ncclUint8, r, comm_, as_stream(s)),
              "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  void broadcast(void* buf, std::size_t bytes, int root, StreamHandle s) override {
    check(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, as_stream(s)), "ncclBroadcast");
  }

  void barrier(StreamHandle s) override {
    // A one-float all-reduce on the staging buffer, then wait for it.
    check(ncclAllReduce(staging_, staging_, 1, ncclFloat32, ncclSum, comm_, as_stream(s)),
          "ncclAllReduce (barrier)");
    synchronize(s);
  }

  void synchronize(StreamHandle s) override {
    usable("synchronize");
    const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s_);
    while (true) {
      const cudaError_t q = cudaStreamQuery(as_stream(s));
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) MOEKIT_CUDA_CHECK(q);
      poll_async_error("synchronize");
      if (clock_type::now() > deadline) fail_timeout("synchronize");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void all_gather_host(const void* send, void* recv, std::size_t bytes) override {
    const std::size_t total = bytes * static_cast<std::size_t>(size_);
    MOEKIT_CHECK_ARG(total + bytes <= kStagingBytes, "all_gather_host bytes",
                     "<= " + std::to_string(kStagingBytes / (size_ + 1)) + " per rank", bytes);
    auto* in = static_cast<unsigned char*>(staging_) + total;
    MOEKIT_CUDA_CHECK(cudaMemcpyAsync(in, send, bytes, cudaMemcpyHostToDevice, host_stream()));
    all_gather(in, staging_, bytes, host_stream());
    MOEKIT_CUDA_CHECK(
        cudaMemcpyAsync(recv, staging_, total, cudaMemcpyDeviceToHost, host_stream()));
    synchronize(host_stream());
  }

 private:
  static constexpr std::size_t kStagingBytes = 1 << 20;

  cudaStream_t host_stream() {
    if (!host_stream_)
      MOEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&host_stream_, cudaStreamNonBlocking));
    return host_stream_;
  }

  void check_sizes(const std::vector<std::size_t>& v, const char* what) const {
    MOEKIT_CHECK_ARG(static_cast<int>(v.size()) == size_, what,
                     std::to_string(size_) + " entries (one per rank)", v.size());
  }

  void usable(const char* what) const {
    MOEKIT_CHECK(!broken_, "nccl ", what, " on rank ", rank_, ": the communicator was aborted by "
                 "an earlier failure (", failure_, ")");
  }

  [[noreturn]] void fail(const std::string& what, const std::string& why) {
    broken_ = true;
    failure_ = what + ": " + why;
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    MOEKIT_FAIL("nccl ", what, " failed on rank ", rank_, " of ", size_, ": ", why);
  }

  [[noreturn]] void fail_timeout(const std::string& what) {
    fail(what, "timed out after " + std::to_string(timeout_s_) +
                   " s (MOEKIT_COMM_TIMEOUT_S): another rank died or did not enter the same "
                   "collective; the communicator was aborted");
  }

  void poll_async_error(const char* what) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail(what, std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r));
    if (state != ncclSuccess && state != ncclInProgress)
      fail(what, std::string(ncclGetErrorString(state)) + " (" + ncclGetLastError(comm_) + ")");
  }

  // A nonblocking communicator may answer ncclInProgress: wait (bounded) until the call is
  // enqueued or failed.
  void check(ncclResult_t r, const char* what) {
    usable(what);
    if (r == ncclSuccess) return;
    if (r != ncclInProgress)
      fail(what, std::string(ncclGetErrorString(r)) + (comm_ ? std::string(" (") +
                                                                   ncclGetLastError(comm_) + ")"
                                                             : std::string()));
    const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s_);
    while (true) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      if (q != ncclSuccess) fail(what, ncclGetErrorString(q));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(what, ncclGetErrorString(state));
      if (clock_type::now() > deadline) fail_timeout(what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  int device_ = 0, rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  void* staging_ = nullptr;
  cudaStream_t host_stream_ = nullptr;
  bool broken_ = false;
  std::string failure_;
};

}  // namespace

bool nccl_available() { return true; }

std::shared_ptr<Communicator> make_nccl_communicator(int device, NcclBootstrap bootstrap) {
  return std::make_shared<NcclCommunicator>(device, bootstrap);
}

}  // namespace moekit
