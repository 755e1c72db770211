// `moekit quantize` as a library function: a bf16 Hugging Face MoE checkpoint directory ->
// a quantized checkpoint directory that moekit's loaders (and the format's own consumers) read.
//
// Output layout: one safetensors file per MoE layer (quantized experts + router,
// model-moe-layer-{L}.safetensors), one with every other tensor unchanged (model-rest.safetensors),
// model.safetensors.index.json over all of them, config.json with "quantization_config" for the
// format (+ hf_quant_config.json for ModelOpt), and the input directory's other small files
// (tokenizer, generation config) copied. Modules left in bf16 are listed as excluded
// (exclude_modules / ignore / modules_to_not_convert).
//
// The output is written into a hidden sibling directory and renamed into place once complete
// (io/staged_output.hpp): a failure (or an interruption, with the CLI's signal handling) leaves
// no partial output and no empty directory; the input directory is only read. The output's parent
// directory must exist; output_dir may be new or an empty directory.
//
// Static input scales (NVFP4 formats): from a calibration file (safetensors with hidden_states
// [M, H], or model.layers.{L}.hidden_states per layer): amax13 = max |x|, amax2 = max over experts
// and tokens of |act(x W1^T, x W3^T)| (every token through every expert: an upper bound of what
// routed tokens see). Without one, both amax default to `default_input_amax` (2688: input_scale
// 1.0, encode scale 1.0).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "moekit/io/moe_loader.hpp"

namespace moekit::io {

struct QuantizeCheckpointOptions {
  CheckpointFormat format = CheckpointFormat::kModelOptNVFP4;  // the target (not kBF16)
  std::string calibration_file;                                // optional
  float default_input_amax = 2688.0f;
  std::int64_t max_calibration_tokens = 256;  // the first rows of hidden_states used for amax2
  std::vector<int> layers;                    // empty: every MoE layer
  // Replace an existing non-empty output directory (one without subdirectories); without it such
  // a directory is refused. See staged_output.hpp for the rules.
  bool overwrite = false;
  // Called after each layer: (layers done, layers total, layer index).
  std::function<void(int, int, int)> progress;
};

struct QuantizeCheckpointResult {
  std::vector<int> layers;  // the MoE layers quantized
  std::size_t tensors_written = 0;
  std::size_t passthrough_tensors = 0;
};

QuantizeCheckpointResult quantize_checkpoint(const std::string& input_dir,
                                             const std::string& output_dir,
                                             const QuantizeCheckpointOptions& options);

}  // namespace moekit::io
