// `moekit bench`: ceilings, cuBLAS baseline and moekit experts per preset x scheme x tokens
// (see bench.hpp; method: docs/performance.md).
#include "cuda/bench/bench.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/device_runtime.hpp"
#include "cuda/bench/bench_cublas.hpp"
#include "cuda/bench/bench_kernels.hpp"
#include "cuda/experts/bf16_experts.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "moekit/gemm/grouped_gemm.hpp"
#include "moekit/moe/layer_config.hpp"

namespace moekit::bench {
namespace {

using json = nlohmann::json;

struct Scheme {
  const char* name;
  QuantScheme weights, activations;
  const char* default_backend;
  double weight_bytes;  // per weight element, scales included
  bool fp8_peak;        // tensor peak: fp8 (else bf16)
};
const Scheme kSchemes[] = {
    {"bf16", QuantScheme::kBF16, QuantScheme::kBF16, "cuda_bf16_grouped", 2.0, false},
    {"fp8_block", QuantScheme::kFP8Block128x128, QuantScheme::kFP8Block1x128,
     "cuda_fp8_block_grouped", 1.0 + 4.0 / (128 * 128), true},
};

const Scheme& find_scheme(const std::string& name) {
  std::string valid;
  for (const auto& s : kSchemes) {
    if (name == s.name) return s;
    valid += std::string(valid.empty() ? "" : ", ") + s.name;
  }
  throw_arg_error("bench", "--quant", "one of " + valid, name);
}

std::map<std::string, ExpertsFactory>& registry() {
  static std::map<std::string, ExpertsFactory> r = {
      {"cuda_bf16_grouped", [](const MoeProblem& p) { return cuda::make_bf16_grouped_experts(p); }},
      {"cuda_fp8_block_grouped",
       [](const MoeProblem& p) { return cuda::make_fp8_block_grouped_experts(p); }},
  };
  return r;
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
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    enqueue();  // eager warm-up: one-time attribute setting and lazy loading stay out of capture
    MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s_));
    MOEKIT_CUDA_CHECK(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
    enqueue();
    MOEKIT_CUDA_CHECK(cudaStreamEndCapture(s_, &graph));
    MOEKIT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    std::vector<float> t;
    for (int i = 0; i < reps_ + 2; ++i) {
      flush_l2(flush_, flush_bytes_, sink_, s_);
      MOEKIT_CUDA_CHECK(cudaEventRecord(a_, s_));
      MOEKIT_CUDA_CHECK(cudaGraphLaunch(exec, s_));
      MOEKIT_CUDA_CHECK(cudaEventRecord(b_, s_));
      MOEKIT_CUDA_CHECK(cudaEventSynchronize(b_));
      float ms = 0;
      MOEKIT_CUDA_CHECK(cudaEventElapsedTime(&ms, a_, b_));
      if (i >= 2) t.push_back(ms * 1000.0f);  // two warm-up replays
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    std::sort(t.begin(), t.end());
    auto q = [&](double f) { return static_cast<double>(t[static_cast<std::size_t>(f * (t.size() - 1))]); };
    return {q(0.5), q(0.1), q(0.9)};
  }

 private:
  cudaStream_t s_;
  int reps_;
  void* flush_ = nullptr;
  int* sink_ = nullptr;
  std::size_t flush_bytes_ = 0;
  cudaEvent_t a_, b_;
};

// Uniform routing: k distinct experts per token, positive weights summing to 1 (the layer's
// routing method only changes which experts are hit; the floor uses the experts actually hit).
void make_routing(std::int64_t m, int e, int k, std::uint64_t seed, std::vector<std::int32_t>& ids,
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

Tensor device_tensor(DType t, Shape s) { return Tensor(t, s, Device::cuda(0)); }

template <typename T>
Tensor upload(const std::vector<T>& h, DType t, Shape s) {
  Tensor d = device_tensor(t, s);
  MOEKIT_CUDA_CHECK(cudaMemcpy(d.data(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

}  // namespace

bool register_experts(const std::string& name, ExpertsFactory factory) {
  registry()[name] = std::move(factory);
  return true;
}

std::vector<std::string> experts_names() {
  std::vector<std::string> v;
  for (const auto& [name, f] : registry()) v.push_back(name);
  return v;
}

void run_bench(const BenchOptions& o) {
  if (device_runtime::device_count() == 0)
    MOEKIT_FAIL("bench: no CUDA device found: moekit bench times GPU kernels and needs an SM90 GPU "
                "(H100/H200) with a working driver");
  for (const auto& q : o.quants) (void)find_scheme(q);
  for (const auto& p : o.presets) (void)layer_preset(p);
  for (auto m : o.tokens) MOEKIT_CHECK_ARG(m >= 1, "--tokens", ">= 1", m);
  MOEKIT_CHECK_ARG(o.reps >= 1, "--reps", ">= 1", o.reps);
  if (!o.backend.empty())
    MOEKIT_CHECK_ARG(registry().count(o.backend) == 1, "--backend",
                     "one of the registered experts backends", o.backend);
  const auto dev = device_runtime::device_info(0);
  cudaStream_t s;
  MOEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("moekit bench on %s (sm_%d%d, %d SMs, L2 %.0f MiB)\n", dev.name.c_str(), dev.sm_major,
              dev.sm_minor, dev.multiprocessors, dev.l2_bytes / 1048576.0);
  const Ceilings c = measure_ceilings(std::max(o.reps / 2, 5), s);
  std::printf("ceilings: copy %.0f GB/s | bf16 %.0f TFLOP/s | fp8 %.0f TFLOP/s (fast accum %.0f, "
              "exact accum %.0f)\n\n",
              c.copy_gbps, c.bf16_tflops, c.fp8_tflops, c.fp8_fast_accum_tflops,
              c.fp8_exact_accum_tflops);
  json rows = json::array();
  GraphTimer timer(s, o.reps);
  CublasBaseline baseline;
  std::printf("%-16s %-9s %6s %4s %10s %10s %8s %8s %10s %6s %10s %7s %8s %s\n", "preset",
              "quant", "tokens", "D", "time_us", "p10-p90", "TFLOP/s", "GB/s", "floor_us", "fl/t",
              "cublas_us", "speedup", "rel_diff", "cfg");
  for (const auto& preset_name : o.presets) {
    const MoeLayerConfig& cfg = layer_preset(preset_name);
    const int e = cfg.num_experts, k = cfg.top_k();
    const std::int64_t h = cfg.hidden_size, i = cfg.intermediate_size;
    // Weights: bf16 random (uniform, variance 1/K so activations stay O(1)); fp8 = their block
    // quantization, so baseline and moekit compute nearly the same function.
    MoeWeights wb;
    wb.num_experts = e, wb.hidden_size = h, wb.intermediate_size = i;
    wb.w13.values = device_tensor(DType::kBF16, Shape{e, 2 * i, h});
    wb.w2.values = device_tensor(DType::kBF16, Shape{e, h, i});
    fill_random_bf16(wb.w13.values.data(), static_cast<std::size_t>(wb.w13.values.numel()), o.seed + 1,
                     std::sqrt(3.0f / static_cast<float>(h)), s);
    fill_random_bf16(wb.w2.values.data(), static_cast<std::size_t>(wb.w2.values.numel()), o.seed + 2,
                     std::sqrt(3.0f / static_cast<float>(i)), s);
    MoeWeights wq;
    const bool want_fp8 = std::find(o.quants.begin(), o.quants.end(), "fp8_block") != o.quants.end();
    if (want_fp8 && h % 128 == 0 && i % 128 == 0) {
      wq.num_experts = e, wq.hidden_size = h, wq.intermediate_size = i;
      wq.quant.scheme = QuantScheme::kFP8Block128x128;
      wq.w13.values = device_tensor(DType::kE4M3, Shape{e, 2 * i, h});
      wq.w2.values = device_tensor(DType::kE4M3, Shape{e, h, i});
      wq.w13.scales = device_tensor(DType::kF32, Shape{e, (2 * i + 127) / 128, h / 128});
      wq.w2.scales = device_tensor(DType::kF32, Shape{e, (h + 127) / 128, i / 128});
      quantize_weight_fp8_block(wb.w13.values.data(), e, 2 * i, h, wq.w13.values.data(),
                                wq.w13.scales.ptr<float>(), s);
      quantize_weight_fp8_block(wb.w2.values.data(), e, h, i, wq.w2.values.data(),
                                wq.w2.scales.ptr<float>(), s);
    }
    MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));

    for (const std::int64_t m : o.tokens) {
      const std::int64_t r = m * k;
      std::vector<std::int32_t> ids;
      std::vector<float> tw;
      make_routing(m, e, k, o.seed * 1000003 + static_cast<std::uint64_t>(m), ids, tw);
      std::vector<std::int32_t> off(static_cast<std::size_t>(e) + 1, 0);
      for (auto x : ids) ++off[static_cast<std::size_t>(x) + 1];
      int distinct = 0;
      for (int x = 0; x < e; ++x) distinct += off[static_cast<std::size_t>(x) + 1] > 0;
      for (int x = 0; x < e; ++x) off[static_cast<std::size_t>(x) + 1] += off[static_cast<std::size_t>(x)];
      Tensor d_ids = upload(ids, DType::kI32, Shape{m, k});
      Tensor d_w = upload(tw, DType::kF32, Shape{m, k});
      Tensor x = device_tensor(DType::kBF16, Shape{m, h});
      fill_random_bf16(x.data(), static_cast<std::size_t>(m * h), o.seed + 3 + static_cast<std::uint64_t>(m), 1.0f, s);
      const double flops = 2.0 * static_cast<double>(r) * 3.0 * static_cast<double>(h) * static_cast<double>(i);

      // Baseline: cuBLAS per expert over the permuted rows (the permutation itself is not timed).
      Stats base{};
      Tensor base_out = device_tensor(DType::kBF16, Shape{m, h});
      if (o.baseline) {
        Tensor d_off = device_tensor(DType::kI32, Shape{e + 1});
        Tensor sorted = device_tensor(DType::kI32, Shape{r}), prow = device_tensor(DType::kI32, Shape{r});
        Tensor a = device_tensor(DType::kBF16, Shape{r, h}), h1 = device_tensor(DType::kBF16, Shape{r, 2 * i});
        Tensor act = device_tensor(DType::kBF16, Shape{r, i}), out = device_tensor(DType::kBF16, Shape{r, h});
        cuda::detail::permute_by_expert(d_ids.ptr<std::int32_t>(), r, e, d_off.ptr<std::int32_t>(),
                                        sorted.ptr<std::int32_t>(), prow.ptr<std::int32_t>(), s);
        cuda::detail::gather_rows(x.data(), h * 2, sorted.ptr<std::int32_t>(), k, r,
                                  d_off.ptr<std::int32_t>() + e, a.data(), s);
        base = timer.time([&] {
          baseline.run(off, d_off.ptr<std::int32_t>(), h, i, a.data(), wb.w13.values.data(),
                       wb.w2.values.data(), h1.data(), act.data(), out.data(), s);
        });
        cuda::detail::weighted_reduce_bf16(out.data(), prow.ptr<std::int32_t>(), d_w.ptr<float>(), m, k,
                                           h, base_out.data(), s);
        MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));
      }

      for (const auto& qname : o.quants) {
        const Scheme& sch = find_scheme(qname);
        const std::string backend = o.backend.empty() ? sch.default_backend : o.backend;
        std::string cmd = o.command_prefix + " --preset " + preset_name + " --quant " + qname +
                          " --tokens " + std::to_string(m);
        if (!o.backend.empty()) cmd += " --backend " + o.backend;
        const char* cfg_env = std::getenv("MOEKIT_GROUPED_GEMM_CONFIG");
        const auto gemm_cfg = cfg_env && std::string(cfg_env) == "wide" ? gemm::GroupedGemmConfig::kWide
                              : cfg_env && std::string(cfg_env) == "narrow"
                                  ? gemm::GroupedGemmConfig::kNarrow
                                  : gemm::resolve_grouped_gemm_config(
                                        sch.fp8_peak ? gemm::GroupedGemmType::kFP8Block128
                                                     : gemm::GroupedGemmType::kBF16,
                                        gemm::GroupedGemmConfig::kAuto, e, r);
        if (cfg_env && *cfg_env) cmd = "MOEKIT_GROUPED_GEMM_CONFIG=" + std::string(cfg_env) + " " + cmd;
        json row = {{"preset", preset_name}, {"quant", qname}, {"backend", backend},
                    {"tokens", m}, {"distinct_experts", distinct}, {"command", cmd},
                    {"gemm_config", gemm::grouped_gemm_config_name(gemm_cfg)}};
        MoeProblem p;
        p.num_tokens = m;
        p.layer = cfg;
        p.weight_quant.scheme = sch.weights;
        p.activation_quant.scheme = sch.activations;
        p.activation_dtype = DType::kBF16;
        auto experts = registry().at(backend)(p);
        const Support sup = experts->supports(p);
        if (!sup.ok) {
          std::printf("%-16s %-9s %6lld  unsupported: %s\n", preset_name.c_str(), qname.c_str(),
                      static_cast<long long>(m), sup.reason.c_str());
          row["unsupported"] = sup.reason;
          rows.push_back(row);
          continue;
        }
        const bool fp8 = sch.weights == QuantScheme::kFP8Block128x128;
        experts->prepare_weights(p, fp8 ? wq : wb, s);
        const auto ws = experts->workspace_shapes(p);
        Tensor ws13 = device_tensor(ws.workspace13.dtype, ws.workspace13.shape);
        Tensor ws2 = device_tensor(ws.workspace2.dtype, ws.workspace2.shape);
        Tensor out = device_tensor(ws.output.dtype, ws.output.shape);
        Tensor xq, xs;
        DispatchedActivations in;
        in.num_tokens = m;
        in.topk_ids = d_ids.view();
        in.topk_weights = d_w.view();
        in.a1q.config.scheme = sch.activations;
        if (fp8) {  // the NoEP prepare of this scheme: 1x128 quantization, timed with the layer
          xq = device_tensor(DType::kE4M3, Shape{m, h});
          xs = device_tensor(DType::kF32, Shape{m, h / 128});
          in.a1q.values = xq.view();
          in.a1q.scales = xs.view();
        } else {
          in.a1q.values = x.view();
        }
        const Stats st = timer.time([&] {
          if (fp8) quantize_rows_fp8_1x128(x.data(), m, h, xq.data(), xs.ptr<float>(), s);
          experts->apply(in, out.view(), ws13.view(), ws2.view(), s);
        });
        const double t = st.median_us * 1e-6;
        const double wbytes = static_cast<double>(distinct) * 3.0 * h * i * sch.weight_bytes;
        const double peak = sch.fp8_peak ? c.fp8_tflops : c.bf16_tflops;
        const double floor_s = std::max(wbytes / (c.copy_gbps * 1e9), flops / (peak * 1e12));
        const double rel = o.baseline ? rel_l2_bf16(out.data(), base_out.data(),
                                                    static_cast<std::size_t>(m * h), s)
                                      : NAN;
        row.update({{"time_us", st.median_us}, {"p10_us", st.p10_us}, {"p90_us", st.p90_us},
                    {"tflops", flops / t / 1e12}, {"gbps", wbytes / t / 1e9},
                    {"fraction_of_peak", flops / t / 1e12 / peak}, {"floor_us", floor_s * 1e6},
                    {"floor_over_time", floor_s / t}, {"weight_bytes", wbytes}, {"flops", flops},
                    {"rel_diff_vs_cublas_bf16", rel}});
        if (o.baseline)
          row.update({{"cublas_us", base.median_us}, {"cublas_p10_us", base.p10_us},
                      {"cublas_p90_us", base.p90_us}, {"speedup", base.median_us / st.median_us}});
        std::printf("%-16s %-9s %6lld %4d %10.1f %4.0f-%-5.0f %8.1f %8.0f %10.1f %6.2f %10.1f %7.2f %8.1e %s\n",
                    preset_name.c_str(), qname.c_str(), static_cast<long long>(m), distinct,
                    st.median_us, st.p10_us, st.p90_us, flops / t / 1e12, wbytes / t / 1e9,
                    floor_s * 1e6, floor_s / t, base.median_us,
                    o.baseline ? base.median_us / st.median_us : NAN, rel,
                    gemm::grouped_gemm_config_name(gemm_cfg).c_str());
        std::printf("    %s\n", cmd.c_str());
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
  }
  if (!o.json_path.empty()) {
    json doc = {{"tool", "moekit bench"},
                {"commit", env_or("MOEKIT_COMMIT", "unknown")},
                {"date", now_utc()},
                {"gpu", {{"name", dev.name}, {"sm", dev.sm_major * 10 + dev.sm_minor},
                         {"multiprocessors", dev.multiprocessors}, {"l2_bytes", dev.l2_bytes}}},
                {"clocks", env_or("MOEKIT_BENCH_CLOCKS", "not recorded")},
                {"method", "CUDA graph replays, L2 flushed (512 MiB read) before each, median of "
                           "reps; uniform random top-k routing; cuBLAS bf16 per-expert baseline "
                           "over pre-permuted rows; moekit time includes permute, gather, "
                           "(fp8: 1x128 activation quantize,) GEMM1, activation, GEMM2, weighted "
                           "reduce"},
                {"reps", o.reps},
                {"ceilings", {{"copy_gbps", c.copy_gbps}, {"bf16_tflops", c.bf16_tflops},
                              {"fp8_tflops", c.fp8_tflops},
                              {"fp8_fast_accum_tflops", c.fp8_fast_accum_tflops},
                              {"fp8_exact_accum_tflops", c.fp8_exact_accum_tflops}}},
                {"rows", rows}};
    std::ofstream f(o.json_path);
    MOEKIT_CHECK_ARG(f.good(), "--json", "a writable path", o.json_path);
    f << doc.dump(2) << "\n";
    std::printf("\nwrote %s\n", o.json_path.c_str());
  }
  cudaStreamDestroy(s);
}

}  // namespace moekit::bench
