// Bit-exact scalar codecs and per-block scale math shared by the CPU reference and the CUDA
// kernels (docs/formats.md sections 1-5). Everything here is MOEKIT_HD, header-only, branch-light
// and uses no CUDA header and no std:: function, so one source yields the same bits everywhere.
//
// Floating-point contract for kernel authors (why the helpers below look the way they do):
//  * Every fp32 operation of the spec is ONE rounding step. The products/quotients go through
//    mul_rn / div_rn, which are __fmul_rn / __fdiv_rn in device code: never contracted into an
//    FMA, IEEE-exact even under --use_fast_math. There is no a*b+c anywhere in the spec path.
//  * Do not build codec users with -ftz=true (or --use_fast_math): MX scales reach 2^-127 and
//    dequantized values can be fp32 subnormals, which FTZ would flush.
//  * vmax / amax are NaN-ignoring maxima of |x| (absmax_accumulate); the max is exact, so any
//    reduction order gives the same bits.
#pragma once

#include <cstdint>

#include "moekit/core/host_device.hpp"

namespace moekit {

// ---------------------------------------------------------------------------------------------
// Bit casts and exact fp32 primitives.
// ---------------------------------------------------------------------------------------------
MOEKIT_HD std::uint32_t f32_to_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(std::uint32_t, x);
#endif
}
MOEKIT_HD float bits_to_f32(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// One IEEE fp32 rounding each (see the contract above).
MOEKIT_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MOEKIT_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

MOEKIT_HD bool f32_is_nan(float x) { return (f32_to_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
MOEKIT_HD bool f32_is_finite(float x) { return (f32_to_bits(x) & 0x7F800000u) != 0x7F800000u; }
MOEKIT_HD float f32_abs(float x) { return bits_to_f32(f32_to_bits(x) & 0x7FFFFFFFu); }

// vmax/amax accumulation: max(m, |x|) ignoring NaN (a NaN comparison is false). m starts at 0.
MOEKIT_HD float absmax_accumulate(float m, float x) {
  const float a = f32_abs(x);
  return a > m ? a : m;
}

// 2^e exactly for e in [-149, 127]; 0 below, +Inf above.
MOEKIT_HD float exp2_int(int e) {
  if (e > 127) return bits_to_f32(0x7F800000u);
  if (e >= -126) return bits_to_f32(static_cast<std::uint32_t>(e + 127) << 23);
  if (e >= -149) return bits_to_f32(1u << (e + 149));
  return 0.0f;
}

constexpr float kFltMax = 3.40282346638528859812e+38f;
// RN(1/6): fp32 bits 0x3E2AAAAB (formats.md section 3).
constexpr float kRcp6 = 0.16666667163372039794921875f;
// RN(1/448) (formats.md section 5, MXFP8).
constexpr float kRcp448 = 1.0f / 448.0f;
constexpr float kE2M1Max = 6.0f;
constexpr float kE4M3Max = 448.0f;
// 2688 = 448 * 6: the NVFP4 global-scale numerator.
constexpr float kNvfp4GlobalNumerator = 2688.0f;
// FP8 per-token scale floor 1/(448*512) (vLLM's min_scaling_factor).
constexpr float kFp8TokenScaleFloor = 1.0f / (448.0f * 512.0f);
// FP8 DeepSeek block schemes: s = max(amax, 1e-10) / 448.
constexpr float kFp8BlockAmaxFloor = 1e-10f;

// ---------------------------------------------------------------------------------------------
// FP4 E2M1 (section 1). A code is 4 bits [s e1 e0 m] in the low nibble of a byte.
// ---------------------------------------------------------------------------------------------
// RN-even with saturation to +-6; -0 and tiny negatives keep the sign (0x8); NaN -> 0x7 (positive
// max, as cuda_fp4.hpp's host emulation). The sum of threshold tests is the table of section 1.
MOEKIT_HD std::uint8_t float_to_e2m1(float x) {
  const std::uint32_t u = f32_to_bits(x);
  const std::uint32_t a_bits = u & 0x7FFFFFFFu;
  if (a_bits > 0x7F800000u) return 0x7;
  const float a = bits_to_f32(a_bits);
  const std::uint32_t c = static_cast<std::uint32_t>(a > 0.25f) + (a >= 0.75f) + (a > 1.25f) +
                          (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return static_cast<std::uint8_t>(c | ((u >> 28) & 0x8u));
}

MOEKIT_HD float e2m1_to_float(std::uint8_t code) {
  const std::uint32_t c = code & 0x7u;
  // c = [e1 e0 m]: c == 1 is the subnormal 0.5; otherwise 2^(e-1) * (1 + m/2).
  std::uint32_t bits = c == 0   ? 0u
                       : c == 1 ? (126u << 23)
                                : (((c >> 1) + 126u) << 23) | ((c & 1u) << 22);
  bits |= static_cast<std::uint32_t>(code & 0x8u) << 28;
  return bits_to_f32(bits);
}

// Two codes per byte: element 2j (lo) in the low nibble, 2j+1 (hi) in the high nibble.
MOEKIT_HD std::uint8_t pack_e2m1x2(std::uint8_t lo, std::uint8_t hi) {
  return static_cast<std::uint8_t>((lo & 0xFu) | ((hi & 0xFu) << 4));
}

// ---------------------------------------------------------------------------------------------
// FP8 E4M3 "fn" (section 2): bias 7, max 448 (0x7E), NaN 0x7F/0xFF, no Inf.
// ---------------------------------------------------------------------------------------------
// RN-even, satfinite: finite overflow and +-Inf -> +-448 (|x| == 464 is a tie and rounds to 448).
// NaN -> 0x7F (cuda_fp8.hpp canonicalizes NaN to positive). Underflow keeps the sign.
MOEKIT_HD std::uint8_t float_to_e4m3(float x) {
  const std::uint32_t u = f32_to_bits(x);
  const std::uint32_t sign = (u >> 24) & 0x80u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;
  if (a > 0x43E80000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // > 464
  const std::uint32_t exp = a >> 23;
  std::uint32_t q;
  if (exp >= 121u) {
    // Normal in e4m3 (|x| >= 2^-6): rebias by 120 and round off 20 mantissa bits (RN-even; a
    // carry into the exponent is the right answer).
    const std::uint32_t v = a - (120u << 23);
    q = (v + 0x7FFFFu + ((v >> 20) & 1u)) >> 20;
  } else {
    // Subnormal in e4m3: q = RN(|x| * 2^9) in 0..8 from the 24-bit significand.
    const std::uint32_t shift = 141u - exp;  // >= 21
    if (exp == 0u || shift > 24u) {
      q = 0;  // |x| < 2^-10 (and 2^-10 itself ties to 0 below)
    } else {
      const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
      q = m >> shift;
      const std::uint32_t rem = m & ((1u << shift) - 1u);
      const std::uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (q & 1u))) ++q;
    }
  }
  return static_cast<std::uint8_t>(sign | q);
}

MOEKIT_HD float e4m3_to_float(std::uint8_t code) {
  const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
  const std::uint32_t e = (code >> 3) & 0xFu;
  const std::uint32_t m = code & 0x7u;
  if ((code & 0x7Fu) == 0x7Fu) return bits_to_f32(sign | 0x7FC00000u);
  if (e == 0) {
    // m * 2^-9: exact in fp32 (a small integer times a power of two).
    const float v = mul_rn(static_cast<float>(m), 0.001953125f);
    return bits_to_f32(f32_to_bits(v) | sign);
  }
  return bits_to_f32(sign | ((e + 120u) << 23) | (m << 20));
}

// ---------------------------------------------------------------------------------------------
// UE8M0 (section 2): value 2^(b-127), b = 0..254, 0xFF = NaN.
// ---------------------------------------------------------------------------------------------
// Round toward +Inf, saturating (= __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)).
// The sign is ignored (|x|, as the toolkit does); NaN -> 0xFF; +-Inf -> 254.
MOEKIT_HD std::uint8_t e8m0_ceil(float x) {
  const std::uint32_t a = f32_to_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0xFF;
  const std::uint32_t e = a >> 23;
  const std::uint32_t m = a & 0x7FFFFFu;
  // 2^-127 (code 0) is the fp32 subnormal with mantissa 0x400000: anything up to it stays 0.
  const bool up = m != 0 && !(e == 0 && m <= 0x400000u);
  const std::uint32_t b = e + (up ? 1u : 0u);
  return static_cast<std::uint8_t>(b > 254u ? 254u : b);
}

// Round toward zero, saturating (= __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero)):
// the biased exponent of |x| (0 for zero and fp32 subnormals); NaN -> 0xFF; Inf -> 254.
MOEKIT_HD std::uint8_t e8m0_floor(float x) {
  const std::uint32_t a = f32_to_bits(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0xFF;
  const std::uint32_t e = a >> 23;
  return static_cast<std::uint8_t>(e > 254u ? 254u : e);
}

MOEKIT_HD float e8m0_to_float(std::uint8_t b) {
  if (b == 0xFF) return bits_to_f32(0x7FC00000u);
  return exp2_int(static_cast<int>(b) - 127);
}

// OCP MX v1.0 FLOOR rule (section 4): biased shared exponent floor(log2(vmax)) - elem_emax + 127,
// clamped to [0, 254]. elem_emax = 2 for E2M1, 8 for E4M3. fp32 subnormals and 0 have
// floor(log2) <= -127, so they clamp to 0. An infinite vmax gives 255 - elem_emax.
MOEKIT_HD std::uint8_t e8m0_floor_exponent(float vmax, int elem_emax) {
  const int e = static_cast<int>((f32_to_bits(vmax) & 0x7FFFFFFFu) >> 23);  // biased
  const int b = e == 0 ? 0 : e - elem_emax;
  return static_cast<std::uint8_t>(b < 0 ? 0 : b > 254 ? 254 : b);
}

// ---------------------------------------------------------------------------------------------
// BF16 and FP16 (raw 16-bit patterns).
// ---------------------------------------------------------------------------------------------
MOEKIT_HD float bf16_to_float(std::uint16_t h) {
  return bits_to_f32(static_cast<std::uint32_t>(h) << 16);
}
// RN-even; overflow -> Inf; NaN stays NaN (quieted, sign and top payload kept).
MOEKIT_HD std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = f32_to_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

MOEKIT_HD float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  if (e == 0x1F) return bits_to_f32(sign | 0x7F800000u | (m << 13));  // Inf / NaN
  if (e == 0) {
    // Subnormal: m * 2^-24, exact.
    const float v = mul_rn(static_cast<float>(m), 5.9604644775390625e-8f);
    return bits_to_f32(f32_to_bits(v) | sign);
  }
  return bits_to_f32(sign | ((e + 112u) << 23) | (m << 13));
}
// RN-even; overflow -> Inf; subnormals rounded correctly; NaN stays NaN (quieted).
MOEKIT_HD std::uint16_t float_to_f16(float x) {
  const std::uint32_t u = f32_to_bits(x);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520 -> Inf
  const std::uint32_t exp = a >> 23;
  std::uint32_t h;
  if (exp >= 113u) {
    // Normal in f16 (|x| >= 2^-14): rebias by 112, round off 13 bits.
    const std::uint32_t v = a - (112u << 23);
    h = (v + 0xFFFu + ((v >> 13) & 1u)) >> 13;
  } else {
    // Subnormal in f16: RN(|x| * 2^24) from the 24-bit significand.
    const std::uint32_t shift = 126u - exp;  // >= 14
    if (exp == 0u || shift > 24u) {
      h = 0;
    } else {
      const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
      h = m >> shift;
      const std::uint32_t rem = m & ((1u << shift) - 1u);
      const std::uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (h & 1u))) ++h;
    }
  }
  return static_cast<std::uint16_t>(sign | h);
}

// ---------------------------------------------------------------------------------------------
// Per-tensor / per-block scale math (sections 3-5). Each returns the multiplier ("out_scale") to
// apply to every element of the block before the element conversion, and writes the scale byte.
// ---------------------------------------------------------------------------------------------

// NVFP4 global (encode) scale from a tensor's (or a row's) amax: 2688 / amax, 1 when amax == 0.
MOEKIT_HD float nvfp4_global_scale(float amax) {
  return amax == 0.0f ? 1.0f : div_rn(kNvfp4GlobalNumerator, amax);
}

// NVFP4 block (section 3, steps 2-4). gs is the ENCODE global scale.
MOEKIT_HD float nvfp4_block_scale(float vmax, float gs, std::uint8_t* sf_byte) {
  float sf = 0.0f;
  if (vmax != 0.0f) {
    const float gs_c6 = mul_rn(gs, kRcp6);
    sf = mul_rn(vmax, gs_c6);
  }
  const std::uint8_t b = float_to_e4m3(sf);
  *sf_byte = b;
  if (vmax == 0.0f) return 0.0f;
  const float sfq = e4m3_to_float(b);
  const float inv_gs = div_rn(1.0f, gs);
  const float denom = mul_rn(sfq, inv_gs);
  const float out_scale = div_rn(1.0f, denom);
  // fminf(out_scale, FLT_MAX): +Inf (SF rounded to 0: the tiny-SF edge case) and NaN -> FLT_MAX.
  return out_scale < kFltMax ? out_scale : kFltMax;
}

// One NVFP4 / MXFP4 element: e2m1(RN(x * out_scale)).
MOEKIT_HD std::uint8_t fp4_quantize_element(float x, float out_scale) {
  return float_to_e2m1(mul_rn(x, out_scale));
}

// NVFP4 dequantization: e2m1(q) * float(sf_byte) / gs (the product is exact).
MOEKIT_HD float nvfp4_dequantize_element(std::uint8_t code, std::uint8_t sf_byte, float gs) {
  return div_rn(mul_rn(e2m1_to_float(code), e4m3_to_float(sf_byte)), gs);
}

// MX rule selector for the HD helpers (mirrors moekit::ScaleRule without including scheme.hpp).
enum class MxRule : std::uint8_t { kRceil = 0, kFloor = 1 };

// MXFP4 block (section 4).
MOEKIT_HD float mxfp4_block_scale(float vmax, MxRule rule, std::uint8_t* e8m0) {
  std::uint8_t b;
  if (rule == MxRule::kRceil) {
    b = e8m0_ceil(mul_rn(vmax, kRcp6));
  } else {
    b = e8m0_floor_exponent(vmax, 2);
  }
  *e8m0 = b;
  return vmax != 0.0f ? exp2_int(127 - static_cast<int>(b)) : 0.0f;
}

// MXFP8 block (section 5). FLOOR is the OCP rule with E4M3's emax = 8 (moekit extension; the
// element conversion saturates to +-448 either way).
MOEKIT_HD float mxfp8_block_scale(float vmax, MxRule rule, std::uint8_t* e8m0) {
  std::uint8_t b;
  if (rule == MxRule::kRceil) {
    b = e8m0_ceil(mul_rn(vmax, kRcp448));
  } else {
    b = e8m0_floor_exponent(vmax, 8);
  }
  *e8m0 = b;
  return vmax != 0.0f ? exp2_int(127 - static_cast<int>(b)) : 0.0f;
}

// MXFP8 element: e4m3(clamp(x * out_scale, +-448)) (float_to_e4m3 saturates).
MOEKIT_HD std::uint8_t mxfp8_quantize_element(float x, float out_scale) {
  return float_to_e4m3(mul_rn(x, out_scale));
}

// MX dequantization: value * 2^(b-127) (exact, possibly subnormal).
MOEKIT_HD float mx_dequantize_scale(std::uint8_t e8m0) { return e8m0_to_float(e8m0); }

// FP8 per-tensor decode scale s = amax / 448; 1 when that is 0 (all-zero tensor or underflow),
// so that x / s stays defined.
MOEKIT_HD float fp8_tensor_scale(float amax) {
  const float s = div_rn(amax, kE4M3Max);
  return s == 0.0f ? 1.0f : s;
}
// FP8 per-token decode scale: max(amax / 448, 1 / (448 * 512)).
MOEKIT_HD float fp8_token_scale(float amax) {
  const float s = div_rn(amax, kE4M3Max);
  return s > kFp8TokenScaleFloor ? s : kFp8TokenScaleFloor;
}
// FP8 DeepSeek 1x128 / 128x128 decode scale: max(amax, 1e-10) / 448.
MOEKIT_HD float fp8_block_scale(float amax) {
  return div_rn(amax > kFp8BlockAmaxFloor ? amax : kFp8BlockAmaxFloor, kE4M3Max);
}
// FP8 element with a decode scale s: e4m3(clamp(x / s, +-448)) (IEEE division).
MOEKIT_HD std::uint8_t fp8_quantize_element(float x, float s) {
  return float_to_e4m3(div_rn(x, s));
}

}  // namespace moekit
