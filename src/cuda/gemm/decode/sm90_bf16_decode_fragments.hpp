// The register map of the bf16 decode GEMM (sm90_decode_grouped_gemm.cuh with Bf16Codec): which
// loaded 32-bit word of a lane feeds which mma.sync m16n8k16 A / B register. Plain C++ (host and
// device), so that a host test can emulate the MMA with it (tests/gemm/bf16_decode_fragment_test).
//
// The weights stay in the checkpoint layout (row-major [N, K] per expert). A warp's item is a
// 16-row x 64-wide K chunk: lane (g = lane / 4, t = lane % 4) loads two 16-byte halves
// K bf16_lane_k(t) + kBf16HalfStride h + [0, 8) (h = 0, 1) of weight rows g and g + 8, and the same
// bytes of token g's activation row: one load instruction covers 64 contiguous bytes of each row
// (full 32-byte sectors), the two halves the row's whole 128-byte line. The MMA contracts over K,
// so any permutation of K applied to both operands gives the same sum: step s (0..3) takes the K
// words of half s / 2, words 2 (s % 2) and 2 (s % 2) + 1 (the word order the W4A16 dequant
// produces, so both codecs share the kernel's MMA loop), i.e. the real K 8t + 32 (s / 2) +
// 4 (s % 2) + {0, 1} sit at MMA k-slots {2t, 2t + 1} and + {2, 3} at {2t + 8, 2t + 9}.
#pragma once

namespace moekit::gemm::sm90::decode {

constexpr int kBf16HalfStride = 32;  // elements between a lane's two halves
// First K element (in the chunk) of lane t's first half.
constexpr int bf16_lane_k(int t) { return 8 * t; }

// One 32-bit word (two bf16) of a lane's loads: weight row g (row8 = false) or g + 8, 16-byte
// half (0: K 16t .. 16t + 7, 1: K 16t + 8 .. 16t + 15) and word in it (0..3).
struct WordSource {
  bool row8;
  int half;
  int word;
};

// A register r (0..3: rows g / g + 8 at k-slots 2t.., then rows g / g + 8 at 2t + 8..) of step s.
constexpr WordSource bf16_a_source(int step, int reg) {
  return {reg % 2 == 1, step / 2, 2 * (step % 2) + reg / 2};
}
// B register r (0: k-slots 2t, 2t + 1; 1: 2t + 8, 2t + 9) of step s, from token g's loads.
constexpr WordSource bf16_b_source(int step, int reg) {
  return {false, step / 2, 2 * (step % 2) + reg};
}

}  // namespace moekit::gemm::sm90::decode
