// The communicator of expert parallelism: the collectives a multi-process PrepareFinalize needs,
// behind one plain-C++ interface (no MPI or NCCL type here). Two engines, both real libraries:
//   mpi   host memory, CPU ranks (Open MPI); also what bootstraps NCCL under mpirun.
//   nccl  CUDA device memory, one GPU per rank; asynchronous on the caller's stream and legal
//         inside CUDA-graph capture (ncclGroupStart/End around grouped send/recv).
// Buffers live on device(): host pointers for mpi, device pointers of device().index for nccl.
//
// Failure model: no call blocks forever. Every wait (MPI request, NCCL stream/async error) is
// bounded by timeout_seconds() (env MOEKIT_COMM_TIMEOUT_S, default 300): when a rank died or never
// entered the collective, the others throw moekit::Error naming the collective, the rank, the
// timeout and the likely cause; an NCCL communicator is then aborted (ncclCommAbort). After a
// failure the communicator is broken and every further call throws at once; the processes should
// exit (the MPI world aborts the job at exit when it is broken, so mpirun returns non-zero).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moekit/core/dtype.hpp"
#include "moekit/core/tensor.hpp"

namespace moekit {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "mpi" or "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;  // host (mpi) or cuda(i) (nccl)
  double timeout_seconds() const { return timeout_s_; }
  void set_timeout_seconds(double seconds);

  // recv [size() * bytes] = every rank's `bytes` bytes of send, in rank order.
  virtual void all_gather(const void* send, void* recv, std::size_t bytes,
                          StreamHandle stream = nullptr) = 0;
  // Variable all-gather: rank r contributes recv_bytes[r] bytes, placed at recv_offsets[r].
  virtual void all_gather_v(const void* send, void* recv, const std::vector<std::size_t>& recv_bytes,
                            const std::vector<std::size_t>& recv_offsets,
                            StreamHandle stream = nullptr) = 0;
  // recv [count] = sum over ranks of their send[rank() * count, (rank() + 1) * count). f32 (both
  // engines) or bf16 (nccl). The sum of one non-zero value and zeros is exact in any order.
  virtual void reduce_scatter_sum(const void* send, void* recv, std::size_t count, DType dtype,
                                  StreamHandle stream = nullptr) = 0;
  // In place: buf [count] = sum over ranks (f32; bf16 on nccl). The bus-bandwidth test.
  virtual void all_reduce_sum(void* buf, std::size_t count, DType dtype,
                              StreamHandle stream = nullptr) = 0;
  // Personalized exchange: send_bytes[d] bytes at send + send_offsets[d] go to rank d; from rank s
  // recv_bytes[s] bytes arrive at recv + recv_offsets[s]. Both sides must agree on the sizes
  // (exchange counts first). nccl: grouped ncclSend/ncclRecv.
  virtual void all_to_all_v(const void* send, const std::vector<std::size_t>& send_bytes,
                            const std::vector<std::size_t>& send_offsets, void* recv,
                            const std::vector<std::size_t>& recv_bytes,
                            const std::vector<std::size_t>& recv_offsets,
                            StreamHandle stream = nullptr) = 0;
  virtual void broadcast(void* buf, std::size_t bytes, int root, StreamHandle stream = nullptr) = 0;
  virtual void barrier(StreamHandle stream = nullptr) = 0;
  // Waits (bounded by the timeout) until the collectives issued on `stream` have completed. mpi
  // collectives complete before they return; nccl ones are asynchronous until this.
  virtual void synchronize(StreamHandle stream = nullptr) = 0;

  // Small HOST buffers on any engine (handshakes, token counts): blocking, with the timeout.
  // nccl stages them through device memory and synchronizes (not for graph capture).
  virtual void all_gather_host(const void* send, void* recv, std::size_t bytes) = 0;
  void all_to_all_host(const std::int64_t* send, std::int64_t* recv);  // one value per rank

 protected:
  double timeout_s_ = default_timeout();
  static double default_timeout();  // MOEKIT_COMM_TIMEOUT_S, else 300
};

// Whether this build has each engine.
bool mpi_available();
bool nccl_available();

// Whether this process was started by an MPI launcher (mpirun / srun environment variables).
bool launched_by_mpi();

// The MPI world (MPI_COMM_WORLD with MPI_ERRORS_RETURN), initialized on first use (MPI_Init_thread,
// FUNNELED) and finalized at exit (aborted instead when a collective failed, so that no rank
// hangs in MPI_Finalize). Throws when the build has no MPI.
std::shared_ptr<Communicator> mpi_world();

// How an NCCL communicator learns its rank, the world size and the unique id of rank 0.
//   kMpi:  from mpi_world() (mpirun).
//   kFile: from MOEKIT_RANK / MOEKIT_WORLD_SIZE and a file path (MOEKIT_NCCL_ID_FILE) that rank 0
//          writes the unique id to (atomically) and the others poll within the timeout: for
//          launchers without MPI (bench/run_device_ep.sh).
//   kAuto: kMpi when launched_by_mpi() and the build has MPI, else kFile.
enum class NcclBootstrap : std::uint8_t { kAuto, kMpi, kFile };

// An NCCL communicator over every rank of the world, on CUDA device `device` (cudaSetDevice),
// nonblocking-initialized with the timeout. Throws when the build has no NCCL, naming why.
// NCCL_NVLS_ENABLE is set to 0 unless already set (NVLink multicast stays off).
std::shared_ptr<Communicator> make_nccl_communicator(int device = 0,
                                                     NcclBootstrap bootstrap = NcclBootstrap::kAuto);

// The rank's position on its node under mpirun or the file launcher (OMPI_COMM_WORLD_LOCAL_RANK,
// MOEKIT_LOCAL_RANK, ...), or -1. GPU ranks pick their device with it.
int launcher_local_rank();

}  // namespace moekit
