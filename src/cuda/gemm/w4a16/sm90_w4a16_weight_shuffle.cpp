// Offline weight shuffle for the SM90 W4A16 kernels (sm90_w4a16_weight_shuffle.hpp).
//
// The kernel computes out^T = W * A^T with mma.sync m16n8k16: weight rows are
// the MMA's M (16), tokens its N (8). Lane (g = lane / 4, t = lane % 4) of a
// warp holds, per k16 step, A elements of rows g and g + 8 at MMA-k {2t, 2t+1,
// 2t+8, 2t+9}. The reduction order is free, so MMA-k of step j in a 64-wide K
// chunk maps to the real k = 16t + 4j + {0, 1, 2, 3}: each lane then needs 16
// consecutive k of its rows (one 16-byte load of weights, two 16-byte loads of
// activations, and ONE block scale per row for NVFP4) for four k16 steps.
//
// Layout: [E][N/16 row tiles][K/64 chunks][32 lanes][4 words] for codes (512
// bytes per tile and chunk); word j (32 bits, 8 codes) feeds step j. Its code
// (s, h) (s = 0..3: the MMA A register, h: its low / high bf16) is
//   row g + 8 * (s odd), k = 16t + 4j + 2 * (s / 2) + h,
// and its 4 bits are scattered over the word (not a nibble): code bit i (m, e0,
// e1, sign) is stored at bit (kTarget[i] + 16h - rotation) mod 32, where the
// kernel's dequant_word rotates the word left by `rotation` (s = 0, 1, 2: 0, 4,
// 10; s = 3: 6 for the m bit, 14 for the others) and masks the bf16 bit
// positions kTarget = {6, 7, 8, 15} of each half. The four masked rotations are
// disjoint and cover the 32 bits (static_assert below). Scales: [E][N/16][K/64]
// records; NVFP4 64 bytes [g][t][h] (row g + 8h, block 4c + t), MXFP4 32 bytes
// [g][b][h] (row g + 8h, block 2c + b). Gated (GEMM1, halves): tile rt holds gate rows 8rt..8rt+7 in
// its rows 0..7 and the matching up rows I + 8rt.. in rows 8..15, so one thread
// holds gate and up of the same (row, token) in its accumulators.
#include <cstdint>
#include <cstring>

#include "moekit/core/error.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_weight_shuffle.hpp"

namespace moekit::gemm {
namespace {

// Must match dequant_word in common/sm90_grouped_gemm_common.cuh.
constexpr int kTarget[4] = {6, 7, 8, 15};  // bf16 bit of code bit m, e0, e1, sign
constexpr int kRotation[4] = {0, 4, 10, 14};
constexpr int kA3LowRotation = 6;  // a3's m bit

// Stored bit (0..31) of code bit `bit` of code (s, h) of a word.
constexpr int stored_bit(int s, int h, int bit) {
  const int rotation = (s == 3 && bit == 0) ? kA3LowRotation : kRotation[s];
  return (kTarget[bit] + 16 * h - rotation + 32) % 32;
}
constexpr bool stored_bits_are_a_permutation() {
  std::uint64_t seen = 0;
  for (int s = 0; s < 4; ++s)
    for (int h = 0; h < 2; ++h)
      for (int bit = 0; bit < 4; ++bit) seen |= std::uint64_t{1} << stored_bit(s, h, bit);
  return seen == 0xFFFFFFFFull;
}
static_assert(stored_bits_are_a_permutation(), "the dequant rotations must cover the word");

// kSpread[2s + h][code]: the word bits of code (s, h) (one table lookup per code when shuffling).
struct SpreadTable {
  std::uint32_t bits[8][16];
};
constexpr SpreadTable make_spread_table() {
  SpreadTable t{};
  for (int s = 0; s < 4; ++s)
    for (int h = 0; h < 2; ++h)
      for (int code = 0; code < 16; ++code)
        for (int bit = 0; bit < 4; ++bit)
          if ((code >> bit) & 1) t.bits[2 * s + h][code] |= std::uint32_t{1} << stored_bit(s, h, bit);
  return t;
}
constexpr SpreadTable kSpread = make_spread_table();

struct ShuffleGeometry {
  std::int64_t e, n, k, row_tiles, chunks, sfv, scale_record;
};

ShuffleGeometry check_geometry(const char* where, QuantScheme format, std::int64_t num_experts,
                               std::int64_t n, std::int64_t k, bool gated) {
  MOEKIT_CHECK(num_experts >= 0, where, ": num_experts: expected >= 0, got ", num_experts);
  MOEKIT_CHECK(n > 0 && n % 16 == 0, where, ": n: expected a positive multiple of 16, got ", n);
  MOEKIT_CHECK(k > 0 && k % 64 == 0, where, ": k: expected a positive multiple of 64, got ", k);
  MOEKIT_CHECK(!gated || n % 16 == 0, where, ": n: expected 2I with I % 8 == 0, got ", n);
  MOEKIT_CHECK_ARG(format == QuantScheme::kNVFP4 || format == QuantScheme::kMXFP4, "format",
                   "nvfp4 or mxfp4", scheme_name(format));
  const std::int64_t sfv = scale_block_size(format);
  return {num_experts, n, k, n / 16, k / 64, sfv, 64 / sfv * 16};
}

// Source row (in [0, N)) of row r (0..15) of prepared tile rt.
inline std::int64_t source_row(std::int64_t rt, int r, std::int64_t n, bool gated) {
  if (!gated) return rt * 16 + r;
  return r < 8 ? rt * 8 + r : n / 2 + rt * 8 + (r - 8);
}

// Calls fn(shuffled_word_index, s, h, source_byte_index, source_nibble_shift)
// for every code, and sfn(shuffled_scale_index, source_scale_index) for every
// scale byte.
template <typename CodeFn, typename ScaleFn>
void for_each_mapping(const ShuffleGeometry& g, bool gated, CodeFn&& fn, ScaleFn&& sfn) {
  const std::int64_t kb = g.k / g.sfv;
  for (std::int64_t e = 0; e < g.e; ++e) {
    for (std::int64_t rt = 0; rt < g.row_tiles; ++rt) {
      std::int64_t src_rows[16];
      for (int r = 0; r < 16; ++r) src_rows[r] = e * g.n + source_row(rt, r, g.n, gated);
      for (std::int64_t c = 0; c < g.chunks; ++c) {
        const std::int64_t tile = (e * g.row_tiles + rt) * g.chunks + c;
        for (int lane = 0; lane < 32; ++lane) {
          const int lg = lane / 4, lt = lane % 4;
          for (int j = 0; j < 4; ++j) {
            for (int s = 0; s < 4; ++s) {
              for (int h = 0; h < 2; ++h) {
                const int r = lg + 8 * (s % 2);
                const std::int64_t kk = c * 64 + lt * 16 + j * 4 + 2 * (s / 2) + h;
                fn((tile * 512 + lane * 16) / 4 + j, s, h, src_rows[r] * (g.k / 2) + kk / 2,
                   static_cast<int>(kk % 2) * 4);
              }
            }
          }
        }
        const std::int64_t blocks = 64 / g.sfv;  // 4 (NVFP4) or 2 (MXFP4)
        for (int lg = 0; lg < 8; ++lg)
          for (std::int64_t b = 0; b < blocks; ++b)
            for (int h = 0; h < 2; ++h)
              sfn(tile * g.scale_record + (lg * blocks + b) * 2 + h,
                  src_rows[lg + 8 * h] * kb + c * blocks + b);
      }
    }
  }
}

}  // namespace

void w4a16_shuffle_weights(QuantScheme format, std::int64_t num_experts, std::int64_t n,
                           std::int64_t k, bool gated, const std::uint8_t* codes,
                           const std::uint8_t* scales, std::uint8_t* out_codes,
                           std::uint8_t* out_scales) {
  const ShuffleGeometry g = check_geometry(__func__, format, num_experts, n, k, gated);
  std::memset(out_codes, 0, static_cast<std::size_t>(g.e * g.n * g.k / 2));
  for_each_mapping(
      g, gated,
      [&](std::int64_t word, int s, int h, std::int64_t src, int src_shift) {
        const std::uint32_t bits = kSpread.bits[2 * s + h][(codes[src] >> src_shift) & 0xF];
        std::uint8_t* dst = out_codes + word * 4;  // little-endian 32-bit word
        for (int b = 0; b < 4; ++b) dst[b] |= static_cast<std::uint8_t>(bits >> (8 * b));
      },
      [&](std::int64_t dst, std::int64_t src) { out_scales[dst] = scales[src]; });
}

void w4a16_unshuffle_weights(QuantScheme format, std::int64_t num_experts, std::int64_t n,
                             std::int64_t k, bool gated, const std::uint8_t* shuffled_codes,
                             const std::uint8_t* shuffled_scales, std::uint8_t* codes,
                             std::uint8_t* scales) {
  const ShuffleGeometry g = check_geometry(__func__, format, num_experts, n, k, gated);
  std::memset(codes, 0, static_cast<std::size_t>(g.e * g.n * g.k / 2));
  for_each_mapping(
      g, gated,
      [&](std::int64_t word, int s, int h, std::int64_t src, int src_shift) {
        int code = 0;
        for (int bit = 0; bit < 4; ++bit) {
          const int b = stored_bit(s, h, bit);
          code |= ((shuffled_codes[word * 4 + b / 8] >> (b % 8)) & 1) << bit;
        }
        codes[src] |= static_cast<std::uint8_t>(code << src_shift);
      },
      [&](std::int64_t dst, std::int64_t src) { scales[src] = shuffled_scales[dst]; });
}

}  // namespace moekit::gemm
