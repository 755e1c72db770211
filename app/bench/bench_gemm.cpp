// `moekit bench --gemm`: the two bf16 grouped GEMMs of each preset's experts (GEMM1 [R, H] x
// [E, 2I, H], GEMM2 [R, I] x [E, H, I]) alone, per kernel, against the copy bandwidth
// (see bench.hpp; method: docs/performance.md).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/device_runtime.hpp"
#include "bench/bench.hpp"
#include "bench/bench_cublas.hpp"
#include "bench/bench_kernels.hpp"
#include "bench/bench_util.hpp"
#include "moekit/core/error.hpp"
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/moe/layer_config.hpp"

namespace moekit::bench {
namespace {

using json = nlohmann::json;

// The kernels timed at every point (the tuning rule's pick is one of them, labeled in the rows).
constexpr gemm::GemmKernel kKernels[] = {gemm::GemmKernel::kDecode, gemm::GemmKernel::kCutlassNarrow,
                                         gemm::GemmKernel::kCutlassWide, gemm::GemmKernel::kWgmma};

}  // namespace

void run_gemm_bench(const BenchOptions& o) {
  validate_bench_options(o);
  if (device_runtime::device_count() == 0)
    MOEKIT_FAIL("bench --gemm: no CUDA device found: it times GPU kernels and needs an SM90 GPU");
  const auto dev = device_runtime::device_info(0);
  cudaStream_t s;
  MOEKIT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::printf("moekit bench --gemm on %s (%d SMs): bf16 grouped GEMMs, L2-cold weights\n",
              dev.name.c_str(), dev.multiprocessors);
  const Ceilings c = measure_ceilings(std::max(o.reps / 2, 5), s);
  std::printf("ceilings: copy %.0f GB/s | bf16 %.0f TFLOP/s\n\n", c.copy_gbps, c.bf16_tflops);
  std::printf("%-16s %-5s %6s %6s %4s %-9s %10s %11s %8s %10s %6s %s\n", "preset", "gemm", "tokens",
              "rows", "D", "config", "time_us", "p10-p90", "GB/s", "floor_us", "fl/t", "auto");
  GraphTimer timer(s, o.reps);
  json rows = json::array();
  const auto scheme = gemm::GemmScheme::kBF16;
  for (const auto& preset_name : o.presets) {
    const MoeLayerConfig& cfg = layer_preset(preset_name);
    const int e = cfg.num_experts, k = cfg.top_k();
    const std::int64_t h = cfg.hidden_size, i = cfg.intermediate_size;
    const std::int64_t max_rows = *std::max_element(o.tokens.begin(), o.tokens.end()) * k;
    struct Gemm {
      const char* name;
      std::int64_t n, k;
    };
    const Gemm gemms[] = {{"gemm1", 2 * i, h}, {"gemm2", h, i}};
    for (const Gemm& g : gemms) {
      DeviceBuffer w(static_cast<std::size_t>(e) * g.n * g.k * 2);
      DeviceBuffer a(static_cast<std::size_t>(max_rows) * g.k * 2);
      DeviceBuffer d(static_cast<std::size_t>(max_rows) * g.n * 2);
      DeviceBuffer off(static_cast<std::size_t>(e + 1) * 4);
      const std::size_t ws_bytes = gemm::grouped_gemm_workspace_bytes(scheme, e);
      DeviceBuffer ws(std::max<std::size_t>(ws_bytes, 16));
      fill_random_bf16(w.p, static_cast<std::size_t>(e) * g.n * g.k, o.seed + 11, 0.05f, s);
      fill_random_bf16(a.p, static_cast<std::size_t>(max_rows) * g.k, o.seed + 12, 1.0f, s);
      for (const std::int64_t m : o.tokens) {
        const std::int64_t r = m * k;
        const BenchRouting routing = bench_routing(m, e, k, o.seed);
        const std::vector<std::int32_t>& offsets = routing.offsets;
        const int distinct = routing.distinct;
        MOEKIT_CUDA_CHECK(
            cudaMemcpy(off.p, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
        const double wbytes = static_cast<double>(distinct) * g.n * g.k * 2;
        const double floor_s = wbytes / (c.copy_gbps * 1e9);
        const gemm::GemmConfig picked =
            tuning::sm90::gemm_config(scheme, e, r, g.n, g.k, false, true);
        for (const gemm::GemmKernel kernel : kKernels) {
          gemm::GroupedGemmArgs args;
          args.scheme = scheme;
          args.num_experts = e;
          args.n = g.n;
          args.k = g.k;
          args.rows = r;
          args.expert_offsets = static_cast<const std::int32_t*>(off.p);
          args.a = a.p;
          args.w = w.p;
          args.out = d.p;
          args.workspace = ws.p;
          args.workspace_bytes = ws_bytes;
          args.stream = s;
          // This kernel with the rules' choice of its tile / variant.
          const gemm::GemmConfig config =
              tuning::sm90::gemm_config_for(scheme, kernel, e, r, g.n, g.k, false, true);
          const Stats st = timer.time([&] { gemm::grouped_gemm(args, config); });
          const double t = st.median_us * 1e-6;
          const std::string name = config.str();
          std::printf("%-16s %-5s %6lld %6lld %4d %-9s %10.1f %5.0f-%-5.0f %8.0f %10.1f %6.2f %s\n",
                      preset_name.c_str(), g.name, static_cast<long long>(m),
                      static_cast<long long>(r), distinct, name.c_str(), st.median_us, st.p10_us,
                      st.p90_us, wbytes / t / 1e9, floor_s * 1e6, floor_s / t,
                      kernel == picked.kernel ? "<- rule" : "");
          std::fflush(stdout);
          rows.push_back({{"preset", preset_name},
                          {"gemm", g.name},
                          {"n", g.n},
                          {"k", g.k},
                          {"tokens", m},
                          {"rows", r},
                          {"distinct_experts", distinct},
                          {"config", name},
                          {"rule_config", kernel == picked.kernel},
                          {"time_us", st.median_us},
                          {"p10_us", st.p10_us},
                          {"p90_us", st.p90_us},
                          {"weight_bytes", wbytes},
                          {"gbps", wbytes / t / 1e9},
                          {"floor_us", floor_s * 1e6},
                          {"floor_over_time", floor_s / t}});
        }
      }
    }
  }
  if (!o.json_path.empty()) {
    const char* commit = std::getenv("MOEKIT_COMMIT");
    json doc = {{"tool", "moekit bench --gemm"},
                {"commit", commit ? commit : "unknown"},
                {"gpu",
                 {{"name", dev.name},
                  {"sm", dev.sm_major * 10 + dev.sm_minor},
                  {"multiprocessors", dev.multiprocessors}}},
                {"method",
                 "each bf16 grouped GEMM alone in a CUDA graph, L2 flushed (512 MiB "
                 "read) before each replay, median of reps; uniform random top-k "
                 "routing; floor = weight bytes of the touched experts / in-run copy "
                 "bandwidth"},
                {"reps", o.reps},
                {"ceilings", {{"copy_gbps", c.copy_gbps}, {"bf16_tflops", c.bf16_tflops}}},
                {"rows", rows}};
    write_json(o.json_path, doc);
  }
  cudaStreamDestroy(s);
}

}  // namespace moekit::bench
