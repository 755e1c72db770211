// `moekit bench`: the benchmark harness (app/bench/). Presets x schemes (bf16, fp8_block,
// nvfp4, mxfp4) x token counts in one run: ceilings (copy bandwidth, cuBLAS bf16 / cuBLASLt fp8
// peaks), the cuBLAS bf16 per-expert baseline and the moekit experts in CUDA graphs with L2-cold
// weights; a table, optional JSON and the command reproducing each row. Needs a CUDA build and an
// SM90 device; fails clearly otherwise (bad arguments are named first, device or not).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "moekit/core/error.hpp"
#if MOEKIT_WITH_CUDA
#include "bench/bench.hpp"
#include "bench/ep_bench.hpp"
#endif

namespace {

[[maybe_unused]] std::vector<std::string> split(const std::string& s) {
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
};

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
  sub.add_option("--json", args->json, "Write the results as JSON to this file");
  sub.add_option("--reps", args->reps, "Timed graph replays per measurement (median reported)")
      ->capture_default_str();
  sub.add_option("--seed", args->seed, "Seed of weights, inputs and routing")->capture_default_str();
  sub.add_flag("--no-baseline", args->no_baseline, "Skip the cuBLAS per-expert baseline");
  sub.add_flag("--gemm", args->gemm,
               "GEMM level: the bf16 grouped GEMMs alone per kernel (decode, CUTLASS narrow / wide, wgmma) "
               "against the copy bandwidth");
  sub.add_option("--ep", args->ep, "Expert parallel over N GPU ranks (mpirun -np N): tokens are "
                 "per rank; reports per-rank time, communication share, bytes vs bus bandwidth");
  sub.add_option("--dispatch", args->dispatch, "With --ep: comma-separated naive,a2a");
  sub.callback([args] {
#if MOEKIT_WITH_CUDA
    if (args->ep > 1) {
      moekit::bench::EpBenchOptions e;
      e.presets = split(args->presets);
      e.quants = split(args->quants);
      e.dispatch = split(args->dispatch);
      e.tokens.clear();
      for (const auto& t : split(args->tokens)) e.tokens.push_back(std::stoll(t));
      e.ep = args->ep;
      e.reps = args->reps;
      e.seed = args->seed;
      e.json_path = args->json;
      moekit::bench::run_ep_bench(e);
      return;
    }
    moekit::bench::BenchOptions o;
    o.presets = split(args->presets);
    o.quants = split(args->quants);
    o.tokens.clear();
    for (const auto& t : split(args->tokens)) {
      try {
        o.tokens.push_back(std::stoll(t));
      } catch (const std::exception&) {
        moekit::throw_arg_error("bench", "--tokens", "comma-separated integers", t);
      }
    }
    o.backend = args->backend;
    o.json_path = args->json;
    o.reps = args->reps;
    o.seed = args->seed;
    o.baseline = !args->no_baseline;
    if (args->gemm)
      moekit::bench::run_gemm_bench(o);
    else
      moekit::bench::run_bench(o);
#else
    MOEKIT_FAIL("bench: moekit was built without the CUDA backend (configure with "
                "-DMOEKIT_CUDA=ON on a machine with nvcc); the benchmark needs an SM90 GPU");
#endif
  });
}

}  // namespace

MOEKIT_REGISTER_COMMAND(bench, "Benchmark MoE experts against the ceilings and a cuBLAS baseline",
                        setup_bench);
