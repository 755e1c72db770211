// `moekit bench`: the benchmark harness (app/bench/). Presets x schemes (bf16, fp8_block,
// nvfp4, mxfp4) x token counts in one run: ceilings (copy bandwidth, cuBLAS bf16 / cuBLASLt fp8
// peaks), the cuBLAS bf16 per-expert baseline and the moekit experts in CUDA graphs with L2-cold
// weights; a table, optional JSON and the command reproducing each row. Needs a CUDA build and an
// SM90 device; fails clearly otherwise (bad arguments are named first, device or not: exit 1;
// no device or no CUDA build: exit 3), and checks the device memory the largest preset needs
// before allocating any.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/int_options.hpp"
#include "core/device_runtime.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/staged_output.hpp"
#include "moekit/moe/layer_config.hpp"
#include "run/exit_status.hpp"
#include "run/memory_budget.hpp"
#if MOEKIT_WITH_CUDA
#include "bench/bench.hpp"
#include "bench/ep_bench.hpp"
#endif

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

struct Args {
  std::string presets = "deepseek-v3,mixtral-8x7b";
  std::string quants = "bf16,fp8_block";
  std::string tokens = "1,8,64,512,4096";
  std::string backend;
  std::string json;
  int reps = 30;
  std::uint64_t seed = 1;
  bool no_baseline = false;
  bool gemm = false;
  int ep = 1;                          // --ep N: app/bench/ep_bench.cpp (under mpirun)
  std::string dispatch = "naive,a2a";
  bool overwrite = false;
};

// Device memory of the largest preset: the bf16 masters and every requested quantization with
// the experts' prepared copies, the activations of the largest token count, the baseline's
// buffers, and the 512 MiB L2-flush buffer.
moekit::app::MemoryNeed bench_device_need(const std::vector<std::string>& presets,
                                          const std::vector<std::string>& quants,
                                          std::int64_t max_tokens) {
  double stored = 2.0;  // the bf16 masters
  for (const std::string& q : quants)
    stored += 2 * (q == "bf16" ? 0.0 : q == "fp8_block" ? 1.0 : 0.5625);  // + prepared copies
  moekit::app::MemoryNeed worst;
  for (const std::string& name : presets) {
    const moekit::MoeLayerConfig& c = moekit::layer_preset(name);
    const double h = double(c.hidden_size), i = double(c.intermediate_size);
    const double elements = double(c.num_experts) * 3 * h * i;
    const double per_token = c.top_k() * (4 * h + 12 * i) + 8 * h;
    moekit::app::MemoryNeed need;
    need.items = {{"weights", elements * stored, "--preset " + name + " --quant " + [&] {
                     std::string s;
                     for (const auto& q : quants) s += (s.empty() ? "" : ",") + q;
                     return s;
                   }()},
                  {"activations", double(max_tokens) * per_token,
                   "--tokens " + std::to_string(max_tokens)},
                  {"L2 flush buffer", 512.0 * (1 << 20), ""}};
    if (need.total() > worst.total()) worst = need;
  }
  return worst;
}

void setup_bench(CLI::App& sub) {
  auto args = std::make_shared<Args>();
  sub.add_option("--preset", args->presets, "Comma-separated layer presets")
      ->capture_default_str();
  sub.add_option("--quant", args->quants,
                 "Comma-separated schemes: bf16, fp8_block, nvfp4, mxfp4 (nvfp4/mxfp4: W4A16)")
      ->capture_default_str();
  sub.add_option("--tokens", args->tokens, "Comma-separated token counts")->capture_default_str();
  sub.add_option("--backend", args->backend,
                 "Experts backend by name (default: the scheme's own, e.g. cuda_fp8_block_grouped)");
  sub.add_option("--json", args->json,
                 "Write the results as JSON to this file (a new path, or an existing one with "
                 "--overwrite)");
  sub.add_flag("--overwrite", args->overwrite, "Replace an existing --json file");
  moekit::cli::add_integer_option(sub, "--reps", args->reps,
                                  "Timed graph replays per measurement (median reported)", 1,
                                  1000000)
      ->capture_default_str();
  moekit::cli::add_seed_option(sub, "--seed", args->seed, "Seed of weights, inputs and routing")
      ->capture_default_str();
  sub.add_flag("--no-baseline", args->no_baseline, "Skip the cuBLAS per-expert baseline");
  sub.add_flag("--gemm", args->gemm,
               "GEMM level: the bf16 grouped GEMMs alone per kernel (decode, CUTLASS narrow / wide, wgmma) "
               "against the copy bandwidth");
  moekit::cli::add_integer_option(
      sub, "--ep", args->ep,
      "Expert parallel over N GPU ranks (mpirun -np N): tokens are per rank; reports per-rank "
      "time, communication share, bytes vs bus bandwidth",
      1, 65536);
  sub.add_option("--dispatch", args->dispatch, "With --ep: comma-separated naive,a2a");
  sub.callback([args] {
    // Arguments first, in every build and with or without a device.
    const std::vector<std::int64_t> tokens = moekit::cli::parse_integer_list(
        args->tokens, "--tokens", 1, std::numeric_limits<std::int32_t>::max());
    const std::vector<std::string> presets = split(args->presets), quants = split(args->quants);
    for (const std::string& p : presets) (void)moekit::layer_preset(p);  // names the valid ones
    if (!args->json.empty())
      moekit::io::check_output_path(args->json, moekit::io::OutputKind::kFile,
                                    {.overwrite = args->overwrite, .argument = "--json"});
#if MOEKIT_WITH_CUDA
    if (args->ep > 1) {
      moekit::bench::EpBenchOptions e;
      e.presets = split(args->presets);
      e.quants = split(args->quants);
      e.dispatch = split(args->dispatch);
      e.tokens = tokens;
      e.ep = args->ep;
      e.reps = args->reps;
      e.seed = args->seed;
      e.json_path = args->json;
      moekit::bench::run_ep_bench(e);
      return;
    }
    moekit::bench::BenchOptions o;
    o.presets = presets;
    o.quants = quants;
    o.tokens = tokens;
    o.backend = args->backend;
    o.reps = args->reps;
    o.seed = args->seed;
    o.baseline = !args->no_baseline;
    moekit::bench::validate_bench_options(o);
    if (moekit::device_runtime::device_count() == 0)
      throw moekit::app::EnvironmentError(
          "bench: no CUDA device found: moekit bench times GPU kernels and needs an SM90 GPU "
          "(H100/H200) with a working driver");
    moekit::app::check_device_memory(
        "bench", bench_device_need(presets, quants, *std::max_element(tokens.begin(), tokens.end())),
        0);
    // The JSON is written under a hidden name and renamed into place when the run completes.
    std::unique_ptr<moekit::io::StagedOutput> json;
    if (!args->json.empty()) {
      json = std::make_unique<moekit::io::StagedOutput>(
          args->json, moekit::io::OutputKind::kFile,
          moekit::io::OutputPolicy{.overwrite = args->overwrite, .argument = "--json"});
      o.json_path = json->staging_path();
    }
    if (args->gemm)
      moekit::bench::run_gemm_bench(o);
    else
      moekit::bench::run_bench(o);
    if (json) {
      json->commit();
      std::printf("saved as %s\n", args->json.c_str());
    }
#else
    (void)bench_device_need;
    (void)tokens;
    (void)quants;
    throw moekit::app::EnvironmentError(
        "bench: moekit was built without the CUDA backend (configure with -DMOEKIT_CUDA=ON on a "
        "machine with nvcc); the benchmark needs an SM90 GPU");
#endif
  });
}

}  // namespace

MOEKIT_REGISTER_COMMAND(bench, "Benchmark MoE experts against the ceilings and a cuBLAS baseline",
                        setup_bench);
