// `moekit run`: run one MoE layer (the embedded default job without arguments: preset "tiny",
// NVFP4 weights, 64 tokens, a fixed seed) on a backend, check it against the float64 reference
// and print the report. Exits non-zero when the check fails.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "moekit/core/error.hpp"
#include "moekit/io/moe_loader.hpp"
#include "moekit/moe/layer_config.hpp"
#include "run/ep_run.hpp"
#include "run/run_job.hpp"
#include "moekit/oracle/oracle.hpp"

namespace {

// The problem the oracle sees for a checkpoint layer: its config and its weight scheme.
void use_checkpoint_problem(const std::string& dir, moekit::MoeProblem& problem) {
  using moekit::io::CheckpointFormat;
  const moekit::io::CheckpointInfo info = moekit::io::read_checkpoint_info(dir);
  problem.layer = info.layer;
  moekit::QuantConfig q;
  switch (info.format) {
    case CheckpointFormat::kBF16: q.scheme = moekit::QuantScheme::kBF16; break;
    case CheckpointFormat::kModelOptNVFP4:
    case CheckpointFormat::kCompressedTensorsNVFP4: q.scheme = moekit::QuantScheme::kNVFP4; break;
    case CheckpointFormat::kMXFP4: q.scheme = moekit::QuantScheme::kMXFP4; break;
    case CheckpointFormat::kFP8Block: q.scheme = moekit::QuantScheme::kFP8Block128x128; break;
  }
  problem.weight_quant = q;
  problem.parallel = moekit::ParallelConfig::expert_parallel(problem.layer.num_experts, 1, 0);
  problem.validate();
}

void setup_run(CLI::App& sub) {
  auto opt = std::make_shared<moekit::RunJobOptions>();
  auto json = std::make_shared<bool>(false);
  auto ep = std::make_shared<moekit::EpRunOptions>();
  std::string presets;
  for (const auto& n : moekit::layer_preset_names()) presets += (presets.empty() ? "" : "|") + n;
  std::string backends = "auto";
  for (const auto& n : moekit::run_backend_names()) backends += "|" + n;
  sub.add_option("--preset", opt->preset, "Layer preset: " + presets)->capture_default_str();
  sub.add_option("--quant", opt->quant,
                 "Expert weight quantization: bf16|fp8_tensor|fp8_block|nvfp4|mxfp4 "
                 "(optionally /linear|/swizzled_128x4 for block scales)")
      ->capture_default_str();
  sub.add_option("--tokens", opt->tokens, "Number of tokens M")->capture_default_str();
  sub.add_option("--seed", opt->seed, "Seed of weights and inputs")->capture_default_str();
  sub.add_option("--backend", opt->backend, "Backend: " + backends)->capture_default_str();
  sub.add_option("--mode", opt->mode,
                 "Numerics: w4a16 (weights dequantized, activations as given) | emulate "
                 "(GEMM inputs quantized like a W4A4/W8A8 kernel) | an activation quantization, "
                 "e.g. fp8_token (with --quant mxfp4: the W4A8 backend)")
      ->capture_default_str();
  sub.add_option("--hidden", opt->hidden_size, "Scale down: hidden size H (0 = the preset's)");
  sub.add_option("--intermediate", opt->intermediate_size,
                 "Scale down: intermediate size I (0 = the preset's)");
  sub.add_option("--experts", opt->num_experts,
                 "Scale down: number of experts E (0 = the preset's)");
  sub.add_option("--checkpoint", opt->checkpoint,
                 "Run a real layer: checkpoint directory (BF16 HF, ModelOpt/compressed-tensors "
                 "NVFP4, gpt-oss MXFP4, DeepSeek-V3 FP8); --quant is then the checkpoint's");
  sub.add_option("--layer", opt->layer, "Layer index in --checkpoint");
  sub.add_option("--input", opt->input,
                 "Replay: safetensors file with hidden_states [M,H] (+ router_logits [M,E] or "
                 "topk_ids/topk_weights [M,k]); see docs/io.md");
  sub.add_option("--output", opt->output,
                 "Replay: write output [M,H], topk_ids and topk_weights to this safetensors file");
  sub.add_flag("--json", *json, "Print the report as JSON");
  sub.add_option("--ep", ep->ep, "Expert parallel over N ranks (mpirun -np N; docs/expert_parallel.md)");
  sub.add_option("--dispatch", ep->dispatch, "With --ep: auto|naive|a2a")->capture_default_str();
  sub.add_flag("--low-latency", ep->low_latency, "With --ep: batched low-latency dispatch (a2a)");
  sub.callback([opt, json, ep] {
    if (ep->ep > 1) {  // app/run/ep_run.cpp: the sharded layer; rank 0 reports and checks
      ep->job = *opt;
      const moekit::EpRunReport r = moekit::run_ep_job(*ep);
      if (!r.is_rank0) return;
      std::fputs((*json ? r.json() + "\n" : r.text()).c_str(), stdout);
      std::fflush(stdout);
      if (!r.run.pass)
        MOEKIT_FAIL("run --ep: check FAILED: relative L2 ", r.run.relative_l2, " vs bound ",
                    r.run.bound, " (backend ", r.run.backend, ", dispatch ", r.dispatch, ")");
      return;
    }
    // The backend comes from the oracle: --backend, else MOEKIT_BACKEND, else the priority list
    // restricted to what run_job executes; an unknown or refused backend fails with the reason.
    moekit::MoeProblem problem =
        moekit::cli_problem(opt->preset, opt->quant, opt->tokens, opt->mode, 1, false,
                            opt->hidden_size, opt->intermediate_size, opt->num_experts);
    if (!opt->checkpoint.empty()) use_checkpoint_problem(opt->checkpoint, problem);
    const moekit::BackendSelection selection = moekit::select_backend_for_run(
        problem, moekit::DeviceCapabilities::detect(), opt->backend, moekit::run_backend_names());
    moekit::RunJobOptions job = *opt;
    job.backend = moekit::run_backend_for(selection.backend);
    const moekit::RunJobReport report = moekit::run_job(job);
    std::fputs((*json ? report.json() + "\n" : report.text()).c_str(), stdout);
    std::fflush(stdout);
    if (!report.pass) {
      MOEKIT_FAIL("run: check FAILED: relative L2 ", report.relative_l2, " vs bound ", report.bound,
                  " (backend ", report.backend, ")");
    }
  });
}

}  // namespace

MOEKIT_REGISTER_COMMAND(run, "Run one MoE layer on a backend and check it against the reference",
                        setup_run);
