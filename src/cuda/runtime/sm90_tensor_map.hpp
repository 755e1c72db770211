// Internal: TMA tensor maps (CUtensorMap) for the SM90 kernels that load their tiles with
// cp.async.bulk.tensor (cuda/runtime/sm90_bulk_copy.cuh, tma_load_2d). The descriptor is encoded
// on the host by the driver's cuTensorMapEncodeTiled, reached through the runtime's driver entry
// point (no link to libcuda), and passed to the kernel by value as a __grid_constant__ parameter:
// no device memory, CUDA-graph capturable (the graph keeps the parameter).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace moekit::cuda {

// A 2-D tensor of `inner` x `outer` elements of `type` (inner contiguous, outer rows
// `outer_stride_bytes` apart) at `base`, loaded in boxes of box_inner x box_outer elements;
// out-of-bounds elements of a box read as zero. Throws moekit::Error naming `what` when the
// driver refuses the parameters (alignment: base 16 bytes, stride a multiple of 16; box dims
// <= 256, box_inner * element size a multiple of 16 and, with a swizzle, <= its span).
CUtensorMap encode_tensor_map_2d(const char* what, CUtensorMapDataType type, const void* base,
                                 std::uint64_t inner, std::uint64_t outer,
                                 std::uint64_t outer_stride_bytes, std::uint32_t box_inner,
                                 std::uint32_t box_outer, CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion l2_promotion);

// A tensor of `rank` (2..5) dimensions: dims[0] elements contiguous, dimension i >= 1 with
// strides_bytes[i - 1] (multiples of 16, in any order: a map may walk the memory in a permuted
// order), loaded in boxes of box[0..rank) elements (smem order: box[0] fastest). Out-of-bounds
// elements read as zero; errors as encode_tensor_map_2d's.
CUtensorMap encode_tensor_map(const char* what, CUtensorMapDataType type, const void* base,
                              int rank, const std::uint64_t* dims,
                              const std::uint64_t* strides_bytes, const std::uint32_t* box,
                              CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_promotion);

}  // namespace moekit::cuda
