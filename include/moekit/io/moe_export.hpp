// The inverse of moe_loader.hpp: one MoE layer (MoeWeights + RouterWeights) as the tensors of a
// checkpoint in a given format, and the quantization of bf16 layers the way each format's
// producer does it (used by `moekit quantize` and the loader tests).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "moekit/io/moe_loader.hpp"
#include "moekit/io/safetensors.hpp"

namespace moekit::io {

// Tensor naming of the exported layer (see moe_loader.hpp):
//   kMixtral  model.layers.{L}.block_sparse_moe: experts.{e}.{w1,w3,w2}, router gate
//   kQwen     model.layers.{L}.mlp: experts.{e}.{gate,up,down}_proj, router gate (also DeepSeek)
//   kGptOss   model.layers.{L}.mlp: router "router" (+ bias)
// kMXFP4 always writes fused gpt-oss expert tensors (experts.gate_up_proj_blocks, ...) under the
// naming's prefix; the other formats always write per-expert tensors.
enum class ExpertNaming : std::uint8_t { kMixtral, kQwen, kGptOss };

struct ExportedTensor {
  std::string name;
  Tensor tensor;
  std::string dtype;  // safetensors dtype override ("U8" for packed FP4 / e8m0), or empty
};

// The checkpoint tensors of one layer. `weights.quant` must match `format` (bf16 for kBF16, NVFP4
// linear for both NVFP4 formats, MXFP4 linear, FP8 128x128). ModelOpt stores DECODE scales: each
// one is chosen so that the loader's 1/x gives back the ENCODE scale bit for bit, and export fails
// naming the tensor when no such fp32 value exists (quantize_for_checkpoint never produces one).
std::vector<ExportedTensor> export_moe_layer(const MoeWeights& weights, const RouterWeights& router,
                                             CheckpointFormat format, int layer,
                                             ExpertNaming naming);

// Views of exported tensors, for write_safetensors.
std::vector<NamedTensor> named_views(const std::vector<ExportedTensor>& tensors);

// Activation amax for the static input scales of NVFP4 checkpoints: amax13 of the layer input,
// amax2 of the GEMM2 input (after the activation). Both > 0.
struct InputAmax {
  float amax13 = 0.0f;
  float amax2 = 0.0f;
};

// Quantizes bf16 master weights (quant kBF16) into the scheme of `format` as its producer does:
//   ModelOpt NVFP4: weight_scale_2 = amax(w13 of expert e) / 2688 (gate and up together),
//                   gs = 1 / weight_scale_2, codes from the reference quantize with that gs;
//                   a13/a2 = 1 / (amax / 2688).
//   compressed-tensors NVFP4: gs = 2688 / amax (the reference quantizer's own); a13 = 2688/amax.
//   MXFP4 (RCEIL), FP8 128x128: the reference quantizer.
// `input_amax` is used by the NVFP4 formats only (nullptr: no input scales).
MoeWeights quantize_for_checkpoint(const MoeWeights& master, CheckpointFormat format,
                                   const InputAmax* input_amax = nullptr);

}  // namespace moekit::io
