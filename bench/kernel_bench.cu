// moekit_kernel_bench: throughput / latency of the CUDA foundation kernels (quantize, fused
// activation + quantize, routing, permutation, gather, unpermute-reduce), each as a fraction of the
// device-to-device copy bandwidth measured in the same run, or as graph-replay latency.
//
//   moekit_kernel_bench [--out results.json] [--quick]
//
// Method (docs/performance.md): random data (never zeros); every measured op is captured in a CUDA
// graph; input buffers rotate over > 256 MB so that large sizes come from HBM, not the 60 MB L2;
// warm-up, then the median over many timed replays (CUDA events). Bytes counted = input read once
// + every output written once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "cuda/quant/quantize_cuda.hpp"
#include "moekit/activation/activation_cuda.hpp"
#include "moekit/permute/permute_cuda.hpp"
#include "moekit/quant/quantize.hpp"
#include "moekit/routing/route_cuda.hpp"

namespace {

#define BENCH_CHECK(expr)                                                                   \
  do {                                                                                      \
    cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s failed: %s at %s:%d\n", #expr, cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                               \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

using moekit::Device;
using moekit::DType;
using moekit::Shape;
using moekit::Tensor;
using moekit::TensorView;

// Uniform random bf16 / f32 from a counter hash (reproducible, never all zeros).
__global__ void fill_kernel(void* p, std::size_t n, std::uint64_t seed, bool bf16, float scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = (static_cast<float>(z >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
    if (bf16) {
      std::uint32_t b = __float_as_uint(u);
      static_cast<std::uint16_t*>(p)[i] = static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    } else {
      static_cast<float*>(p)[i] = u;
    }
  }
}

void fill(const TensorView& t, std::uint64_t seed, float scale = 4.0f) {
  fill_kernel<<<1024, 256>>>(t.data, static_cast<std::size_t>(t.numel()), seed,
                             t.dtype == DType::kBF16, scale);
  BENCH_CHECK(cudaGetLastError());
}

// The copy ceiling: a 16-byte-vector grid-stride copy kernel (what a memory-bound kernel can reach;
// cudaMemcpyAsync device-to-device measured only ~2.7 TB/s in a graph on an H200).
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
};

// Captures `body(i)` for i in [0, per_graph) into one graph; replays it `reps` times, timing each
// replay with events; per-op time = replay time / per_graph.
Timing time_graph(const std::function<void(int, cudaStream_t)>& body, int per_graph, int reps,
                  cudaStream_t s) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) body(i, s);
  BENCH_CHECK(cudaStreamEndCapture(s, &g));
  BENCH_CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int w = 0; w < 3; ++w) BENCH_CHECK(cudaGraphLaunch(exec, s));
  BENCH_CHECK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    BENCH_CHECK(cudaEventRecord(a, s));
    BENCH_CHECK(cudaGraphLaunch(exec, s));
    BENCH_CHECK(cudaEventRecord(b, s));
    BENCH_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(1000.0 * ms / per_graph);
  }
  std::sort(t.begin(), t.end());
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  BENCH_CHECK(cudaGraphExecDestroy(exec));
  BENCH_CHECK(cudaGraphDestroy(g));
  return {t[t.size() / 2], t.front(), t.back()};
}

std::string json_rows;
void add_row(const std::string& row) {
  if (!json_rows.empty()) json_rows += ",\n";
  json_rows += "    " + row;
}

double copy_bandwidth(cudaStream_t s) {
  const std::size_t bytes = std::size_t{1} << 30;  // 1 GiB each way
  void *src, *dst;
  BENCH_CHECK(cudaMalloc(&src, bytes));
  BENCH_CHECK(cudaMalloc(&dst, bytes));
  BENCH_CHECK(cudaMemset(src, 1, bytes));
  const Timing t = time_graph(
      [&](int, cudaStream_t st) {
        copy_kernel<<<132 * 16, 256, 0, st>>>(static_cast<const uint4*>(src), static_cast<uint4*>(dst),
                                              bytes / 16);
      },
      1, 20, s);
  BENCH_CHECK(cudaFree(src));
  BENCH_CHECK(cudaFree(dst));
  const double gbs = 2.0 * bytes / (t.median_us * 1e-6) / 1e9;
  std::printf("copy bandwidth (16-byte copy kernel, read+write): %.0f GB/s (median %.1f us for 2 x 1 GiB)\n", gbs,
              t.median_us);
  add_row("{\"bench\": \"copy\", \"bytes\": " + std::to_string(2 * bytes) +
          ", \"median_us\": " + std::to_string(t.median_us) + ", \"gb_per_s\": " + std::to_string(gbs) + "}");
  return gbs;
}

// Quantize (and fused SiLU-and-mul + quantize) throughput over M x 7168 bf16 inputs.
// filter: run only the ops whose name contains it ("" = all); only_m > 0: only that M.
void bench_quantize(double copy_gbs, bool quick, const std::string& filter, std::int64_t only_m,
                    cudaStream_t s) {
  using moekit::QuantConfig;
  using moekit::QuantScheme;
  using moekit::ScaleLayout;
  const std::int64_t k = 7168;
  std::vector<std::int64_t> ms = quick ? std::vector<std::int64_t>{1, 4096}
                                       : std::vector<std::int64_t>{1, 16, 128, 264, 528, 1024, 2048, 3072, 4096, 4682, 8192, 16384};
  if (only_m > 0) ms = {only_m};
  struct Op {
    const char* name;
    QuantConfig config;
    bool static_scale;
  };
  const std::vector<Op> ops = {
      {"nvfp4_static_swz128x4", {QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4}, true},
      {"nvfp4_amax_swz128x4", {QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4}, false},
      {"nvfp4_token_linear", {QuantScheme::kNVFP4PerToken, ScaleLayout::kLinear}, false},
      {"mxfp4_swz128x4", {QuantScheme::kMXFP4, ScaleLayout::kSwizzled128x4}, false},
      {"mxfp8_linear", {QuantScheme::kMXFP8, ScaleLayout::kLinear}, false},
      {"fp8_1x128", {QuantScheme::kFP8Block1x128}, false},
      {"fp8_tensor_static", {QuantScheme::kFP8PerTensor}, true},
      {"fp8_token", {QuantScheme::kFP8PerToken}, false},
  };
  std::printf("\n%-24s %8s %10s %10s %8s\n", "quantize (bf16 in)", "M", "us", "GB/s", "of copy");
  for (const std::int64_t m : ms) {
    const std::int64_t in_bytes = m * k * 2;
    const int sets = static_cast<int>(std::clamp<std::int64_t>((256ll << 20) / std::max<std::int64_t>(in_bytes, 1), 1, 16));
    std::vector<Tensor> xs;
    for (int i = 0; i < sets; ++i) {
      xs.emplace_back(DType::kBF16, Shape{m, k}, Device::cuda());
      fill(xs.back(), 1234 + i);
    }
    for (const Op& op : ops) {
      if (std::string(op.name).find(filter) == std::string::npos) continue;
      const moekit::QuantShapes sh = moekit::infer_quant_shapes(Shape{m, k}, op.config);
      std::vector<Tensor> vals, scales, gss;
      std::vector<moekit::QuantizedView> outs;
      for (int i = 0; i < sets; ++i) {
        vals.emplace_back(sh.value_dtype, sh.values, Device::cuda());
        scales.emplace_back(sh.scale_dtype, sh.scales.rank() ? sh.scales : Shape{1}, Device::cuda());
        gss.emplace_back(DType::kF32, sh.has_global_scale ? sh.global_scale : Shape{1}, Device::cuda());
      }
      for (int i = 0; i < sets; ++i) {
        moekit::QuantizedView v;
        v.values = vals[i];
        v.scales = scales[i];
        if (sh.has_global_scale) v.global_scale = gss[i];
        v.config = op.config;
        outs.push_back(v);
      }
      Tensor st(DType::kF32, Shape{1}, Device::cuda());
      const float sv = op.config.scheme == QuantScheme::kNVFP4 ? 600.0f : 0.01f;
      BENCH_CHECK(cudaMemcpy(st.data(), &sv, 4, cudaMemcpyHostToDevice));
      const std::int64_t out_bytes = static_cast<std::int64_t>(vals[0].nbytes()) +
                                     (sh.scales.rank() ? static_cast<std::int64_t>(scales[0].nbytes()) : 0) +
                                     (sh.has_global_scale ? static_cast<std::int64_t>(gss[0].nbytes()) : 0);
      // 20 calls per graph at every size (the graph launch is not the op's cost); call i reads
      // input set i % sets (the sets above: one input of >= 128 MB, else up to 16 over ~256 MB).
      const int per_graph = 20;
      const Timing t = time_graph(
          [&](int i, cudaStream_t st_) {
            moekit::cuda::quantize(xs[i % sets], op.config, outs[i % sets],
                                   op.static_scale ? st.view() : TensorView{}, st_);
          },
          per_graph, quick ? 10 : 30, s);
      const double gbs = (in_bytes + out_bytes) / (t.median_us * 1e-6) / 1e9;
      // A computed per-tensor scale needs the whole input's amax before the first code: the input
      // is read twice (the second read from HBM once it exceeds L2), so that op's traffic floor
      // counts two reads.
      const bool two_pass = !op.static_scale && (op.config.scheme == QuantScheme::kNVFP4 ||
                                                 op.config.scheme == QuantScheme::kFP8PerTensor);
      const double traffic_gbs = (in_bytes * (two_pass ? 2 : 1) + out_bytes) / (t.median_us * 1e-6) / 1e9;
      std::printf("%-24s %8lld %10.2f %10.0f %7.1f%%%s\n", op.name, static_cast<long long>(m),
                  t.median_us, gbs, 100.0 * gbs / copy_gbs,
                  two_pass ? (" (two-pass traffic: " + std::to_string(static_cast<int>(100.0 * traffic_gbs / copy_gbs)) + "%)").c_str() : "");
      add_row(std::string("{\"bench\": \"quantize\", \"op\": \"") + op.name + "\", \"m\": " +
              std::to_string(m) + ", \"k\": " + std::to_string(k) + ", \"bytes\": " +
              std::to_string(in_bytes + out_bytes) + ", \"median_us\": " + std::to_string(t.median_us) +
              ", \"min_us\": " + std::to_string(t.min_us) + ", \"max_us\": " + std::to_string(t.max_us) +
              ", \"gb_per_s\": " + std::to_string(gbs) + ", \"fraction_of_copy\": " +
              std::to_string(gbs / copy_gbs) + ", \"two_pass\": " + (two_pass ? "true" : "false") +
              ", \"traffic_fraction_of_copy\": " + std::to_string(traffic_gbs / copy_gbs) + "}");
    }
    // Fused SiLU-and-mul + NVFP4 / FP8 1x128: [M, 2I] bf16 -> [M, I] quantized, I = 2048.
    const std::int64_t inter = 2048;
    Tensor h(DType::kBF16, Shape{m, 2 * inter}, Device::cuda());
    fill(h, 99);
    for (const Op& op : {Op{"silu+nvfp4_static", {QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4}, true},
                         Op{"silu+fp8_1x128", {QuantScheme::kFP8Block1x128}, false}}) {
      if (std::string(op.name).find(filter) == std::string::npos) continue;
      const moekit::QuantShapes sh = moekit::infer_quant_shapes(Shape{m, inter}, op.config);
      Tensor v(sh.value_dtype, sh.values, Device::cuda()), sc(sh.scale_dtype, sh.scales, Device::cuda());
      Tensor gs(DType::kF32, Shape{1}, Device::cuda());
      const float gs_value = 600.0f;
      BENCH_CHECK(cudaMemcpy(gs.data(), &gs_value, 4, cudaMemcpyHostToDevice));
      moekit::QuantizedView out;
      out.values = v;
      out.scales = sc;
      if (sh.has_global_scale) out.global_scale = gs;
      out.config = op.config;
      Tensor st(DType::kF32, Shape{1}, Device::cuda());
      BENCH_CHECK(cudaMemcpy(st.data(), &gs_value, 4, cudaMemcpyHostToDevice));
      const Timing t = time_graph(
          [&](int, cudaStream_t st_) {
            moekit::activation_quantize_cuda(h, moekit::ActivationConfig{}, op.config, out,
                                             op.static_scale ? st.view() : TensorView{}, st_);
          },
          5, quick ? 10 : 30, s);
      const std::int64_t bytes = static_cast<std::int64_t>(h.nbytes() + v.nbytes() + sc.nbytes());
      const double gbs = bytes / (t.median_us * 1e-6) / 1e9;
      std::printf("%-24s %8lld %10.2f %10.0f %7.1f%%\n", op.name, static_cast<long long>(m),
                  t.median_us, gbs, 100.0 * gbs / copy_gbs);
      add_row(std::string("{\"bench\": \"activation_quantize\", \"op\": \"") + op.name +
              "\", \"m\": " + std::to_string(m) + ", \"i\": " + std::to_string(inter) +
              ", \"bytes\": " + std::to_string(bytes) + ", \"median_us\": " +
              std::to_string(t.median_us) + ", \"gb_per_s\": " + std::to_string(gbs) +
              ", \"fraction_of_copy\": " + std::to_string(gbs / copy_gbs) + "}");
    }
  }
}

// Routing + permutation latency in a CUDA graph (one route + one permutation per replay), and the
// decode-path gather / unpermute-reduce at H = 7168 for reference.
void bench_routing(bool quick, cudaStream_t s) {
  struct Preset {
    const char* name;
    int e, k;
    moekit::RoutingConfig cfg;
  };
  auto make = [](moekit::RoutingMethod m, int k, int groups, int keep, float scale) {
    moekit::RoutingConfig c;
    c.method = m;
    c.top_k = k;
    c.num_expert_groups = groups;
    c.topk_group = keep;
    c.routed_scaling_factor = scale;
    return c;
  };
  const std::vector<Preset> presets = {
      {"deepseek-v3", 256, 8, make(moekit::RoutingMethod::kDeepSeekV3, 8, 8, 4, 2.5f)},
      {"qwen3-30b-a3b", 128, 8, make(moekit::RoutingMethod::kRenormalizeNaive, 8, 1, 1, 1.0f)},
      {"gpt-oss-120b", 128, 4, make(moekit::RoutingMethod::kRenormalize, 4, 1, 1, 1.0f)},
  };
  const std::vector<std::int64_t> ms = quick ? std::vector<std::int64_t>{1, 64}
                                             : std::vector<std::int64_t>{1, 8, 64, 512, 4096};
  std::printf("\n%-16s %6s %10s %10s %14s %14s %10s %10s\n", "routing preset", "M", "route us",
              "permute us", "route+perm us", "in-graph us", "gather us", "reduce us");
  for (const Preset& p : presets) {
    for (const std::int64_t m : ms) {
      Tensor logits(DType::kF32, Shape{m, p.e}, Device::cuda());
      fill(logits, 5, 3.0f);
      Tensor bias(DType::kF32, Shape{p.e}, Device::cuda());
      fill(bias, 6, 0.05f);
      const bool use_bias = moekit::routing_uses_bias(p.cfg.method);
      Tensor ids(DType::kI32, Shape{m, p.k}, Device::cuda()), w(DType::kF32, Shape{m, p.k}, Device::cuda());
      const std::int64_t cap = moekit::permute_capacity(m, p.k, p.e, 1);
      Tensor counts(DType::kI32, Shape{p.e}, Device::cuda()), offs(DType::kI32, Shape{p.e + 1}, Device::cuda());
      Tensor sorted(DType::kI32, Shape{cap}, Device::cuda()), rows(DType::kI32, Shape{m, p.k}, Device::cuda());
      const moekit::PermutationView pv{counts, offs, sorted, rows};
      const TensorView b = use_bias ? bias.view() : TensorView{};
      const int reps = quick ? 50 : 200;
      auto route = [&](int, cudaStream_t st) { moekit::route_cuda(logits, b, p.cfg, ids, w, st); };
      auto perm = [&](int, cudaStream_t st) { moekit::compute_permutation_cuda(ids, {}, p.e, 1, pv, st); };
      route(0, s);
      BENCH_CHECK(cudaStreamSynchronize(s));
      const Timing tr = time_graph(route, 1, reps, s);
      const Timing tp = time_graph(perm, 1, reps, s);
      const Timing tb = time_graph([&](int i, cudaStream_t st) { route(i, st); perm(i, st); }, 1, reps, s);
      // The same pair 20 times in one graph: per-pair time without the graph-launch overhead (what
      // the ops cost inside a captured layer).
      const Timing ta = time_graph([&](int i, cudaStream_t st) { route(i, st); perm(i, st); }, 20,
                                   reps / 4, s);
      // Gather of bf16 [M, 7168] activations and the weighted reduce back (identity experts).
      const std::int64_t h = 7168;
      Tensor x(DType::kBF16, Shape{m, h}, Device::cuda()), g(DType::kBF16, Shape{cap, h}, Device::cuda());
      Tensor out(DType::kBF16, Shape{m, h}, Device::cuda());
      fill(x, 8);
      perm(0, s);
      BENCH_CHECK(cudaStreamSynchronize(s));
      const Timing tg = time_graph(
          [&](int, cudaStream_t st) { moekit::permute_gather_cuda(x, sorted, p.k, g, st); }, 1, reps, s);
      const Timing tu = time_graph(
          [&](int, cudaStream_t st) { moekit::unpermute_reduce_cuda(g, rows, w, out, st); }, 1, reps, s);
      std::printf("%-16s %6lld %10.2f %10.2f %14.2f %14.2f %10.2f %10.2f\n", p.name,
                  static_cast<long long>(m), tr.median_us, tp.median_us, tb.median_us, ta.median_us,
                  tg.median_us, tu.median_us);
      add_row(std::string("{\"bench\": \"routing_permute\", \"preset\": \"") + p.name +
              "\", \"m\": " + std::to_string(m) + ", \"e\": " + std::to_string(p.e) + ", \"k\": " +
              std::to_string(p.k) + ", \"route_us\": " + std::to_string(tr.median_us) +
              ", \"permute_us\": " + std::to_string(tp.median_us) + ", \"route_permute_us\": " +
              std::to_string(tb.median_us) + ", \"route_permute_min_us\": " + std::to_string(tb.min_us) +
              ", \"route_permute_max_us\": " + std::to_string(tb.max_us) + ", \"route_permute_in_graph_us\": " + std::to_string(ta.median_us) +
              ", \"gather_bf16_h7168_us\": " +
              std::to_string(tg.median_us) + ", \"unpermute_reduce_bf16_h7168_us\": " +
              std::to_string(tu.median_us) + "}");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path, filter;
  bool quick = false;
  std::int64_t only_m = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
    else if (!std::strcmp(argv[i], "--m") && i + 1 < argc) only_m = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--out results.json] [--quick] [--filter OP_SUBSTRING] [--m M]\n"
                   "  --filter / --m: only the quantize ops whose name contains OP_SUBSTRING, only M "
                   "(no routing; for profiling one kernel)\n",
                   argv[0]);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  cudaStream_t s;
  BENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const double copy_gbs = copy_bandwidth(s);
  bench_quantize(copy_gbs, quick, filter, only_m, s);
  if (filter.empty() && only_m == 0) bench_routing(quick, s);
  BENCH_CHECK(cudaDeviceSynchronize());
  if (!out_path.empty()) {
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    FILE* f = std::fopen(out_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
      return 1;
    }
    // The FP4 kernel choices this run was made with (unset: the library's defaults).
    const char* fp4_kernel = std::getenv("MOEKIT_QUANT_FP4_KERNEL");
    std::fprintf(f, "{\n  \"tool\": \"moekit_kernel_bench\",\n  \"date\": \"%s\",\n  \"gpu\": \"%s\",\n"
                 "  \"sms\": %d,\n  \"fp4_quantize_kernel\": \"%s\",\n"
                 "  \"copy_gb_per_s\": %.1f,\n"
                 "  \"results\": [\n%s\n  ]\n}\n",
                 date, prop.name, prop.multiProcessorCount, fp4_kernel ? fp4_kernel : "auto",
                 copy_gbs, json_rows.c_str());
    std::fclose(f);
    std::printf("\nwrote %s\n", out_path.c_str());
  }
  return 0;
}
