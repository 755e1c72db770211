// Internal: the cuBLAS side of `moekit bench`: the ceilings (copy bandwidth, bf16 / fp8 matrix
// peak at 8192^3 on random data) and the baseline (cuBLAS bf16 GEMMs per expert over the same
// routed problem: for each expert with tokens, GEMM1, SiLU-and-mul, GEMM2).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "moekit/core/tensor.hpp"

namespace moekit::bench {

struct Ceilings {
  double copy_gbps = 0;           // device-to-device copy, bytes read + written per second / 1e9
  double bf16_tflops = 0;         // cublasGemmEx bf16 -> bf16, fp32 compute, 8192^3
  double fp8_tflops = 0;          // cublasLtMatmul e4m3 x e4m3 -> bf16, 8192^3 (best of the two
  double fp8_fast_accum_tflops = 0;  //   accumulate modes below)
  double fp8_exact_accum_tflops = 0;
};
// Times each with warm-up and the median of `reps` event-timed runs. Synchronizes.
Ceilings measure_ceilings(int reps, StreamHandle stream);

// cuBLAS per-expert loop on permuted rows (the baseline). Buffers are device pointers:
//   a [R, H] bf16 (rows grouped by expert, counts on the host), w13 [E, 2I, H], w2 [E, H, I],
//   h1 [R, 2I] bf16, act [R, I] bf16, out [R, H] bf16, device_offsets [E+1] i32.
class CublasBaseline {
 public:
  CublasBaseline();
  ~CublasBaseline();
  CublasBaseline(const CublasBaseline&) = delete;
  CublasBaseline& operator=(const CublasBaseline&) = delete;
  // Enqueues the whole loop on `stream` (capturable).
  void run(const std::vector<std::int32_t>& host_offsets, const std::int32_t* device_offsets,
           std::int64_t hidden, std::int64_t inter, const void* a, const void* w13, const void* w2,
           void* h1, void* act, void* out, StreamHandle stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moekit::bench
