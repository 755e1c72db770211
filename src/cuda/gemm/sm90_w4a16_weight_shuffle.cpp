// Offline weight shuffle for the SM90 W4A16 kernel
// (sm90_w4a16_grouped_gemm.cu).
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
// bytes per tile and chunk); word j (32 bits, 8 nibbles) feeds step j. Nibble n
// of the word holds
//   row g + 8 * (n is even), k = 16t + 4j + kNibbleK[n]
// so that the dequant's "shift the nibble to bits 15..12 / 31..28" extraction s
// = 0..3 yields the bf16x2 registers a0a1, a2a3, a4a5, a6a7 in order (see
// dequant_word in the kernel). Scales: [E][N/16][K/64] records; NVFP4 64 bytes
// [g][t][h] (row g + 8h, block 4c + t), MXFP4 32 bytes [g][b][h] (row g + 8h,
// block 2c + b). Gated (GEMM1, halves): tile rt holds gate rows 8rt..8rt+7 in
// its rows 0..7 and the matching up rows I + 8rt.. in rows 8..15, so one thread
// holds gate and up of the same (row, token) in its accumulators.
#include <cstdint>
#include <cstring>

#include "moekit/core/error.hpp"
#include "moekit/gemm/w4a16.hpp"

namespace moekit::gemm {
namespace {

constexpr int kNibbleK[8] = {2, 2, 0, 0, 3, 3, 1, 1};

struct ShuffleGeometry {
  std::int64_t e, n, k, row_tiles, chunks, sfv, scale_record;
};

ShuffleGeometry check_geometry(const char* where, W4Format format, std::int64_t num_experts,
                               std::int64_t n, std::int64_t k, bool gated) {
  MOEKIT_CHECK(num_experts >= 0, where, ": num_experts: expected >= 0, got ", num_experts);
  MOEKIT_CHECK(n > 0 && n % 16 == 0, where, ": n: expected a positive multiple of 16, got ", n);
  MOEKIT_CHECK(k > 0 && k % 64 == 0, where, ": k: expected a positive multiple of 64, got ", k);
  MOEKIT_CHECK(!gated || n % 16 == 0, where, ": n: expected 2I with I % 8 == 0, got ", n);
  const std::int64_t sfv = w4_scale_block(format);
  return {num_experts, n, k, n / 16, k / 64, sfv, 64 / sfv * 16};
}

// Source row (in [0, N)) of row r (0..15) of prepared tile rt.
inline std::int64_t source_row(std::int64_t rt, int r, std::int64_t n, bool gated) {
  if (!gated) return rt * 16 + r;
  return r < 8 ? rt * 8 + r : n / 2 + rt * 8 + (r - 8);
}

// Calls fn(shuffled_code_byte_index, nibble_shift, source_byte_index,
// source_nibble_shift) for every code nibble, and sfn(shuffled_scale_index,
// source_scale_index) for every scale byte.
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
            for (int nib = 0; nib < 8; ++nib) {
              const int r = (nib % 2 == 0) ? lg + 8 : lg;
              const std::int64_t kk = c * 64 + lt * 16 + j * 4 + kNibbleK[nib];
              fn(tile * 512 + lane * 16 + j * 4 + nib / 2, (nib % 2) * 4,
                 src_rows[r] * (g.k / 2) + kk / 2, static_cast<int>(kk % 2) * 4);
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

std::string w4_format_name(W4Format f) { return f == W4Format::kNVFP4 ? "nvfp4" : "mxfp4"; }

std::string w4_tile_name(W4Tile t) {
  switch (t) {
    case W4Tile::kAuto:
      return "auto";
    case W4Tile::kDecode8:
      return "decode8";
    case W4Tile::kDecode16:
      return "decode16";
    case W4Tile::kMid32:
      return "mid32";
    case W4Tile::kLarge:
      return "large";
  }
  return "?";
}

int w4_scale_block(W4Format f) { return f == W4Format::kNVFP4 ? 16 : 32; }

void w4a16_shuffle_weights(W4Format format, std::int64_t num_experts, std::int64_t n,
                           std::int64_t k, bool gated, const std::uint8_t* codes,
                           const std::uint8_t* scales, std::uint8_t* out_codes,
                           std::uint8_t* out_scales) {
  const ShuffleGeometry g = check_geometry(__func__, format, num_experts, n, k, gated);
  std::memset(out_codes, 0, static_cast<std::size_t>(g.e * g.n * g.k / 2));
  for_each_mapping(
      g, gated,
      [&](std::int64_t dst, int dst_shift, std::int64_t src, int src_shift) {
        out_codes[dst] |= static_cast<std::uint8_t>(((codes[src] >> src_shift) & 0xF) << dst_shift);
      },
      [&](std::int64_t dst, std::int64_t src) { out_scales[dst] = scales[src]; });
}

void w4a16_unshuffle_weights(W4Format format, std::int64_t num_experts, std::int64_t n,
                             std::int64_t k, bool gated, const std::uint8_t* shuffled_codes,
                             const std::uint8_t* shuffled_scales, std::uint8_t* codes,
                             std::uint8_t* scales) {
  const ShuffleGeometry g = check_geometry(__func__, format, num_experts, n, k, gated);
  std::memset(codes, 0, static_cast<std::size_t>(g.e * g.n * g.k / 2));
  for_each_mapping(
      g, gated,
      [&](std::int64_t dst, int dst_shift, std::int64_t src, int src_shift) {
        codes[src] |=
            static_cast<std::uint8_t>(((shuffled_codes[dst] >> dst_shift) & 0xF) << src_shift);
      },
      [&](std::int64_t dst, std::int64_t src) { scales[src] = shuffled_scales[dst]; });
}

}  // namespace moekit::gemm
