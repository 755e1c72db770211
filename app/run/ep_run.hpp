// `moekit run --ep N` under mpirun (or the file launcher of bench/run_device_ep.sh): the layer of
// run_job sharded over N ranks — rank r holds tokens [r*M/N, (r+1)*M/N) and the experts that
// ParallelConfig::expert_parallel gives it, dispatch per the oracle (select_dispatch, --dispatch
// override) — on the CPU (mpi) or one GPU per rank (nccl; CUDA_VISIBLE_DEVICES = the local rank
// unless set). Rank 0 gathers every rank's output and checks it against the single-process
// float64 reference (moe_reference_float64) with run_job's bound; on CPU ranks it also reports
// whether it is bitwise equal to the single-process CPU layer.
#pragma once

#include <string>

#include "run/run_job.hpp"

namespace moekit {

struct EpRunOptions {
  RunJobOptions job;             // preset, quant, tokens (total, all ranks), seed, mode, backend
  int ep = 1;                    // ranks (must equal the launcher's)
  std::string dispatch = "auto"; // auto | naive | a2a
  bool low_latency = false;      // the batched format (a2a)
};

struct EpRunReport {
  RunJobReport run;  // rank 0's check (layer_ms = the slowest rank)
  int ep = 1;
  std::string dispatch;      // DispatchSelection::str()
  std::string communicator;  // "mpi" / "nccl"
  double min_rank_ms = 0, max_rank_ms = 0;
  int bitwise_vs_single_process = -1;  // 1 / 0 on CPU ranks, -1 when not checked
  bool is_rank0 = true;
  std::string text() const;
  std::string json() const;
};

// Collective: every rank calls it. Throws moekit::Error (on every rank where it can) naming the
// problem; the check's verdict is in the report (run.pass).
EpRunReport run_ep_job(const EpRunOptions& options);

}  // namespace moekit
