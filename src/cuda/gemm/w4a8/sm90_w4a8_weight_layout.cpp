// Offline weight preparation for the SM90 W4A8 kernel (sm90_w4a8_wgmma_gemm.cuh).
//
// The kernel computes out^T = W * A^T with wgmma m64nNk32 e4m3, the weights as the register A
// operand: lane (g, t) of a warp holds, per k32 step, rows g and g + 8 at MMA-k 4t..4t+3 (a0 / a1)
// and 16 + 4t..16 + 4t + 3 (a2 / a3), byte i = k 4t + i. Unlike W4A16's layout, MMA-k here IS the
// real k, so the activations stay in their natural order (the per-token quantizer's output is read
// as is). Layout: items of 512 code bytes ([32 lanes][4 words]) per 16-row tile and 64-wide K
// chunk, ordered [E][N/128 CTA tiles][K/64 chunks][the CTA tile's 16-row tiles (8, fewer in a last
// partial one)]: a CTA's 128 rows of two consecutive chunks (one kernel stage) are one contiguous
// block, loaded by one bulk copy. Word j of lane (g, t) in chunk c holds the 4 codes of row g
// (register "A") and of row g + 8 (register "B") at k = 64c + 32 (j / 2) + 16 (j % 2) + 4t + i:
//   A byte i: magnitude (code & 7) at bits 4i..4i+2, sign at bit 8i + 7;
//   B byte i: magnitude at bits 16 + 4i..16 + 4i + 2, sign at bit 8i + 3,
// so the kernel builds each e4m3 register with one byte permute of a per-row table of the 8
// magnitudes (prmt, selector = the magnitude nibbles) and an OR of the sign bits (B's shifted by
// 4). Word j feeds step 2 (c % 2) + j / 2 of a 128-wide K stage, as a0 / a1 (j even) or a2 / a3.
// Scales: one 32-byte record per item, in the item order, [g][b][h] (row g + 8h, block 2c + b,
// the W4A16 order); each byte is the byte offset 8 (d + 8) of the kernel's table row for 2^d =
// 2^(scale - ref[row]), d in [-8, 6], where
// every e2m1 * 2^d is an e4m3 value (0.5 * 2^-8 = 2^-9 is e4m3's smallest subnormal, 1.5 * 2^-8
// needs its 2^-9 step, 6 * 2^6 = 384 <= 448). ref[row] = max(scale over the row's nonzero blocks)
// - 6, clamped at 0; the row's factor 2^(ref - 127) goes to row_scale (f32, the kernel's tile row
// order). All-zero blocks may have any scale (offset 64, d = 0). Gated (GEMM1, halves): tile rt
// holds gate rows 8rt..8rt+7 in its rows 0..7 and the matching up rows I + 8rt.. in rows 8..15
// (W4A16's rule).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "cuda/gemm/w4a8/sm90_w4a8_weight_layout.hpp"

namespace moekit::gemm {
namespace {

constexpr int kBlock = 32;       // MXFP4 scale block along K
constexpr int kDMin = -8, kDMax = 6;
constexpr int kIndexBias = 8;    // table index = d + 8

struct Geometry {
  std::int64_t e, n, k, row_tiles, chunks;
};

Geometry check_geometry(const char* where, std::int64_t num_experts, std::int64_t n,
                        std::int64_t k) {
  MOEKIT_CHECK(num_experts >= 0, where, ": num_experts: expected >= 0, got ", num_experts);
  MOEKIT_CHECK(n > 0 && n % 16 == 0, where, ": n: expected a positive multiple of 16, got ", n);
  MOEKIT_CHECK(k > 0 && k % 64 == 0, where, ": k: expected a positive multiple of 64, got ", k);
  return {num_experts, n, k, n / 16, k / 64};
}

// Source row (in [0, N)) of row r (0..15) of prepared tile rt.
inline std::int64_t source_row(std::int64_t rt, int r, std::int64_t n, bool gated) {
  if (!gated) return rt * 16 + r;
  return r < 8 ? rt * 8 + r : n / 2 + rt * 8 + (r - 8);
}

// Bit position of code bit `bit` (0..2 magnitude, 3 sign) of byte i of register A (hb = 0) or B.
constexpr int stored_bit(int hb, int i, int bit) {
  if (bit < 3) return 16 * hb + 4 * i + bit;
  return 8 * i + (hb == 0 ? 7 : 3);
}
constexpr bool stored_bits_are_a_permutation() {
  std::uint64_t seen = 0;
  for (int hb = 0; hb < 2; ++hb)
    for (int i = 0; i < 4; ++i)
      for (int bit = 0; bit < 4; ++bit) seen |= std::uint64_t{1} << stored_bit(hb, i, bit);
  return seen == 0xFFFFFFFFull;
}
static_assert(stored_bits_are_a_permutation(), "the dequant must cover the word");

std::uint32_t spread(int hb, int i, int code) {
  std::uint32_t w = 0;
  for (int bit = 0; bit < 4; ++bit)
    if ((code >> bit) & 1) w |= std::uint32_t{1} << stored_bit(hb, i, bit);
  return w;
}

// Item (16-row tile rt, chunk c) of expert e: CTA tiles of 8 row tiles, chunk-major inside.
inline std::int64_t item_index(const Geometry& g, std::int64_t e, std::int64_t rt, std::int64_t c) {
  const std::int64_t ct = rt / 8, ntile = std::min<std::int64_t>(8, g.row_tiles - 8 * ct);
  return e * g.row_tiles * g.chunks + 8 * ct * g.chunks + c * ntile + rt % 8;
}

// Calls fn(word index, hb, i, source row index (e * N + row), k) for every code.
template <typename Fn>
void for_each_code(const Geometry& g, bool gated, Fn&& fn) {
  for (std::int64_t e = 0; e < g.e; ++e)
    for (std::int64_t rt = 0; rt < g.row_tiles; ++rt)
      for (std::int64_t c = 0; c < g.chunks; ++c) {
        const std::int64_t tile = item_index(g, e, rt, c);
        for (int lane = 0; lane < 32; ++lane) {
          const int lg = lane / 4, lt = lane % 4;
          for (int j = 0; j < 4; ++j)
            for (int hb = 0; hb < 2; ++hb)
              for (int i = 0; i < 4; ++i) {
                const std::int64_t kk = c * 64 + 32 * (j / 2) + 16 * (j % 2) + 4 * lt + i;
                fn((tile * 512 + lane * 16) / 4 + j, hb, i,
                   e * g.n + source_row(rt, lg + 8 * hb, g.n, gated), kk);
              }
        }
      }
}

// Calls fn(prepared scale index, source row index, block) for every scale byte.
template <typename Fn>
void for_each_scale(const Geometry& g, bool gated, Fn&& fn) {
  for (std::int64_t e = 0; e < g.e; ++e)
    for (std::int64_t rt = 0; rt < g.row_tiles; ++rt)
      for (std::int64_t c = 0; c < g.chunks; ++c) {
        const std::int64_t tile = item_index(g, e, rt, c);
        for (int lg = 0; lg < 8; ++lg)
          for (int b = 0; b < 2; ++b)
            for (int h = 0; h < 2; ++h)
              fn(tile * 32 + (lg * 2 + b) * 2 + h,
                 e * g.n + source_row(rt, lg + 8 * h, g.n, gated), 2 * c + b);
      }
}

// Prepared row order index (e * N + 16 rt + r) of every source row.
std::vector<std::int64_t> prepared_row_of(const Geometry& g, bool gated) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(g.e * g.n));
  for (std::int64_t e = 0; e < g.e; ++e)
    for (std::int64_t rt = 0; rt < g.row_tiles; ++rt)
      for (int r = 0; r < 16; ++r)
        out[static_cast<std::size_t>(e * g.n + source_row(rt, r, g.n, gated))] =
            e * g.n + rt * 16 + r;
  return out;
}

float exp2_bias127(int ref) {  // 2^(ref - 127), ref in [0, 254]: exact (normal or subnormal)
  return static_cast<float>(std::ldexp(1.0, ref - 127));
}

}  // namespace

std::string w4a8_prepare_weights(std::int64_t num_experts, std::int64_t n, std::int64_t k,
                                 bool gated, const std::uint8_t* codes, const std::uint8_t* scales,
                                 std::uint8_t* out_codes, std::uint8_t* out_scales,
                                 float* out_row_scale, std::int64_t first_expert) {
  const Geometry g = check_geometry("w4a8_prepare_weights", num_experts, n, k);
  const std::int64_t kb = k / kBlock, rows = g.e * g.n;
  // Per source row: the reference exponent from its nonzero blocks.
  std::vector<int> ref(static_cast<std::size_t>(rows), 127);
  for (std::int64_t r = 0; r < rows; ++r) {
    int lo = 256, hi = -1;
    for (std::int64_t b = 0; b < kb; ++b) {
      const int s = scales[r * kb + b];
      // NaN (0xFF) makes the whole block NaN in the reference, zero codes included.
      if (s == 0xFF)
        return detail::concat("expert ", first_expert + r / g.n, " row ", r % g.n, " block ", b,
                              ": scale 0xFF (NaN) is not representable");
      const std::uint8_t* c = codes + r * (k / 2) + b * (kBlock / 2);
      bool nonzero = false;
      for (int x = 0; x < kBlock / 2 && !nonzero; ++x) nonzero = (c[x] & 0x77) != 0;
      if (!nonzero) continue;  // +-0 codes only: the scale does not matter
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
    if (hi < 0) continue;  // an all-zero row
    const int rf = std::max(hi + (-kDMax), 0);
    if (lo - rf < kDMin)
      return detail::concat("expert ", first_expert + r / g.n, " row ", r % g.n,
                            ": block scales span 2^",
                            lo - 127, " .. 2^", hi - 127, " (", hi - lo + 1,
                            " binades; e4m3 holds e2m1 x 2^d exactly for 15 consecutive d)");
    ref[static_cast<std::size_t>(r)] = rf;
  }
  const std::vector<std::int64_t> prow = prepared_row_of(g, gated);
  for (std::int64_t r = 0; r < rows; ++r) {
    out_row_scale[prow[static_cast<std::size_t>(r)]] =
        exp2_bias127(ref[static_cast<std::size_t>(r)]);
  }

  std::uint32_t* words = reinterpret_cast<std::uint32_t*>(out_codes);
  std::memset(out_codes, 0, static_cast<std::size_t>(rows * k / 2));
  for_each_code(g, gated, [&](std::int64_t w, int hb, int i, std::int64_t src, std::int64_t kk) {
    const int code = (codes[src * (k / 2) + kk / 2] >> ((kk % 2) * 4)) & 0xF;
    std::uint32_t bits = spread(hb, i, code);
    std::uint32_t word;
    std::memcpy(&word, &words[w], 4);
    word |= bits;
    std::memcpy(&words[w], &word, 4);
  });
  for_each_scale(g, gated, [&](std::int64_t dst, std::int64_t src, std::int64_t b) {
    const int s = scales[src * kb + b];
    const int d = s - ref[static_cast<std::size_t>(src)];
    // Out-of-range indices only occur for all-zero blocks (checked above): any table row works.
    out_scales[dst] = static_cast<std::uint8_t>(
        8 * (d >= kDMin && d <= kDMax ? d + kIndexBias : kIndexBias));
  });
  return "";
}

void w4a8_unprepare_weights(std::int64_t num_experts, std::int64_t n, std::int64_t k, bool gated,
                            const std::uint8_t* prepared_codes,
                            const std::uint8_t* prepared_scales, const float* row_scale,
                            std::uint8_t* codes, std::uint8_t* scales) {
  const Geometry g = check_geometry("w4a8_unprepare_weights", num_experts, n, k);
  const std::int64_t kb = k / kBlock, rows = g.e * g.n;
  std::memset(codes, 0, static_cast<std::size_t>(rows * k / 2));
  const std::uint32_t* words = reinterpret_cast<const std::uint32_t*>(prepared_codes);
  for_each_code(g, gated, [&](std::int64_t w, int hb, int i, std::int64_t src, std::int64_t kk) {
    std::uint32_t word;
    std::memcpy(&word, &words[w], 4);
    int code = 0;
    for (int bit = 0; bit < 4; ++bit)
      if ((word >> stored_bit(hb, i, bit)) & 1) code |= 1 << bit;
    codes[src * (k / 2) + kk / 2] |= static_cast<std::uint8_t>(code << ((kk % 2) * 4));
  });
  const std::vector<std::int64_t> prow = prepared_row_of(g, gated);
  for_each_scale(g, gated, [&](std::int64_t dst, std::int64_t src, std::int64_t b) {
    const int ref = std::ilogb(row_scale[prow[static_cast<std::size_t>(src)]]) + 127;
    const std::uint8_t* c = codes + src * (k / 2) + b * (kBlock / 2);
    bool nonzero = false;
    for (int x = 0; x < kBlock / 2 && !nonzero; ++x) nonzero = (c[x] & 0x77) != 0;
    scales[src * kb + b] =
        static_cast<std::uint8_t>(nonzero ? ref + prepared_scales[dst] / 8 - kIndexBias : 127);
  });
}

}  // namespace moekit::gemm
