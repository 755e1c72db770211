// Launchers of the CUDA quantize op (moekit::cuda::quantize), called by the public dispatch in
// src/quant/ after it validated shapes, dtypes and devices. Asynchronous on the stream: only
// kernel launches and cudaMemsetAsync / cudaMemcpyAsync, no allocation, no host synchronization,
// so the op can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/quant/quantize_cuda.hpp"
#include "cuda/quant/quantize_dispatch.cuh"
#include "cuda/quant/quantize_launch.cuh"
#include "moekit/core/error.hpp"

namespace moekit::cuda {

namespace {

using quant_detail::Kind;
using quant_detail::QuantArgs;
using quant_detail::RowLoader;

// Per-row schemes: one CTA per row, sized so that a row is kRowCache chunks per thread (all its
// loads in flight at once, no idle threads in the last pass: K = 7168 -> 224 threads), at most
// kThreads (longer rows take the two-read path).
template <Kind kKind, typename T, bool kVec>
void launch_rows(const QuantArgs& a, float* row_scale_out, cudaStream_t stream) {
  const std::int64_t rows = a.batch * a.rows;
  if (rows == 0) return;
  const std::int64_t per_row = quant_detail::padded_chunks<kKind>(a.k);
  const std::int64_t want = (per_row + quant_detail::kRowCache - 1) / quant_detail::kRowCache;
  const int threads =
      static_cast<int>(std::clamp<std::int64_t>((want + 31) / 32 * 32, 32, quant_detail::kThreads));
  quant_detail::quantize_rows_kernel<T, kKind, kVec>
      <<<static_cast<unsigned int>(rows), threads, 0, stream>>>(a, row_scale_out);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void quantize(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
              const TensorView& static_scale, StreamHandle stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  const bool batched = x.rank() == 3;
  QuantArgs a = quant_detail::make_quant_args(batched ? x.size(0) : 1, x.size(-2), x.size(-1),
                                              config, out);
  a.x = x.data;
  const bool vec = quant_detail::can_vectorize(x.data, x.dtype, a.k);
  const void* fixed = static_scale.defined() ? static_scale.data : nullptr;
  quant_detail::dispatch_input(x.dtype, vec, [&](auto tag, auto vec_tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kVec = decltype(vec_tag)::value;
    const RowLoader<T, kVec> load{static_cast<const T*>(x.data), a.k};
    if (quant_detail::quantize_chunked(a, config.scheme, load, out, fixed, stream)) return;
    switch (config.scheme) {
      case QuantScheme::kFP8PerToken:
        launch_rows<Kind::kFp8Scaled, T, kVec>(a, static_cast<float*>(out.scales.data), stream);
        return;
      case QuantScheme::kNVFP4PerToken:
        quant_detail::launch_zero_padding(a, stream);
        launch_rows<Kind::kNvfp4, T, kVec>(a, static_cast<float*>(out.global_scale.data), stream);
        return;
      case QuantScheme::kFP8Block128x128: {
        const std::int64_t tiles = a.batch * ((a.rows + 127) / 128) * ((a.k + 127) / 128);
        if (tiles == 0) return;
        quant_detail::quantize_tiles_kernel<T, kVec>
            <<<static_cast<unsigned int>(tiles), quant_detail::kThreads, 0, stream>>>(a);
        MOEKIT_CUDA_CHECK_LAUNCH();
        return;
      }
      default:
        MOEKIT_FAIL("quantize: the cuda backend does not handle ", config.str());
    }
  });
}

}  // namespace moekit::cuda
