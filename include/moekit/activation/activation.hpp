// Expert activations. Gated activations map [T, 2I] -> [T, I]; GEMM1's output holds the gate in
// columns [0, I) and the up projection in [I, 2I) ("halves"), unless kInterleaved (gpt-oss
// checkpoints: gate at even, up at odd columns). ReLU^2 maps [T, I] -> [T, I] (no mul).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moekit/core/tensor.hpp"

namespace moekit {

enum class Activation : std::uint8_t { kSiluAndMul, kGeluErfAndMul, kGeluTanhAndMul, kSwigluOai, kRelu2 };
enum class GateUpLayout : std::uint8_t { kHalves, kInterleaved };

struct ActivationConfig {
  Activation kind = Activation::kSiluAndMul;
  float swiglu_alpha = 1.702f;  // SwiGLU-OAI
  float swiglu_limit = 7.0f;    // SwiGLU-OAI
  GateUpLayout layout = GateUpLayout::kHalves;
  std::string str() const;
};

std::string_view activation_name(Activation a);  // "silu", "gelu_erf", "gelu_tanh", "swiglu_oai", "relu2"
Activation parse_activation(std::string_view name);
bool is_gated(Activation a);

// in: [T, 2I] (gated) or [T, I]; f32. out: [T, I] f32.
void activation_reference(const TensorView& in, const ActivationConfig& config, const TensorView& out);

}  // namespace moekit
