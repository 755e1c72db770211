// `moekit bench`: ceilings, cuBLAS baseline and moekit experts per preset x scheme x tokens
// (see bench.hpp; method: docs/performance.md).
#include "bench/bench.hpp"

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
#include <tuple>
#include <vector>

#include "core/device_runtime.hpp"
#include "bench/bench_cublas.hpp"
#include "bench/bench_util.hpp"
#include "bench/bench_kernels.hpp"
#include "bench/bench_weights.hpp"
#include "cuda/experts/sm90_grouped_experts.hpp"
#include "cuda/finalize/weighted_reduce.hpp"
#include "cuda/permute/permute_kernels.hpp"
#include "cuda/prepare_finalize/prepare_finalize_kernels.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "moekit/core/error.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/oracle/backend.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/routing/routing.hpp"

namespace moekit::bench {
namespace {

using json = nlohmann::json;

struct Scheme {
  const char* name;
  QuantScheme weights, activations;
  const char* default_backend;
  double weight_bytes;  // per weight element, scales included (docs/performance.md)
  bool fp8_peak;        // tensor peak: fp8 (else bf16; W4A16 runs bf16 tensor cores)
};
const Scheme kSchemes[] = {
    {"bf16", QuantScheme::kBF16, QuantScheme::kBF16, "cuda_bf16_grouped", 2.0, false},
    {"fp8_block", QuantScheme::kFP8Block128x128, QuantScheme::kFP8Block1x128,
     "cuda_fp8_block_grouped", 1.0 + 4.0 / (128 * 128), true},
    // W4A16: e2m1 values (0.5 byte) + one e4m3 scale per 16 / one e8m0 scale per 32 (NVFP4's
    // per-expert global scale is negligible), bf16 activations.
    {"nvfp4", QuantScheme::kNVFP4, QuantScheme::kBF16, "cuda_w4a16_grouped", 0.5 + 1.0 / 16,
     false},
    {"mxfp4", QuantScheme::kMXFP4, QuantScheme::kBF16, "cuda_w4a16_grouped", 0.5 + 1.0 / 32,
     false},
    // W4A8: the same MXFP4 weights, e4m3 activations with a per-token scale, fp8 tensor cores.
    {"w4a8_mxfp4", QuantScheme::kMXFP4, QuantScheme::kFP8PerToken, "cuda_w4a8_grouped",
     0.5 + 1.0 / 32, true},
};

const Scheme& find_scheme(const std::string& name) {
  std::string valid;
  for (const auto& s : kSchemes) {
    if (name == s.name) return s;
    valid += std::string(valid.empty() ? "" : ", ") + s.name;
  }
  throw_arg_error("bench", "--quant", "one of " + valid, name);
}

// The modular experts of a registered CUDA backend for `problem`.
std::unique_ptr<ModularExperts> make_experts(const std::string& backend, const MoeProblem& problem) {
  const BackendRegistration* r = BackendRegistry::instance().find(parse_moe_backend(backend));
  MOEKIT_CHECK(r != nullptr, "bench: backend ", backend, " is not compiled into this build");
  std::unique_ptr<Experts> e = r->make_experts(problem);
  auto* modular = dynamic_cast<ModularExperts*>(e.get());
  MOEKIT_CHECK(modular != nullptr, "bench: backend ", backend, " is not a modular experts backend");
  e.release();
  return std::unique_ptr<ModularExperts>(modular);
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

// FNV-1a 64 of the bytes of a device buffer (the layer's output: before / after comparisons of a
// refactor are bitwise on this).
std::string device_fnv1a(const void* p, std::size_t bytes, cudaStream_t s) {
  std::vector<unsigned char> h(bytes);
  MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));
  MOEKIT_CUDA_CHECK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
  std::uint64_t x = 1469598103934665603ull;
  for (unsigned char c : h) x = (x ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

}  // namespace

std::vector<std::string> experts_names() {
  std::vector<std::string> v;
  for (Backend b : BackendRegistry::instance().registered()) {
    const BackendTraits& t = backend_traits(b);
    if (t.on_cuda && !t.monolithic && t.format == ActivationFormat::kStandard)
      v.emplace_back(moe_backend_name(b));
  }
  return v;
}

void validate_bench_options(const BenchOptions& o) {
  MOEKIT_CHECK_ARG(!o.quants.empty(), "--quant", "at least one scheme", "none");
  MOEKIT_CHECK_ARG(!o.presets.empty(), "--preset", "at least one preset", "none");
  MOEKIT_CHECK_ARG(!o.tokens.empty(), "--tokens", "at least one token count", "none");
  for (const auto& q : o.quants) (void)find_scheme(q);
  const std::vector<std::string> names = layer_preset_names();
  for (const auto& p : o.presets) {
    if (std::find(names.begin(), names.end(), p) != names.end()) continue;
    std::string valid;
    for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
    throw_arg_error("bench", "--preset", "one of " + valid, p);
  }
  for (auto m : o.tokens) MOEKIT_CHECK_ARG(m >= 1, "--tokens", ">= 1", m);
  MOEKIT_CHECK_ARG(o.reps >= 1, "--reps", ">= 1", o.reps);
  if (!o.backend.empty()) {
    std::string valid;
    for (const auto& n : experts_names()) valid += (valid.empty() ? "" : ", ") + n;
    const std::vector<std::string> names = experts_names();
    MOEKIT_CHECK_ARG(std::find(names.begin(), names.end(), o.backend) != names.end(), "--backend",
                     "one of " + valid, o.backend);
  }
}

void run_bench(const BenchOptions& o) {
  validate_bench_options(o);  // bad arguments name themselves, GPU or not
  if (device_runtime::device_count() == 0)
    MOEKIT_FAIL("bench: no CUDA device found: moekit bench times GPU kernels and needs an SM90 GPU "
                "(H100/H200) with a working driver");
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
  std::vector<QuantScheme> weight_schemes;
  for (const auto& q : o.quants) weight_schemes.push_back(find_scheme(q).weights);
  const std::int64_t max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  for (const auto& preset_name : o.presets) {
    const MoeLayerConfig& cfg = layer_preset(preset_name);
    const int e = cfg.num_experts, k = cfg.top_k();
    const std::int64_t h = cfg.hidden_size, i = cfg.intermediate_size;
    // bf16 masters and their quantizations (bench_weights.hpp): every scheme and the baseline
    // compute nearly the same function.
    const BenchWeights weights = make_bench_weights(cfg, weight_schemes, o.seed, s);
    const MoeWeights& wb = weights.master;
    // The cuBLAS baseline computes SiLU-and-mul without biases and weights the outputs: its output
    // is comparable only for such layers (its time is the same GEMM work either way).
    const bool on_input = routing_weight_on_input(cfg.routing.method);
    const bool same_function =
        !cfg.has_bias && cfg.activation.kind == Activation::kSiluAndMul && !on_input;
    // One experts object per scheme, prepared once for the largest token count (W4A16 shuffles
    // its weights on the host in prepare_weights: seconds for the big presets) and applied to
    // each M <= max: apply()'s work depends on in.num_tokens only.
    struct Prepared {
      std::unique_ptr<ModularExperts> experts;
      Tensor ws13, ws2, out;
      std::string unsupported;
    };
    std::map<std::string, Prepared> prepared;
    auto problem = [&](const Scheme& sch, std::int64_t m) {
      MoeProblem p;
      p.num_tokens = m;
      p.layer = cfg;
      p.weight_quant.scheme = sch.weights;
      p.activation_quant.scheme = sch.activations;
      p.activation_dtype = DType::kBF16;
      return p;
    };
    auto prepare = [&](const std::string& qname, const std::string& backend) -> Prepared& {
      Prepared& pr = prepared[qname];
      if (pr.experts || !pr.unsupported.empty()) return pr;
      const Scheme& sch = find_scheme(qname);
      const MoeProblem p = problem(sch, max_tokens);
      pr.experts = make_experts(backend, p);
      const Support sup = pr.experts->supports(p);
      if (!sup.ok) {
        pr.unsupported = backend + ": " + sup.reason;
        pr.experts.reset();
        return pr;
      }
      pr.experts->prepare_weights(p, weights.get(sch.weights), s);
      const auto ws = pr.experts->workspace_shapes(p);
      pr.ws13 = device_tensor(ws.workspace13.dtype, ws.workspace13.shape);
      pr.ws2 = device_tensor(ws.workspace2.dtype, ws.workspace2.shape);
      pr.out = device_tensor(ws.output.dtype, ws.output.shape);
      MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));
      return pr;
    };

    for (const std::int64_t m : o.tokens) {
      const std::int64_t r = m * k;
      const BenchRouting routing = bench_routing(m, e, k, o.seed);
      const std::vector<std::int32_t>& off = routing.offsets;
      const int distinct = routing.distinct;
      Tensor d_ids = upload(routing.ids, DType::kI32, Shape{m, k});
      Tensor d_w = upload(routing.weights, DType::kF32, Shape{m, k});
      Tensor x = device_tensor(DType::kBF16, Shape{m, h});
      fill_random_bf16(x.data(), static_cast<std::size_t>(m * h), o.seed + 3 + static_cast<std::uint64_t>(m), 1.0f, s);
      const double flops = 2.0 * static_cast<double>(r) * 3.0 * static_cast<double>(h) * static_cast<double>(i);

      // Baseline: cuBLAS per expert over the permuted rows (the permutation itself is not timed).
      // Run once here for its output; timed with each scheme's row, in alternating replays.
      Tensor base_out = device_tensor(DType::kBF16, Shape{m, h});
      struct BaselineBuffers {
        Tensor d_off, sorted, prow, a, h1, act, out;
      } bl;
      auto run_base = [&] {
        baseline.run(off, bl.d_off.ptr<std::int32_t>(), h, i, bl.a.data(), wb.w13.values.data(),
                     wb.w2.values.data(), bl.h1.data(), bl.act.data(), bl.out.data(), s);
      };
      if (o.baseline) {
        bl.d_off = device_tensor(DType::kI32, Shape{e + 1});
        bl.sorted = device_tensor(DType::kI32, Shape{r});
        bl.prow = device_tensor(DType::kI32, Shape{r});
        bl.a = device_tensor(DType::kBF16, Shape{r, h});
        bl.h1 = device_tensor(DType::kBF16, Shape{r, 2 * i});
        bl.act = device_tensor(DType::kBF16, Shape{r, i});
        bl.out = device_tensor(DType::kBF16, Shape{r, h});
        cuda::PermuteArgs perm;
        perm.topk_ids = d_ids.ptr<std::int32_t>();
        perm.num_assignments = r;
        perm.num_experts = perm.num_local_experts = e;
        perm.expert_offsets = bl.d_off.ptr<std::int32_t>();
        perm.sorted_ids = bl.sorted.ptr<std::int32_t>();
        perm.permuted_row = bl.prow.ptr<std::int32_t>();
        cuda::permute_by_expert(perm, s);
        cuda::GatherArgs gather;
        gather.src = x.data();
        gather.row_bytes = h * 2;
        gather.sorted_ids = bl.sorted.ptr<std::int32_t>();
        gather.top_k = k;
        gather.max_rows = r;
        gather.num_rows = bl.d_off.ptr<std::int32_t>() + e;
        gather.out = bl.a.data();
        cuda::gather_rows(gather, s);
        run_base();
        cuda::WeightedReduceArgs reduce;
        reduce.expert_out = bl.out.data();
        reduce.source_row = bl.prow.ptr<std::int32_t>();
        reduce.topk_weights = d_w.ptr<float>();
        reduce.num_tokens = m;
        reduce.top_k = k;
        reduce.hidden = h;
        reduce.out = base_out.data();
        cuda::weighted_reduce(reduce, s);
        MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));
      }

      for (const auto& qname : o.quants) {
        const Scheme& sch = find_scheme(qname);
        const std::string backend = o.backend.empty() ? sch.default_backend : o.backend;
        std::string cmd = o.command_prefix + " --preset " + preset_name + " --quant " + qname +
                          " --tokens " + std::to_string(m);
        if (!o.backend.empty()) cmd += " --backend " + o.backend;
        if (!o.baseline) cmd += " --no-baseline";
        // The kernels the tuning rules pick for GEMM1 (the overrides of docs/tuning.md apply).
        const cuda::SchemeChoice choice = cuda::gemm_scheme_of(problem(sch, m));
        const std::string gemm_cfg_name =
            choice.ok ? tuning::sm90::experts_plan(choice.scheme, e, r, h, i, true).gemm1.str()
                      : "-";
        for (const char* var : {"MOEKIT_GEMM_KERNEL", "MOEKIT_GEMM_TILE", "MOEKIT_DECODE_ROUTING"})
          if (const char* v = std::getenv(var); v && *v) cmd = std::string(var) + "=" + v + " " + cmd;
        json row = {{"preset", preset_name}, {"quant", qname}, {"backend", backend},
                    {"tokens", m}, {"distinct_experts", distinct}, {"command", cmd},
                    {"gemm_config", gemm_cfg_name}};
        const Support sup = make_experts(backend, problem(sch, m))->supports(problem(sch, m));
        Prepared* pr = sup.ok ? &prepare(qname, backend) : nullptr;
        const std::string why = !sup.ok ? backend + ": " + sup.reason
                                        : (pr->experts ? std::string() : pr->unsupported);
        if (!why.empty()) {
          std::printf("%-16s %-9s %6lld  unsupported: %s\n", preset_name.c_str(), qname.c_str(),
                      static_cast<long long>(m), why.c_str());
          row["unsupported"] = why;
          rows.push_back(row);
          continue;
        }
        const bool fp8 = sch.weights == QuantScheme::kFP8Block128x128;
        // W4A8: the NoEP prepare's per-token e4m3 quantization (the quantize op), timed with the
        // layer; of x * w for Llama4.
        const bool a8 = sch.activations == QuantScheme::kFP8PerToken;
        // Llama4 with bf16 activations: the NoEP prepare's f32 rows x * w (timed with the layer),
        // which the experts round to bf16. (fp8: the 1x128 quantize of x, as for other presets.)
        const bool scaled_input = on_input && !fp8;
        Tensor xq, xs, xw;
        DispatchedActivations in;
        in.num_tokens = m;
        in.topk_ids = d_ids.view();
        in.topk_weights = d_w.view();
        in.a1q.config.scheme = sch.activations;
        if (fp8) {  // the NoEP prepare: the 1x128 quantize op (CUDA), timed with the layer
          xq = device_tensor(DType::kE4M3, Shape{m, h});
          xs = device_tensor(DType::kF32, Shape{m, h / 128});
          in.a1q.values = xq.view();
          in.a1q.scales = xs.view();
        } else if (a8) {
          xq = device_tensor(DType::kE4M3, Shape{m, h});
          xs = device_tensor(DType::kF32, Shape{m});
          in.a1q.values = xq.view();
          in.a1q.scales = xs.view();
        }
        if (scaled_input) xw = device_tensor(DType::kF32, Shape{m, h});
        if (!fp8 && !a8) in.a1q.values = scaled_input ? xw.view() : x.view();
        QuantizedView a8q;
        a8q.config = in.a1q.config;
        a8q.values = in.a1q.values;
        a8q.scales = in.a1q.scales;
        auto run_layer = [&] {
          if (scaled_input) cuda::scale_rows_by_weight(x.view(), d_w.view(), xw.view(), s);
          if (fp8 || a8)
            quantize(scaled_input ? xw.view() : x.view(), a8q.config, a8q, QuantBackend::kCuda, {},
                     s);
          pr->experts->apply(in, pr->out.view(), pr->ws13.view(), pr->ws2.view(), s);
        };
        Stats st{}, base{};
        if (o.baseline)
          std::tie(base, st) = timer.time_pair(run_base, run_layer);
        else
          st = timer.time(run_layer);
        const double t = st.median_us * 1e-6;
        const double wbytes = static_cast<double>(distinct) * 3.0 * h * i * sch.weight_bytes;
        const double peak = sch.fp8_peak ? c.fp8_tflops : c.bf16_tflops;
        const double floor_s = std::max(wbytes / (c.copy_gbps * 1e9), flops / (peak * 1e12));
        const double rel = o.baseline && same_function
                               ? rel_l2_bf16(pr->out.data(), base_out.data(),
                                             static_cast<std::size_t>(m * h), s)
                               : NAN;
        row.update({{"time_us", st.median_us}, {"p10_us", st.p10_us}, {"p90_us", st.p90_us},
                    {"tflops", flops / t / 1e12}, {"gbps", wbytes / t / 1e9},
                    {"fraction_of_peak", flops / t / 1e12 / peak}, {"floor_us", floor_s * 1e6},
                    {"floor_over_time", floor_s / t}, {"weight_bytes", wbytes}, {"flops", flops},
                    {"rel_diff_vs_cublas_bf16", rel}, {"baseline_same_function", same_function},
                    {"output_fnv1a", device_fnv1a(pr->out.data(), static_cast<std::size_t>(m * h) * 2, s)}});
        if (o.baseline)
          row.update({{"cublas_us", base.median_us}, {"cublas_p10_us", base.p10_us},
                      {"cublas_p90_us", base.p90_us}, {"speedup", base.median_us / st.median_us}});
        std::printf("%-16s %-9s %6lld %4d %10.1f %4.0f-%-5.0f %8.1f %8.0f %10.1f %6.2f %10.1f %7.2f %8.1e %s\n",
                    preset_name.c_str(), qname.c_str(), static_cast<long long>(m), distinct,
                    st.median_us, st.p10_us, st.p90_us, flops / t / 1e12, wbytes / t / 1e9,
                    floor_s * 1e6, floor_s / t, base.median_us,
                    o.baseline ? base.median_us / st.median_us : NAN, rel, gemm_cfg_name.c_str());
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
                           "timed with each row in alternating replays (same power / thermal "
                           "state), over pre-permuted rows (SiLU-and-mul, no biases: rel_diff only where "
                           "the layer computes the same function); moekit time includes permute, "
                           "gather, (fp8: 1x128 activation quantize; llama4 bf16 activations: x * w "
                           "in f32 and its bf16 rounding,) GEMM1, activation, GEMM2, weighted "
                           "reduce; nvfp4/mxfp4 = W4A16 (cuda_w4a16_grouped) on weights "
                           "quantized from the same bf16 masters, floor at 0.5625 / 0.53125 "
                           "bytes per weight"},
                {"reps", o.reps},
                {"ceilings", {{"copy_gbps", c.copy_gbps}, {"bf16_tflops", c.bf16_tflops},
                              {"fp8_tflops", c.fp8_tflops},
                              {"fp8_fast_accum_tflops", c.fp8_fast_accum_tflops},
                              {"fp8_exact_accum_tflops", c.fp8_exact_accum_tflops}}},
                {"rows", rows}};
    write_json(o.json_path, doc);
  }
  cudaStreamDestroy(s);
}

}  // namespace moekit::bench
