// `moekit run`: run one MoE layer (the embedded default job without arguments: preset "tiny",
// NVFP4 weights, 64 tokens, a fixed seed) on a backend, check it against the float64 reference
// and print the report. Exits 1 when the check fails (run_job.hpp has the job).
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "cli/command.hpp"
#include "cli/int_options.hpp"
#include "moekit/core/error.hpp"
#include "moekit/moe/layer_config.hpp"
#include "run/backend_choice.hpp"
#include "run/ep_run.hpp"
#include "run/run_job.hpp"

namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<std::int32_t>::max();

void setup_run(CLI::App& sub) {
  using moekit::cli::add_integer_option;
  auto opt = std::make_shared<moekit::RunJobOptions>();
  auto json = std::make_shared<bool>(false);
  auto ep = std::make_shared<moekit::EpRunOptions>();
  std::string presets;
  for (const auto& n : moekit::layer_preset_names()) presets += (presets.empty() ? "" : "|") + n;
  sub.add_option("--preset", opt->preset, "Layer preset: " + presets)->capture_default_str();
  sub.add_option("--quant", opt->quant,
                 "Expert weight quantization: bf16|fp8_tensor|fp8_block|nvfp4|mxfp4 "
                 "(optionally /linear|/swizzled_128x4 for block scales)")
      ->capture_default_str();
  add_integer_option(sub, "--tokens", opt->tokens, "Number of tokens M", 0, kMaxInt)
      ->capture_default_str();
  moekit::cli::add_seed_option(sub, "--seed", opt->seed, "Seed of weights and inputs")
      ->capture_default_str();
  sub.add_option("--backend", opt->backend,
                 "Backend: " + moekit::app::backend_choices_help() +
                     " ('reference' = cpu_reference; else env MOEKIT_BACKEND)")
      ->capture_default_str();
  sub.add_option("--mode", opt->mode,
                 "Numerics: w4a16 (weights dequantized, activations as given) | emulate "
                 "(GEMM inputs quantized like a W4A4/W8A8 kernel) | an activation quantization, "
                 "e.g. fp8_token (with --quant mxfp4: the W4A8 backend)")
      ->capture_default_str();
  add_integer_option(sub, "--hidden", opt->hidden_size,
                     "Scale down: hidden size H (0 = the preset's)", 0, kMaxInt);
  add_integer_option(sub, "--intermediate", opt->intermediate_size,
                     "Scale down: intermediate size I (0 = the preset's)", 0, kMaxInt);
  add_integer_option(sub, "--experts", opt->num_experts,
                     "Scale down: number of experts E (0 = the preset's)", 0, kMaxInt);
  sub.add_option("--checkpoint", opt->checkpoint,
                 "Run a real layer: checkpoint directory (BF16 HF, ModelOpt/compressed-tensors "
                 "NVFP4, gpt-oss MXFP4, DeepSeek-V3 FP8); --quant is then the checkpoint's");
  add_integer_option(sub, "--layer", opt->layer, "Layer index in --checkpoint", 0, kMaxInt);
  sub.add_option("--input", opt->input,
                 "Replay: safetensors file with hidden_states [M,H] (+ router_logits [M,E] or "
                 "topk_ids/topk_weights [M,k]); see docs/io.md");
  sub.add_option("--output", opt->output,
                 "Replay: write output [M,H], topk_ids and topk_weights to this safetensors file "
                 "(a new path, or an existing one with --overwrite)");
  sub.add_flag("--overwrite", opt->overwrite, "Replace an existing --output file");
  sub.add_flag("--json", *json, "Print the report as JSON");
  sub.add_flag("--verbose", opt->verbose,
               "When no backend can run the problem, list every backend's reason");
  add_integer_option(sub, "--ep", ep->ep,
                     "Expert parallel over N ranks (mpirun -np N; docs/expert_parallel.md)", 1,
                     65536);
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
    const moekit::RunJobReport report = moekit::run_job(*opt);
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
