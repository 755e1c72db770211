// The job behind `moekit run`: build a deterministic random layer (preset + weight quant + seed),
// run it on a backend, check it against the independent float64 reference, and report.
// With default options this is the embedded default job (preset "tiny", NVFP4 weights, 64
// tokens, a fixed seed).
//
// Every backend of the build runs here (run_layer_on_backend, through the oracle's kernel
// factory make_moe_kernel): the names `moekit run` accepts are the registry's
// (app/run/backend_choice.hpp), the same list `moekit oracle` and `moekit info` show.
// Before allocating anything, run_job() chooses the backend and checks the host (and device)
// memory the job will need against what is available (memory_budget.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moekit/core/tensor.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/reference.hpp"
#include "moekit/moe/weights.hpp"
#include "moekit/oracle/backend.hpp"
#include "moekit/quant/scheme.hpp"
#include "run/memory_budget.hpp"

namespace moekit {

inline constexpr std::uint64_t kDefaultRunSeed = 20260101;

struct RunJobOptions {
  std::string preset = "tiny";
  std::string quant = "nvfp4";  // bf16 | fp8_tensor | fp8_block | nvfp4 | mxfp4 (+ "/layout")
  std::int64_t tokens = 64;
  std::uint64_t seed = kDefaultRunSeed;
  std::string backend = "auto";  // a registered backend name, "reference" or "auto"
  std::string mode = "w4a16";  // w4a16 | emulate
  // Optional scale-down of the preset (0 = keep): see scaled_layer_config().
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  int num_experts = 0;
  // A real layer instead of random weights: a checkpoint directory (any format io/ loads) and the
  // layer index. The weight quantization is the checkpoint's (--quant is ignored).
  std::string checkpoint;
  int layer = -1;
  // Layer replay (docs/io.md): read hidden_states (+ router_logits or topk_ids/topk_weights) from
  // a safetensors file instead of random inputs; write output/topk_ids/topk_weights to another.
  std::string input;
  std::string output;
  bool overwrite = false;  // replace an existing non-empty --output file
  bool verbose = false;    // a refused problem lists every backend's reason
};

struct RunJobReport {
  std::string layer;  // MoeLayerConfig::str()
  std::string preset;
  std::int64_t tokens = 0;
  int num_experts = 0;
  int top_k = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::string routing;
  std::string activation;
  std::string quant;
  std::string mode;
  std::string backend;  // the backend that ran (after resolving "auto"), e.g. "cpu_reference"
  std::uint64_t seed = 0;
  int experts_touched = 0;
  int threads = 0;
  double setup_ms = 0;      // weights, router and inputs generation + quantization
  double layer_ms = 0;      // the layer on the backend (routing included)
  double reference_ms = 0;  // the float64 check
  double max_abs_error = 0;
  double relative_l2 = 0;
  double output_rms = 0;
  double bound = 0;  // relative L2 bound of the check
  bool pass = false;
  std::string text() const;  // human-readable, ends with a "PASS"/"FAIL" line
  std::string json() const;  // one JSON object
};

// The layer's description in a report: layer, preset, tokens, E, top-k, H, I, routing, activation.
void describe_layer(RunJobReport& report, const MoeLayerConfig& config, std::int64_t tokens);
// How many of the layer's experts the routing topk_ids [M, k] touches.
int experts_touched(const Tensor& topk_ids, int num_experts);
// The check of `out` (f32 [M, H]) against the float64 reference: max_abs_error, relative_l2,
// output_rms and pass (report.bound must be set). An all-zero reference for M > 0 would make the
// check vacuous: it fails.
void check_against_reference(RunJobReport& report, const Tensor& out,
                             const std::vector<double>& reference);

// Relative-L2 bound for a backend's output vs the float64 reference in a numeric mode. With
// emulated activation quantization the reference's bound grows on small problems, where one
// intermediate element rounding to the neighbouring code weighs more: activation_scheme is the
// emulated activation quantization, requantized_elements the intermediate's size (M x top-k x I).
double run_error_bound(Backend backend, MoeNumerics numerics, QuantScheme activation_scheme,
                       std::int64_t requantized_elements);

// Everything a backend needs to run one layer.
struct LayerRunInputs {
  const MoeLayerConfig* config = nullptr;
  const MoeWeights* weights = nullptr;  // host
  TensorView hidden_states;             // [M, H] bf16, host
  TensorView router_logits;             // [M, E] f32, host
  TensorView correction_bias;           // [E] f32 or absent
  // Precomputed routing (replay files may carry it): when defined, router_logits is ignored.
  TensorView topk_ids;                  // [M, k] i32, host, or absent
  TensorView topk_weights;              // [M, k] f32, host, or absent
  MoeReferenceOptions options;
};
// The problem a backend runs for these inputs (CPU backends take f32 activations, so that the
// output is not rounded to bf16; CUDA ones bf16).
MoeProblem layer_problem(Backend backend, const MoeLayerConfig& config, const QuantConfig& weights,
                         std::int64_t tokens, const MoeReferenceOptions& options);
// Runs the layer on `backend` through make_moe_kernel (host inputs; CUDA backends copy them to
// device 0 and route there); out: [M, H] f32 host.
void run_layer_on_backend(Backend backend, const LayerRunInputs& inputs, const TensorView& out);

// The host and device memory a job needs, estimated from its sizes before anything is allocated
// (weights with their working copies, activations, the backend's workspace, the float64 check).
// `weight_flags` / `token_flags` name what sizes them ("--preset tiny", "--tokens 64").
struct RunMemoryNeed {
  app::MemoryNeed host, device;
};
RunMemoryNeed run_memory_need(Backend backend, const MoeLayerConfig& config,
                              const QuantConfig& weights, std::int64_t tokens,
                              const MoeReferenceOptions& options, const std::string& weight_flags,
                              const std::string& token_flags);

RunJobReport run_job(const RunJobOptions& options);

}  // namespace moekit
