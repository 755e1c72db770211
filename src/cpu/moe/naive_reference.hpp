// Internal: an independent float64 implementation of the MoE layer, the yardstick for the fp32
// CPU reference and for every backend. It shares only the normative pieces (quantize /
// dequantize of formats.md) with the fp32 reference: per token and slot, it dequantizes nothing
// itself beyond the reference dequantize, and evaluates the GEMMs, biases, activations and the
// combine in float64 with its own straightforward loops.
#pragma once

#include <vector>

#include "moekit/moe/reference.hpp"

namespace moekit::cpu {

// Same inputs and semantics as moe_reference_routed(); returns out [M, H] as float64.
// In kEmulateActivationQuant mode the GEMM inputs are rounded to fp32 and quantized with the
// same quant op (a float64 pipeline with fp32 quantization points).
std::vector<double> moe_naive_reference(const TensorView& hidden_states, const TensorView& topk_ids,
                                        const TensorView& topk_weights,
                                        const MoeLayerConfig& config, const MoeWeights& weights,
                                        const MoeReferenceOptions& options = {});

// ||out - ref|| / ||ref|| (0 when both are zero; +inf when only ref is zero), and max |out - ref|.
struct ErrorStats {
  double relative_l2 = 0.0;
  double max_abs = 0.0;
};
ErrorStats compare_to_reference(const float* out, const double* ref, std::int64_t n);

}  // namespace moekit::cpu
