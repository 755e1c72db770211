// The CPU reference MoE layer: route -> per-expert GEMM1 (+bias) -> activation -> GEMM2 (+bias)
// -> weight and sum over the top-k. The normative result every backend is checked against.
//
// Numerics:
//  - Weights are dequantized exactly (the quant reference dequantize) to fp32, once per call and
//    expert touched (in batches of experts bounded by MoeReferenceOptions::dequant_budget_bytes).
//  - kWeightOnly (W4A16 / W8A16 / BF16): GEMM inputs are used as given (fp32; bf16 inputs are
//    widened exactly); products accumulate in fp32; the intermediate is fp32.
//  - kEmulateActivationQuant (W4A4 / W8A8): each GEMM input is quantized and dequantized with the
//    activation QuantConfig before the GEMM, as a kernel with quantized activations sees it.
//    Per-tensor scales cover the whole GEMM input of the layer (all tokens; for GEMM2 the whole
//    intermediate of all experts). NVFP4 uses the static ENCODE scales a13_scale / a2_scale when
//    the weights carry them, dynamic amax otherwise; FP8 per-tensor uses static DECODE scales the
//    same way. Other schemes are dynamic.
//  - Top-k weighting and the sum over the k run in fp32 in slot order (deterministic).
//  - Llama4 routing (routing_weight_on_input) multiplies the expert input by the router weight
//    and sums the expert outputs with weight 1.
#pragma once

#include <vector>

#include <cstdint>
#include <optional>
#include <string_view>

#include "moekit/core/tensor.hpp"
#include "moekit/moe/layer_config.hpp"
#include "moekit/moe/weights.hpp"

namespace moekit {

enum class MoeNumerics : std::uint8_t { kWeightOnly, kEmulateActivationQuant };
std::string_view numerics_name(MoeNumerics n);      // "w4a16", "emulate"
MoeNumerics parse_numerics(std::string_view name);  // throws listing the valid names

struct MoeReferenceOptions {
  MoeNumerics numerics = MoeNumerics::kWeightOnly;
  // Activation quantization for kEmulateActivationQuant; default_activation_quant() if unset.
  std::optional<QuantConfig> activation_quant;
  // Upper bound on the dequantized fp32 expert matrices alive at once (batches of experts; at
  // least one expert). The result does not depend on it.
  std::int64_t dequant_budget_bytes = std::int64_t{1} << 30;
};

// The activation scheme a W?A? kernel pairs with a weight scheme: NVFP4 -> NVFP4, MXFP4 -> MXFP8
// (W4A8), FP8 128x128 -> FP8 1x128 (DeepSeek), FP8 per-tensor -> FP8 per-tensor, BF16 -> BF16.
QuantConfig default_activation_quant(QuantScheme weight_scheme);
// The activation quantization the emulation applies: options.activation_quant if set, else
// default_activation_quant(weight_scheme).
QuantConfig emulated_activation_quant(const MoeReferenceOptions& options,
                                      QuantScheme weight_scheme);

// Relative-L2 bound of the fp32 reference vs the float64 one (naive_reference) when both emulate
// activation quantization: an intermediate element on a rounding boundary may take neighbouring
// codes in the two, which weighs more on small problems. activation_scheme: the emulated
// activation quantization; requantized_elements: the intermediate's size (M x top-k x I).
double emulation_error_bound(QuantScheme activation_scheme, std::int64_t requantized_elements);

// logits = hidden_states @ router.weight^T (+ router.bias): [M, E] f32, fp32 accumulation.
Tensor router_logits_reference(const TensorView& hidden_states, const RouterWeights& router);

// hidden_states: [M, H] f32 or bf16; router_logits: [M, E] f32 or bf16; correction_bias: [E] f32
// iff routing_uses_bias; out: [M, H] f32 (every element written). All host, contiguous.
void moe_reference(const TensorView& hidden_states, const TensorView& router_logits,
                   const TensorView& correction_bias, const MoeLayerConfig& config,
                   const MoeWeights& weights, const TensorView& out,
                   const MoeReferenceOptions& options = {});

// Precomputed routing: topk_ids i32 [M, k] in [0, E), topk_weights f32 [M, k].
void moe_reference_routed(const TensorView& hidden_states, const TensorView& topk_ids,
                          const TensorView& topk_weights, const MoeLayerConfig& config,
                          const MoeWeights& weights, const TensorView& out,
                          const MoeReferenceOptions& options = {});

// An independent float64 implementation of the layer, the yardstick for the fp32 reference above
// and for every backend. It shares only the normative quantize / dequantize (formats.md) with the
// fp32 reference and evaluates the GEMMs, biases, activations and the combine in float64 with its
// own loops. Same inputs and semantics as moe_reference_routed(); returns out [M, H] as float64.
// In kEmulateActivationQuant mode the GEMM inputs are rounded to fp32 and quantized with the same
// quantize op (a float64 pipeline with fp32 quantization points).
std::vector<double> moe_reference_float64(const TensorView& hidden_states,
                                          const TensorView& topk_ids,
                                          const TensorView& topk_weights,
                                          const MoeLayerConfig& config, const MoeWeights& weights,
                                          const MoeReferenceOptions& options = {});

// ||out - ref|| / ||ref|| (0 when both are zero; +inf when only ref is zero), and max |out - ref|.
struct ErrorStats {
  double relative_l2 = 0.0;
  double max_abs = 0.0;
};
ErrorStats compare_to_reference(const float* out, const double* ref, std::int64_t n);

// Checks that config and weights describe the same layer (E, H, I, gated, biases); throws
// moekit::Error naming the field.
void check_layer_matches_weights(const MoeLayerConfig& config, const MoeWeights& weights);

}  // namespace moekit
