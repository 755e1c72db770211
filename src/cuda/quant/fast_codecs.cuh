// Device-only fast paths of the element codecs of moekit/quant/codecs.hpp, for the quantize kernels.
// They must return exactly what the normative scalar codecs return, for every fp32 input: that is
// proved by tests/cuda/quant/fast_codecs_test.cu, which runs both over all 2^32 bit patterns.
//
// Why they exist: the quantize kernels are memory-bound only if the per-byte instruction count is
// low; the portable codecs cost ~20 instructions per element (threshold sums, software rounding).
//  * e4m3: SM89+ has cvt.rn.satfinite.e4m3x2.f32 (RN-even, finite overflow and Inf -> +-448, the
//    spec's rounding); only NaN differs (the spec canonicalizes to 0x7F), fixed per 4 bytes.
//  * e2m1 (no FP4 cvt below SM100): round-to-odd + the same e4m3 cvt + a 256-entry table
//    (see kE2m1OfE4m3): ~5 instructions per element instead of ~20.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "moekit/quant/codecs.hpp"

namespace moekit::cuda::quant_detail {

// Four fp32 values -> four e4m3 bytes straight from the hardware, a in the lowest byte: RN-even,
// satfinite; a NaN may come out as 0x7F or 0xFF.
__device__ __forceinline__ std::uint32_t e4m3x4_raw(float a, float b, float c, float d) {
  std::uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c));
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// Four fp32 values -> four e4m3 bytes, bit-identical to float_to_e4m3.
__device__ __forceinline__ std::uint32_t e4m3x4(float a, float b, float c, float d) {
  const std::uint32_t w = e4m3x4_raw(a, b, c, d);
  // A NaN byte (0x7F or 0xFF; satfinite never produces them from numbers) becomes 0x7F.
  const std::uint32_t nan = __vcmpeq4(w & 0x7F7F7F7Fu, 0x7F7F7F7Fu);
  return w & ~(nan & 0x80808080u);
}

// One fp32 value -> its e4m3 byte, bit-identical to float_to_e4m3 (one cvt; NaN -> 0x7F).
__device__ __forceinline__ std::uint32_t e4m3_byte(float x) {
  const std::uint32_t b = e4m3x4_raw(x, 0.0f, 0.0f, 0.0f) & 0xFFu;
  return (b & 0x7Fu) == 0x7Fu ? 0x7Fu : b;
}

// e2m1 through the e4m3 conversion: round-to-odd to e4m3's precision, convert exactly, look up.
// RN_p(RO_q(x)) == RN_p(x) when q >= p + 2 significant bits (round-to-odd makes double rounding
// innocuous): e4m3 has q = 4, e2m1 p = 2. RO keeps 3 mantissa bits and ORs the sticky bit into the
// last one; the result is exactly representable in e4m3 wherever it matters (|x| in [2^-6, 448]:
// below, the e2m1 code is +-0 whatever e4m3 does; above, cvt saturates to 448 -> 6), so the
// hardware conversion does not round again, and a 256-entry table maps each e4m3 byte (NaN bytes
// included) to its e2m1 code: kE2m1OfE4m3[b] = float_to_e2m1(e4m3_to_float(b)). The composite is
// proved equal to float_to_e2m1 for all 2^32 fp32 inputs (FastCodecs test; also checked on the CPU
// with the software e4m3 conversion).
static __device__ const std::uint8_t kE2m1OfE4m3[256] = {
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0,
    0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x1, 0x1, 0x1, 0x1, 0x1, 0x1, 0x1,
    0x1, 0x1, 0x1, 0x1, 0x2, 0x2, 0x2, 0x2, 0x2, 0x2, 0x2, 0x3, 0x3, 0x3, 0x4, 0x4,
    0x4, 0x4, 0x4, 0x5, 0x5, 0x5, 0x6, 0x6, 0x6, 0x6, 0x6, 0x7, 0x7, 0x7, 0x7, 0x7,
    0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7,
    0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7,
    0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7, 0x7,
    0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8,
    0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8,
    0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x8, 0x9, 0x9, 0x9, 0x9, 0x9, 0x9, 0x9,
    0x9, 0x9, 0x9, 0x9, 0xA, 0xA, 0xA, 0xA, 0xA, 0xA, 0xA, 0xB, 0xB, 0xB, 0xC, 0xC,
    0xC, 0xC, 0xC, 0xD, 0xD, 0xD, 0xE, 0xE, 0xE, 0xE, 0xE, 0xF, 0xF, 0xF, 0xF, 0xF,
    0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF,
    0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF,
    0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0xF, 0x7,
};

// Round-to-odd to 3 mantissa bits: truncate, and set bit 20 if any lower bit was set. NaN stays
// NaN (its top mantissa bits or the sticky bit stay set).
__device__ __forceinline__ float round_to_odd_m3(float x) {
  const std::uint32_t u = __float_as_uint(x);
  return __uint_as_float((u & 0xFFF00000u) | (((u & 0xFFFFFu) + 0xFFFFFu) & 0x100000u));
}

// One fp32 value -> e2m1 code through `table` (kE2m1OfE4m3 or a shared-memory copy of it).
__device__ __forceinline__ std::uint32_t e2m1_code(float x, const std::uint8_t* table) {
  return table[e4m3x4_raw(round_to_odd_m3(x), 0.0f, 0.0f, 0.0f) & 0xFFu];
}

// Eight fp32 values -> eight e2m1 codes packed into 4 bytes, element 2j in the low nibble.
__device__ __forceinline__ std::uint32_t e2m1x8(const float (&v)[8], const std::uint8_t* table) {
  const std::uint32_t w0 = e4m3x4_raw(round_to_odd_m3(v[0]), round_to_odd_m3(v[1]),
                                      round_to_odd_m3(v[2]), round_to_odd_m3(v[3]));
  const std::uint32_t w1 = e4m3x4_raw(round_to_odd_m3(v[4]), round_to_odd_m3(v[5]),
                                      round_to_odd_m3(v[6]), round_to_odd_m3(v[7]));
  std::uint32_t out = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out |= static_cast<std::uint32_t>(table[(w0 >> (8 * i)) & 0xFFu]) << (4 * i);
    out |= static_cast<std::uint32_t>(table[(w1 >> (8 * i)) & 0xFFu]) << (4 * i + 16);
  }
  return out;
}

// Fills `s_table` (256 bytes of shared memory) with kE2m1OfE4m3, computed from its definition
// (float_to_e2m1(e4m3_to_float(b)), equal for all 256 bytes: FastCodecs.E2m1TableComputed), all
// threads of the CTA; the caller synchronizes before use. Computed, not loaded: the FP4 row-group
// kernel issues its first row copies first, and a global load of the table queued behind them
// (H200, per-token NVFP4 4682 x 7168: 2.5 us of a 30 us kernel).
__device__ __forceinline__ void fill_e2m1_table(std::uint8_t* s_table) {
  for (int i = static_cast<int>(threadIdx.x); i < 256; i += static_cast<int>(blockDim.x))
    s_table[i] = float_to_e2m1(e4m3_to_float(static_cast<std::uint8_t>(i)));
}

// MX block scale (codecs.hpp mxfp4_block_scale / mxfp8_block_scale, kElemEmax = 2 / 8) without
// branches: the same e8m0 byte and multiplier for every vmax (NaN and Inf included; proved for all
// 2^32 inputs by the FastCodecs test).
template <int kElemEmax>
__device__ __forceinline__ float mx_block_scale_fast(float vmax, MxRule rule, std::uint8_t* e8m0) {
  std::uint32_t b;
  if (rule == MxRule::kRceil) {
    // e8m0_ceil(RN(vmax / (elem max))): round the exponent up unless the value is a power of two
    // (or at most 2^-127, code 0); NaN -> 0xFF; saturate at 254.
    const std::uint32_t a =
        __float_as_uint(__fmul_rn(vmax, kElemEmax == 2 ? kRcp6 : kRcp448)) & 0x7FFFFFFFu;
    const std::uint32_t e = a >> 23, m = a & 0x7FFFFFu;
    const std::uint32_t up = (m != 0u && (e != 0u || m > 0x400000u)) ? 1u : 0u;
    b = a > 0x7F800000u ? 0xFFu : min(e + up, 254u);
  } else {
    // OCP FLOOR: biased exponent of vmax minus the element emax, clamped to [0, 254].
    const std::uint32_t e = (__float_as_uint(vmax) & 0x7FFFFFFFu) >> 23;
    b = e <= static_cast<std::uint32_t>(kElemEmax) ? 0u : min(e - kElemEmax, 254u);
  }
  *e8m0 = static_cast<std::uint8_t>(b);
  // exp2_int(127 - b): normal for b <= 253, 2^-127 / 2^-128 (subnormal) for b = 254 / 255.
  const std::uint32_t bits = b <= 253u ? (254u - b) << 23 : 1u << (276u - b);
  return vmax != 0.0f ? __uint_as_float(bits) : 0.0f;
}

// e4m3 byte -> fp32 through the SM89+ e4m3x2 -> f16x2 conversion (exact: every e4m3 value is an
// f16 value) and f16 -> f32 (exact): e4m3_to_float for every number; a NaN byte (0x7F / 0xFF)
// gives some NaN (the codec's payload is not kept: nvfp4_block_scale_fast only divides by it,
// and every NaN becomes FLT_MAX there).
__device__ __forceinline__ float e4m3_to_float_fast(std::uint8_t b) {
  std::uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(b)));
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xFFFFu)));
}

// The element multiplier of an NVFP4 block (vmax != 0) whose scale byte is b:
// min(RN(1 / RN(e4m3(b) * inv_gs)), FLT_MAX) (NaN bytes: FLT_MAX).
// RN(1 / d) is the correctly rounded reciprocal: rcp.rn (fewer instructions than div.rn, the same
// bits; the FastCodecs test proves the block scale for every vmax).
__device__ __forceinline__ float nvfp4_out_scale_of_byte(std::uint8_t b, float inv_gs) {
  const float denom = __fmul_rn(e4m3_to_float_fast(b), inv_gs);
  const float out_scale = __frcp_rn(denom);
  return out_scale < kFltMax ? out_scale : kFltMax;
}

// NVFP4 block scale (codecs.hpp nvfp4_block_scale) with the per-tensor (or per-row) invariants
// gs_c6 = RN(gs * RN(1/6)) and inv_gs = RN(1 / gs) computed once by the caller: the same operations
// with the same roundings, so the same bits.
__device__ __forceinline__ float nvfp4_block_scale_fast(float vmax, float gs_c6, float inv_gs,
                                                        std::uint8_t* sf_byte) {
  const float sf = vmax != 0.0f ? __fmul_rn(vmax, gs_c6) : 0.0f;
  const std::uint8_t b = static_cast<std::uint8_t>(e4m3_byte(sf));
  *sf_byte = b;
  if (vmax == 0.0f) return 0.0f;
  return nvfp4_out_scale_of_byte(b, inv_gs);
}

// nvfp4_block_scale_fast with the multipliers of one gs precomputed per scale byte
// (table[b] = nvfp4_out_scale_of_byte(b, inv_gs)): the same bits, one load instead of a division.
__device__ __forceinline__ float nvfp4_block_scale_from_table(float vmax, float gs_c6,
                                                              const float* table,
                                                              std::uint8_t* sf_byte) {
  const float sf = vmax != 0.0f ? __fmul_rn(vmax, gs_c6) : 0.0f;
  const std::uint32_t b = e4m3_byte(sf);
  *sf_byte = static_cast<std::uint8_t>(b);
  return vmax != 0.0f ? table[b] : 0.0f;
}

}  // namespace moekit::cuda::quant_detail
