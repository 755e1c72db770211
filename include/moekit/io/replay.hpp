// Layer replay files: feed a captured MoE layer input to moekit and save what it produced.
//
// Input file (safetensors) tensor names:
//   hidden_states  [M, H] f32 | bf16 | f16     required (f16 is widened to f32)
//   router_logits  [M, E] f32 | bf16 | f16     optional
//   topk_ids       [M, k] i32 | i64            optional, with topk_weights (both or neither)
//   topk_weights   [M, k] f32 | bf16 | f16     (bf16/f16 widened to f32)
// Output file tensor names:
//   output         [M, H] f32 | bf16           required
//   topk_ids       [M, k] i32                  optional
//   topk_weights   [M, k] f32                  optional
// plus any metadata ("__metadata__": e.g. the command line, backend, checkpoint and layer).
// Shapes are checked against each other (same M) and, when given, against H and E; topk_ids
// must lie in [0, E); floating-point tensors must hold no NaN / Inf (the error counts and locates
// them). M = 0 is allowed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "moekit/core/tensor.hpp"

namespace moekit::io {

struct ReplayInputs {
  Tensor hidden_states;  // [M, H] f32 or bf16
  Tensor router_logits;  // [M, E] f32 or bf16, or absent
  Tensor topk_ids;       // [M, k] i32, or absent
  Tensor topk_weights;   // [M, k] f32, or absent
  std::map<std::string, std::string> metadata;
  std::int64_t num_tokens() const { return hidden_states.shape()[0]; }
};

// hidden_size / num_experts: expected H / E (0 = do not check). Errors name the file and tensor.
ReplayInputs read_replay_inputs(const std::string& path, std::int64_t hidden_size = 0,
                                int num_experts = 0);

// output: [M, H] f32 or bf16, host; topk_ids [M, k] i32 and topk_weights [M, k] f32 optional.
// An existing non-empty file at `path` is replaced only with `overwrite`; the file appears
// complete or not at all (staged_output.hpp).
void write_replay_outputs(const std::string& path, const TensorView& output,
                          const TensorView& topk_ids = {}, const TensorView& topk_weights = {},
                          const std::map<std::string, std::string>& metadata = {},
                          bool overwrite = false);

}  // namespace moekit::io
