// Loading one MoE layer of a real checkpoint (config.json + safetensors) into moekit's
// MoeLayerConfig + MoeWeights + RouterWeights (moe/weights.hpp conventions: w13 = [gate; up]
// halves, ENCODE global scales, linear block scales).
//
// Checkpoint formats (detected from config.json "quantization_config" or hf_quant_config.json):
//   kBF16            plain HF: per-expert `weight` (bf16; f32 / f16 are rounded to bf16, so a
//                    model transformers saved in float32 loads too), or the fused 3-D experts
//                    transformers writes: gpt-oss `experts.gate_up_proj` [E, H, 2I] (gate/up
//                    columns interleaved even/odd) + `gate_up_proj_bias` [E, 2I], `down_proj`
//                    [E, I, H] + `down_proj_bias` [E, H]; other model types (transformers 5
//                    `save_pretrained(save_original_format=False)`) `experts.gate_up_proj`
//                    [E, 2I, H] = [gate; up] and `experts.down_proj` [E, H, I].
//   kModelOptNVFP4   `weight` u8 [N, K/2], `weight_scale` F8_E4M3 [N, K/16], `weight_scale_2` f32
//                    scalar (DECODE: moekit stores gs = 1 / weight_scale_2, gate and up must
//                    share it), `input_scale` f32 scalar (DECODE: a13_scale / a2_scale = 1 / it).
//   kCompressedTensorsNVFP4
//                    `weight_packed`, `weight_scale`, `weight_global_scale` (ENCODE, stored as
//                    is), `input_global_scale` (ENCODE).
//   kMXFP4           gpt-oss fused experts: `experts.gate_up_proj_blocks` u8 [E, 2I, H/32, 16],
//                    `_scales` u8 [E, 2I, H/32], `gate_up_proj_bias` [E, 2I] (gate/up rows
//                    interleaved even/odd: de-interleaved into halves for weights, scales and
//                    bias), `down_proj_blocks/_scales/_bias`.
//   kFP8Block        DeepSeek-V3: `weight` F8_E4M3 [N, K] + `weight_scale_inv` f32
//                    [ceil(N/128), ceil(K/128)] (DECODE; stacking gate/up needs I % 128 == 0).
// Tensor names (prefix P = model.layers.{L}.block_sparse_moe (Mixtral) or model.layers.{L}.mlp):
//   per-expert: P.experts.{e}.{w1,w3,w2} (Mixtral) or P.experts.{e}.{gate,up,down}_proj, + the
//   format's suffixes above; fused (kMXFP4): P.experts.{gate_up,down}_proj_{blocks,scales,bias};
//   fused unquantized (kBF16): P.experts.{gate_up_proj,down_proj}(_bias);
//   router: P.gate.weight (+ P.gate.e_score_correction_bias) or P.router.weight (+ .bias).
// config.json keys: model_type; num_local_experts | num_experts | n_routed_experts;
//   num_experts_per_tok | experts_per_token; hidden_size; moe_intermediate_size |
//   intermediate_size; norm_topk_prob; n_group, topk_group, routed_scaling_factor,
//   n_shared_experts (deepseek_v3); swiglu_limit (gpt_oss).
// Every missing tensor, mismatched shape or dtype and inconsistent scale throws moekit::Error
// naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "moekit/io/checkpoint.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/weights.hpp"

namespace moekit::io {

enum class CheckpointFormat : std::uint8_t {
  kBF16,
  kModelOptNVFP4,
  kCompressedTensorsNVFP4,
  kMXFP4,
  kFP8Block,
};
std::string_view checkpoint_format_name(CheckpointFormat f);  // "bf16", "modelopt_nvfp4",
                                                              // "ct_nvfp4", "mxfp4", "fp8_block"
CheckpointFormat parse_checkpoint_format(std::string_view name);

// How to treat calibrated input scales that differ across experts (or gate/up).
enum class InputScalePolicy : std::uint8_t {
  kRequireEqual,  // error naming the experts (moekit's MoeWeights contract)
  kMax,           // use the largest DECODE scale (smallest encode scale), as vLLM does
  kIgnore,        // do not load input scales (weight-only use)
};

struct MoeLoadOptions {
  InputScalePolicy input_scales = InputScalePolicy::kRequireEqual;
};

// What config.json (+ hf_quant_config.json) says about the model.
struct CheckpointInfo {
  std::string dir;
  std::string model_type;
  int num_hidden_layers = 0;
  CheckpointFormat format = CheckpointFormat::kBF16;
  MoeLayerConfig layer;  // E, k, H, I, routing, activation (layer-independent in every model here)
};
CheckpointInfo read_checkpoint_info(const std::string& dir);

struct MoeLayer {
  int layer_index = 0;
  CheckpointFormat format = CheckpointFormat::kBF16;
  MoeLayerConfig config;
  MoeWeights weights;  // host
  RouterWeights router;
};

// Loads layer `layer` of the checkpoint directory `dir` (host tensors, copied out of the mapping).
MoeLayer load_moe_layer(const std::string& dir, int layer, const MoeLoadOptions& options = {});
// The same with an already opened checkpoint and its info.
MoeLayer load_moe_layer(const Checkpoint& checkpoint, const CheckpointInfo& info, int layer,
                        const MoeLoadOptions& options = {});

// The indices of the layers that have an MoE block (a router tensor), ascending.
std::vector<int> moe_layer_indices(const Checkpoint& checkpoint, const CheckpointInfo& info);

}  // namespace moekit::io
