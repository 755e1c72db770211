// Internal helpers of `moekit bench` (layer: bench.cpp, GEMM level: bench_gemm.cpp, ceilings:
// bench_cublas.cpp): the CUDA-graph timer with an L2 flush before every replay, the uniform top-k
// routing of the benchmark input, an owning device buffer, the JSON file writer.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_kernels.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"

namespace moekit::bench {

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { MOEKIT_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Writes `doc` to `path` (--json) and says so.
inline void write_json(const std::string& path, const nlohmann::json& doc) {
  std::ofstream f(path);
  MOEKIT_CHECK_ARG(f.good(), "--json", "a writable path", path);
  f << doc.dump(2) << "\n";
  std::printf("\nwrote %s\n", path.c_str());
}

struct Stats {
  double median_us = 0, p10_us = 0, p90_us = 0;
};

// Times graph replays, each after an L2 flush (not timed): weights come from HBM.
class GraphTimer {
 public:
  GraphTimer(cudaStream_t s, int reps) : s_(s), reps_(reps) {
    flush_bytes_ = 512ull << 20;  // > 8x the 60 MB L2
    MOEKIT_CUDA_CHECK(cudaMalloc(&flush_, flush_bytes_));
    MOEKIT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&sink_), sizeof(int)));
    fill_random_bf16(flush_, flush_bytes_ / 2, 99, 1.0f, s_);
    MOEKIT_CUDA_CHECK(cudaEventCreate(&a_));
    MOEKIT_CUDA_CHECK(cudaEventCreate(&b_));
  }
  ~GraphTimer() {
    cudaFree(flush_);
    cudaFree(sink_);
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  template <typename Enqueue>
  Stats time(Enqueue&& enqueue) {
    cudaGraphExec_t exec = capture(enqueue);
    std::vector<float> t;
    for (int i = 0; i < reps_ + 2; ++i) {
      const float us = replay_us(exec);
      if (i >= 2) t.push_back(us);  // two warm-up replays
    }
    cudaGraphExecDestroy(exec);
    return stats(t);
  }

  // Two workloads timed in alternating replays (A B, B A, A B, ...), so both see the same power
  // and thermal state of the GPU (a compute-bound layer's time moves with it by up to ~10%: the
  // one timed right after another heavy one runs at lower clocks). Returns {A, B}.
  template <typename EnqueueA, typename EnqueueB>
  std::pair<Stats, Stats> time_pair(EnqueueA&& a, EnqueueB&& b) {
    cudaGraphExec_t ea = capture(a), eb = capture(b);
    std::vector<float> ta, tb;
    for (int i = 0; i < reps_ + 2; ++i) {
      const bool a_first = i % 2 == 0;
      const float first = replay_us(a_first ? ea : eb), second = replay_us(a_first ? eb : ea);
      if (i < 2) continue;  // two warm-up rounds
      ta.push_back(a_first ? first : second);
      tb.push_back(a_first ? second : first);
    }
    cudaGraphExecDestroy(ea);
    cudaGraphExecDestroy(eb);
    return {stats(ta), stats(tb)};
  }

 private:
  // One eager run (one-time attribute setting and lazy loading stay out of the capture), then
  // the capture of a second one.
  template <typename Enqueue>
  cudaGraphExec_t capture(Enqueue&& enqueue) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    enqueue();
    MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s_));
    MOEKIT_CUDA_CHECK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
    enqueue();
    MOEKIT_CUDA_CHECK(cudaStreamEndCapture(s_, &graph));
    MOEKIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    return exec;
  }
  // One replay after an L2 flush (not timed), in microseconds.
  float replay_us(cudaGraphExec_t exec) {
    flush_l2(flush_, flush_bytes_, sink_, s_);
    MOEKIT_CUDA_CHECK(cudaEventRecord(a_, s_));
    MOEKIT_CUDA_CHECK(cudaGraphLaunch(exec, s_));
    MOEKIT_CUDA_CHECK(cudaEventRecord(b_, s_));
    MOEKIT_CUDA_CHECK(cudaEventSynchronize(b_));
    float ms = 0;
    MOEKIT_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
    return ms * 1000.0f;
  }
  static Stats stats(std::vector<float>& t) {
    std::sort(t.begin(), t.end());
    auto q = [&](double f) { return static_cast<double>(t[static_cast<std::size_t>(f * (t.size() - 1))]); };
    return {q(0.5), q(0.1), q(0.9)};
  }

  cudaStream_t s_;
  int reps_;
  void* flush_ = nullptr;
  int* sink_ = nullptr;
  std::size_t flush_bytes_ = 0;
  cudaEvent_t a_, b_;
};

// Uniform routing: k distinct experts per token, positive weights summing to 1 (the layer's
// routing method only changes which experts are hit; the floor uses the experts actually hit).
inline void make_routing(std::int64_t m, int e, int k, std::uint64_t seed, std::vector<std::int32_t>& ids,
                  std::vector<float>& weights) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.1f, 1.0f);
  ids.resize(static_cast<std::size_t>(m) * k);
  weights.resize(ids.size());
  std::vector<std::int32_t> pool(static_cast<std::size_t>(e));
  for (std::int64_t t = 0; t < m; ++t) {
    for (int x = 0; x < e; ++x) pool[static_cast<std::size_t>(x)] = x;
    float sum = 0;
    for (int j = 0; j < k; ++j) {  // partial Fisher-Yates
      std::uniform_int_distribution<int> pick(j, e - 1);
      std::swap(pool[static_cast<std::size_t>(j)], pool[static_cast<std::size_t>(pick(rng))]);
      ids[static_cast<std::size_t>(t * k + j)] = pool[static_cast<std::size_t>(j)];
      sum += weights[static_cast<std::size_t>(t * k + j)] = u(rng);
    }
    for (int j = 0; j < k; ++j) weights[static_cast<std::size_t>(t * k + j)] /= sum;
  }
}

// expert_offsets [E + 1] of routed ids (rows grouped by expert), and the experts hit.
inline std::vector<std::int32_t> expert_offsets_of(const std::vector<std::int32_t>& ids, int e,
                                                   int* distinct) {
  std::vector<std::int32_t> off(static_cast<std::size_t>(e) + 1, 0);
  for (auto x : ids) ++off[static_cast<std::size_t>(x) + 1];
  *distinct = 0;
  for (int x = 0; x < e; ++x) *distinct += off[static_cast<std::size_t>(x) + 1] > 0;
  for (int x = 0; x < e; ++x) off[static_cast<std::size_t>(x) + 1] += off[static_cast<std::size_t>(x)];
  return off;
}

// The routing of one row of `moekit bench` (the layer and --gemm share it, so their rows hit the
// same experts): m tokens' top-k ids and weights from the run seed, and the expert offsets of
// those ids with the number of distinct experts they touch.
struct BenchRouting {
  std::vector<std::int32_t> ids, offsets;
  std::vector<float> weights;
  int distinct = 0;
};
inline BenchRouting bench_routing(std::int64_t m, int e, int k, std::uint64_t run_seed) {
  BenchRouting r;
  make_routing(m, e, k, run_seed * 1000003 + static_cast<std::uint64_t>(m), r.ids, r.weights);
  r.offsets = expert_offsets_of(r.ids, e, &r.distinct);
  return r;
}

}  // namespace moekit::bench
