// The permutation by expert of a decode-size routing, computed by one warp in shared memory (the
// decode grouped GEMMs' fused routing, moekit/gemm/decode_routing.hpp). The positions are those of
// permute.hpp: rows grouped by expert in expert order, ascending assignment index inside an
// expert, which is what permute_by_expert (cuda/experts/bf16_experts.cu) writes.
#pragma once

namespace moekit::cuda {

// topk_ids [n] (n <= 32 * kChunks; ids outside [0, E) are not routed) ->
//   offsets [E + 1]: expert e's rows are [offsets[e], offsets[e + 1]);
//   sorted_tokens [offsets[E]]: the token (assignment / top_k) of each sorted row;
//   permuted_row [n]: the sorted row of each assignment, -1 when not routed.
//   tile_start [E + 1]: the prefix sum of ceil(rows of e / kTileRows) (the decode GEMM's token
//     tiles per expert; the same scan pass).
// running [E] is scratch. Called by all 32 lanes of one warp; the caller synchronizes before other
// warps read the outputs.
template <int kChunks, int kTileRows>
__device__ __forceinline__ void warp_permutation(const int* topk_ids, int n, int num_experts,
                                                 int top_k, int lane, int* offsets, int* running,
                                                 int* sorted_tokens, int* permuted_row,
                                                 int* tile_start) {
  const unsigned below = (1u << lane) - 1u;
  int ids[kChunks];
  unsigned peers[kChunks];
  for (int x = lane; x < num_experts; x += 32) running[x] = 0;
  __syncwarp();
  // Counts: the first lane of each expert's peers adds them (chunks one after the other).
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int a = c * 32 + lane;
    const int id = a < n ? topk_ids[a] : -1;
    ids[c] = id >= 0 && id < num_experts ? id : -1;
    peers[c] = __match_any_sync(0xffffffffu, ids[c] >= 0 ? ids[c] : num_experts + lane);
    if (ids[c] >= 0 && (peers[c] & below) == 0) running[ids[c]] += __popc(peers[c]);
    __syncwarp();
  }
  // Exclusive scans of the counts into offsets and of their tiles into tile_start; the counts
  // become the running fill (0).
  int carry = 0, tile_carry = 0;
  for (int base = 0; base < num_experts; base += 32) {
    const int x = base + lane;
    const int v = x < num_experts ? running[x] : 0;
    const int tiles = (v + kTileRows - 1) / kTileRows;
    int incl = v, tiles_incl = tiles;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, incl, d);
      const int z = __shfl_up_sync(0xffffffffu, tiles_incl, d);
      if (lane >= d) incl += y, tiles_incl += z;
    }
    if (x < num_experts) {
      offsets[x] = carry + incl - v;
      tile_start[x] = tile_carry + tiles_incl - tiles;
      running[x] = 0;
    }
    carry += __shfl_sync(0xffffffffu, incl, 31);
    tile_carry += __shfl_sync(0xffffffffu, tiles_incl, 31);
  }
  if (lane == 0) offsets[num_experts] = carry, tile_start[num_experts] = tile_carry;
  __syncwarp();
  // Positions: the expert's start + the rows of earlier chunks + the rank among earlier peers.
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int a = c * 32 + lane;
    int pos = -1;
    if (ids[c] >= 0) pos = offsets[ids[c]] + running[ids[c]] + __popc(peers[c] & below);
    __syncwarp();
    if (ids[c] >= 0 && (peers[c] & below) == 0) running[ids[c]] += __popc(peers[c]);
    if (pos >= 0) sorted_tokens[pos] = a / top_k;
    if (a < n) permuted_row[a] = pos;
    __syncwarp();
  }
}

}  // namespace moekit::cuda
