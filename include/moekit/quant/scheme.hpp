// Quantization schemes, scale layouts and scale rules (normative definitions: docs/formats.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace moekit {

enum class QuantScheme : std::uint8_t {
  kBF16,             // not quantized: bf16 values, no scales
  kFP8PerTensor,     // e4m3 values, fp32 decode scale per matrix        [B] (or [1])
  kFP8PerToken,      // e4m3 values, fp32 decode scale per row           [B, M]
  kFP8Block1x128,    // e4m3 values, fp32 decode scale per 1x128 group   [B, M, ceil(K/128)]
  kFP8Block128x128,  // e4m3 values, fp32 decode scale per 128x128 tile  [B, ceil(M/128),
                     // ceil(K/128)]
  kMXFP8,            // e4m3 values, e8m0 scale per 32 along K
  kNVFP4,            // e2m1x2 values, e4m3 scale per 16, fp32 ENCODE global scale per matrix [B]
  kNVFP4PerToken,    // as NVFP4 but one fp32 ENCODE global scale per row [B, M]
  kMXFP4,            // e2m1x2 values, e8m0 scale per 32
};

enum class ScaleLayout : std::uint8_t { kLinear, kSwizzled128x4, kSwizzled8x4 };

// How MX formats pick the shared exponent (formats.md section 4): RCEIL (default: FlashInfer,
// TensorRT-LLM, cuBLAS) or the OCP MX v1.0 FLOOR rule.
enum class ScaleRule : std::uint8_t { kRceil, kFloor };

// Where a quantize / dequantize op runs. `reference` (CPU) is normative; `cuda` is byte-identical.
enum class QuantBackend : std::uint8_t { kReference, kCuda };

struct QuantConfig {
  QuantScheme scheme = QuantScheme::kBF16;
  // Block-scaled schemes only (MXFP8, NVFP4*, MXFP4); other schemes must keep kLinear.
  ScaleLayout layout = ScaleLayout::kLinear;
  // MX schemes only; other schemes must keep kRceil (infer_quant_shapes / quantize throw).
  ScaleRule rule = ScaleRule::kRceil;
  // "nvfp4/swizzled_128x4", "mxfp4/linear/floor", "fp8_1x128": the scheme, then the layout for
  // block-scaled schemes, then the rule for MX schemes. parse_quant_config() reads it back.
  std::string str() const;
  bool operator==(const QuantConfig&) const = default;
};

// "bf16", "fp8_tensor", "fp8_token", "fp8_1x128", "fp8_block", "mxfp8", "nvfp4", "nvfp4_token",
// "mxfp4"
std::string_view scheme_name(QuantScheme s);
QuantScheme parse_scheme(std::string_view name);  // throws moekit::Error listing valid names
std::string_view layout_name(ScaleLayout l);      // "linear", "swizzled_128x4", "swizzled_8x4"
ScaleLayout parse_layout(std::string_view name);
std::string_view rule_name(ScaleRule r);  // "rceil", "floor"
ScaleRule parse_rule(std::string_view name);
std::string_view backend_name(QuantBackend b);  // "reference", "cuda"
QuantBackend parse_quant_backend(std::string_view name);
// Inverse of QuantConfig::str(). Layout and rule may be omitted (linear, rceil) and come in any
// order after the scheme; a part the scheme does not use is an error.
QuantConfig parse_quant_config(std::string_view text);

// Elements per scale along K for block-scaled schemes (16 NVFP4, 32 MX*, 128 FP8 block), 0 else.
int scale_block_size(QuantScheme s);
bool is_fp4(QuantScheme s);            // NVFP4, NVFP4PerToken, MXFP4
bool has_block_scales(QuantScheme s);  // MXFP8, NVFP4*, MXFP4 (byte scales that can be swizzled)
bool is_mx(QuantScheme s);             // MXFP8, MXFP4 (e8m0 scales, a ScaleRule applies)
bool is_fp8(QuantScheme s);            // every scheme with e4m3 values

}  // namespace moekit
