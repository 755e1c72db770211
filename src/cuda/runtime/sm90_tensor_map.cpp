#include "cuda/runtime/sm90_tensor_map.hpp"

#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <string>

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

CUtensorMap encode_tensor_map(const char* what, CUtensorMapDataType type, const void* base,
                              int rank, const std::uint64_t* dims,
                              const std::uint64_t* strides_bytes, const std::uint32_t* box,
                              CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2_promotion) {
  MOEKIT_CHECK(rank >= 2 && rank <= 5, what, ": tensor map rank ", rank, " (expected 2..5)");
  CUtensorMap map{};
  cuuint64_t d[5], st[4];
  cuuint32_t b[5], element_strides[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    element_strides[i] = 1;
    if (i > 0) st[i - 1] = strides_bytes[i - 1];
  }
  const CUresult r = encode_tiled_entry()(
      &map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, st, b, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2_promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string shape, boxes, strides;
    for (int i = 0; i < rank; ++i) {
      shape += (i ? " x " : "") + std::to_string(dims[i]);
      boxes += (i ? " x " : "") + std::to_string(box[i]);
      if (i > 0) strides += (i > 1 ? ", " : "") + std::to_string(strides_bytes[i - 1]);
    }
    MOEKIT_FAIL(what, ": cuTensorMapEncodeTiled refused the tensor (error ", static_cast<int>(r),
                "; base ", base, ", ", shape, " elements, strides ", strides, " bytes, box ", boxes,
                ")");
  }
  return map;
}

CUtensorMap encode_tensor_map_2d(const char* what, CUtensorMapDataType type, const void* base,
                                 std::uint64_t inner, std::uint64_t outer,
                                 std::uint64_t outer_stride_bytes, std::uint32_t box_inner,
                                 std::uint32_t box_outer, CUtensorMapSwizzle swizzle,
                                 CUtensorMapL2promotion l2_promotion) {
  const std::uint64_t dims[2] = {inner, outer};
  const std::uint32_t box[2] = {box_inner, box_outer};
  return encode_tensor_map(what, type, base, 2, dims, &outer_stride_bytes, box, swizzle,
                           l2_promotion);
}

}  // namespace moekit::cuda
