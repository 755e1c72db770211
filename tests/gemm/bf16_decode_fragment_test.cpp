// Host emulation of the bf16 decode GEMM's register map (cuda/gemm/sm90_bf16_decode_fragments.hpp):
// every lane loads what the kernel loads (32 contiguous bytes of weight rows g and g + 8 and of
// token g's activation row per 64-wide K chunk), the A / B registers are assembled by the map, and
// mma.sync m16n8k16 is emulated with the PTX ISA's fragment layout. The K permutation must be a
// bijection per step, cover the chunk exactly once over the four steps, and give the plain product
// (exact: small integers, so any summation order gives the same value).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "cuda/gemm/decode/sm90_bf16_decode_fragments.hpp"
#include "test_seed.hpp"

namespace moekit {
namespace {

using gemm::sm90::decode::bf16_a_source;
using gemm::sm90::decode::bf16_b_source;
using gemm::sm90::decode::bf16_lane_k;
using gemm::sm90::decode::kBf16HalfStride;
using gemm::sm90::decode::WordSource;

constexpr int kChunk = 64;

// The real K index of word `w` (two bf16: element e = 0, 1) of half h, as lane t loads them.
int real_k(int t, const WordSource& s, int e) {
  return bf16_lane_k(t) + kBf16HalfStride * s.half + 2 * s.word + e;
}

// Each load instruction (one half, all lanes of a row) reads whole 32-byte sectors, and the two
// halves of the 4 lanes of a row are the chunk's 128 bytes.
TEST(Bf16DecodeFragments, LoadsCoverWholeSectors) {
  for (int h = 0; h < 2; ++h) {
    std::set<int> bytes;
    for (int t = 0; t < 4; ++t)
      for (int b = 0; b < 16; ++b) bytes.insert(2 * (bf16_lane_k(t) + kBf16HalfStride * h) + b);
    EXPECT_EQ(bytes.size(), 64u);
    EXPECT_EQ(*bytes.begin() % 32, 0);
    EXPECT_EQ(*bytes.rbegin() - *bytes.begin(), 63);
  }
}

TEST(Bf16DecodeFragments, PermutationCoversEachChunkOncePerOperand) {
  for (int g = 0; g < 8; ++g) {
    std::set<std::pair<int, int>> a_seen;  // (weight row, real k) over the four steps
    std::set<int> b_seen;                  // real k of token g
    for (int s = 0; s < 4; ++s) {
      for (int t = 0; t < 4; ++t) {
        for (int r = 0; r < 4; ++r) {
          const WordSource src = bf16_a_source(s, r);
          // PTX m16n8k16 A fragment: a0 / a2 row g, a1 / a3 row g + 8.
          EXPECT_EQ(src.row8, r % 2 == 1);
          for (int e = 0; e < 2; ++e)
            EXPECT_TRUE(a_seen.insert({g + (src.row8 ? 8 : 0), real_k(t, src, e)}).second);
        }
        for (int r = 0; r < 2; ++r) {
          const WordSource src = bf16_b_source(s, r);
          EXPECT_FALSE(src.row8);
          for (int e = 0; e < 2; ++e) EXPECT_TRUE(b_seen.insert(real_k(t, src, e)).second);
        }
      }
    }
    EXPECT_EQ(a_seen.size(), 2u * kChunk);
    EXPECT_EQ(b_seen.size(), static_cast<std::size_t>(kChunk));
    for (int k : b_seen) EXPECT_TRUE(k >= 0 && k < kChunk);
  }
}

// D[16][8] += A[16][16] * B[16][8] with the per-lane fragments of the PTX ISA ("Matrix Fragments
// for mma.m16n8k16" with .bf16): a_regs[lane][r] holds the pair (elements 2r', 2r'+1) at
// row g (+8 for r = 1, 3), k-slots 2t + {0, 1} (+8 for r = 2, 3); b_regs[lane][r] k-slots
// 2t + {0, 1} (+8 for r = 1) of column g; the accumulator c0, c1 (row g, columns 2t, 2t + 1),
// c2, c3 (row g + 8).
void emulate_mma(const std::array<std::array<std::array<double, 2>, 4>, 32>& a_regs,
                 const std::array<std::array<std::array<double, 2>, 2>, 32>& b_regs,
                 double (&d)[16][8]) {
  double a[16][16] = {}, b[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e) a[g + (r % 2) * 8][2 * t + e + (r / 2) * 8] = a_regs[lane][r][e];
    for (int r = 0; r < 2; ++r)
      for (int e = 0; e < 2; ++e) b[2 * t + e + r * 8][g] = b_regs[lane][r][e];
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < 16; ++k) d[i][j] += a[i][k] * b[k][j];
}

TEST(Bf16DecodeFragments, EmulatedMmaGivesThePlainProduct) {
  const std::uint64_t seed = process_test_seed();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " (MOEKIT_TEST_SEED overrides)");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-8, 8);  // exact in bf16 and in any summation order
  double w[16][kChunk], x[8][kChunk];
  for (auto& row : w)
    for (double& v : row) v = small(rng);
  for (auto& row : x)
    for (double& v : row) v = small(rng);
  double d[16][8] = {};
  for (int s = 0; s < 4; ++s) {
    std::array<std::array<std::array<double, 2>, 4>, 32> a_regs{};
    std::array<std::array<std::array<double, 2>, 2>, 32> b_regs{};
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      for (int r = 0; r < 4; ++r) {
        const WordSource src = bf16_a_source(s, r);
        for (int e = 0; e < 2; ++e)
          a_regs[lane][r][e] = w[g + (src.row8 ? 8 : 0)][real_k(t, src, e)];
      }
      for (int r = 0; r < 2; ++r) {
        const WordSource src = bf16_b_source(s, r);
        for (int e = 0; e < 2; ++e) b_regs[lane][r][e] = x[g][real_k(t, src, e)];
      }
    }
    emulate_mma(a_regs, b_regs, d);
  }
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double want = 0;
      for (int k = 0; k < kChunk; ++k) want += w[i][k] * x[j][k];
      EXPECT_EQ(d[i][j], want) << "weight row " << i << " token " << j;
    }
}

}  // namespace
}  // namespace moekit
