#include "cuda/runtime/sm90_tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "moekit/core/error.hpp"

namespace moekit::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled_entry() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                             cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr)
      MOEKIT_FAIL("cuTensorMapEncodeTiled: not found in the CUDA driver (", cudaGetErrorName(err),
                  "); TMA needs a CUDA 12 driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

}  // namespace

CUtensorMap encode_tensor_map_2d(const char* what, CUtensorMapDataType type, const void* base,
                                 std::uint64_t inner, std::uint64_t outer,
                                 std::uint64_t outer_stride_bytes, std::uint32_t box_inner,
                                 std::uint32_t box_outer, CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion l2_promotion) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {outer_stride_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled_entry()(&map, type, 2, const_cast<void*>(base), dims, strides,
                                          box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                          swizzle, l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    MOEKIT_FAIL(what, ": cuTensorMapEncodeTiled refused the tensor (error ", static_cast<int>(r),
                "; base ", base, ", ", inner, " x ", outer, " elements, row stride ",
                outer_stride_bytes, " bytes, box ", box_inner, " x ", box_outer, ")");
  return map;
}

}  // namespace moekit::cuda
