// Launchers of the CUDA quantize op (moekit::cuda::quantize), called by the public dispatch in
// src/quant/ after it validated shapes, dtypes and devices. Asynchronous on the stream: only
// kernel launches and cudaMemsetAsync / cudaMemcpyAsync, no allocation, no host synchronization,
// so the op can be captured in a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/quant/quantize_cuda.hpp"
#include "core/env_switch.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "cuda/quant/quantize_dispatch.cuh"
#include "cuda/quant/quantize_fp4_rows.cuh"
#include "cuda/quant/quantize_launch.cuh"
#include "cuda/runtime/current_device.hpp"
#include "moekit/core/error.hpp"

namespace moekit::cuda {

namespace {

using quant_detail::Fp4RowsGroups;
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

// The FP4 row-group kernel (quantize_fp4_rows.cuh): persistent, one CTA per SM (fewer when there
// are fewer row groups).
template <typename Cfg, Kind kKind, bool kPerToken, bool kScaleTable, typename T>
void launch_fp4_rows_kernel(const QuantArgs& a, float* row_scale_out, bool reverse_rows, int sms,
                            cudaStream_t stream) {
  const std::int64_t rows = a.batch * a.rows;
  const auto kernel = quant_detail::quantize_fp4_rows_kernel<Cfg, T, kKind, kPerToken, kScaleTable>;
  MOEKIT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
  const std::int64_t groups = (rows + Cfg::kGroups - 1) / Cfg::kGroups;
  const auto grid = static_cast<unsigned int>(
      std::min<std::int64_t>(groups, static_cast<std::int64_t>(sms) * Cfg::kMinBlocks));
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(a, row_scale_out, reverse_rows);
  MOEKIT_CUDA_CHECK_LAUNCH();
}

// reverse_rows: visit the rows last to first (after a pass over the input: its last rows are the
// ones still in L2).
template <Kind kKind, bool kPerToken, typename T>
void launch_fp4_rows(const QuantArgs& a, float* row_scale_out, bool reverse_rows, int sms,
                     cudaStream_t stream) {
  if (a.batch * a.rows == 0) return;
  auto launch = [&](auto cfg_tag) {
    using Cfg = typename decltype(cfg_tag)::type;
    // One NVFP4 gs for every row: the block scales' divisions come from a per-CTA table.
    if constexpr (kKind == Kind::kNvfp4 && !kPerToken) {
      if (a.batch == 1 && !a.scale_per_row) {
        launch_fp4_rows_kernel<Cfg, kKind, false, true, T>(a, row_scale_out, reverse_rows, sms,
                                                           stream);
        return;
      }
    }
    launch_fp4_rows_kernel<Cfg, kKind, kPerToken, false, T>(a, row_scale_out, reverse_rows, sms,
                                                           stream);
  };
  if (tuning::sm90::fp4_quantize_rows_224(a.k / 16))
    launch(quant_detail::TypeTag<quant_detail::Fp4RowsGroups224>{});
  else
    launch(quant_detail::TypeTag<Fp4RowsGroups>{});
}

// The process-wide FP4 kernel choice: the tuning rule (kAuto), or forced by tests
// (set_fp4_quantize_kernel) or MOEKIT_QUANT_FP4_KERNEL=auto | rows | chunks (benchmarks compare
// the kernels in one run with it; read on first use).
std::atomic<int>& fp4_kernel_choice() {
  static std::atomic<int> choice{[] {
    const auto v = env::choice("MOEKIT_QUANT_FP4_KERNEL", {"auto", "rows", "chunks"});
    if (!v || *v == "auto") return static_cast<int>(Fp4QuantizeKernel::kAuto);
    return static_cast<int>(*v == "rows" ? Fp4QuantizeKernel::kRows : Fp4QuantizeKernel::kChunks);
  }()};
  return choice;
}

bool use_fp4_rows_kernel(QuantScheme scheme, bool static_gs, std::int64_t rows, int sms) {
  switch (static_cast<Fp4QuantizeKernel>(fp4_kernel_choice().load())) {
    case Fp4QuantizeKernel::kRows: return true;
    case Fp4QuantizeKernel::kChunks: return false;
    case Fp4QuantizeKernel::kAuto: break;
  }
  return tuning::sm90::fp4_quantize_rows_kernel(scheme == QuantScheme::kNVFP4, static_gs, rows,
                                                sms, Fp4RowsGroups::kGroups);
}

// NVFP4 (static or computed per-tensor gs, or per-token), MXFP4 of a 2-byte input with 16-byte
// aligned rows of K <= 8192 go to the FP4 row-group kernel; false for everything else.
template <typename T, bool kVec>
bool quantize_fp4_rows(QuantArgs a, QuantScheme scheme, const RowLoader<T, kVec>& load,
                       const QuantizedView& out, const void* static_scale, cudaStream_t stream) {
  if constexpr (sizeof(T) != 2 || !kVec) {
    return false;
  } else {
    // 8-byte code stores: the values buffer must be 8-byte aligned (an allocation is).
    if (!quant_detail::fp4_rows_kernel_fits(a.k) ||
        reinterpret_cast<std::uintptr_t>(out.values.data) % 8 != 0)
      return false;
    if (scheme != QuantScheme::kMXFP4 && scheme != QuantScheme::kNVFP4 &&
        scheme != QuantScheme::kNVFP4PerToken)
      return false;
    const int sms = std::max(current_device_multiprocessors(), 1);
    if (!use_fp4_rows_kernel(scheme, static_scale != nullptr, a.batch * a.rows, sms)) return false;
    // The kernel also writes the scale layout's padding (no separate kernel).
    switch (scheme) {
      case QuantScheme::kMXFP4:
        launch_fp4_rows<Kind::kMxfp4, false, T>(a, nullptr, false, sms, stream);
        return true;
      case QuantScheme::kNVFP4: {
        // A static gs goes straight to the kernel, which also copies it to the gs output; a
        // computed one is reduced into the output first (the amax pre-pass).
        auto* gs_out = static_cast<float*>(out.global_scale.data);
        float* gs_copy = nullptr;
        if (static_scale != nullptr) {
          a.scale_in = static_cast<const float*>(static_scale);
          gs_copy = gs_out;
        } else {
          quant_detail::launch_tensor_scale(a, load, gs_out, /*nvfp4=*/true, stream);
          a.scale_in = gs_out;
        }
        // A computed gs: the pre-pass just read the input, so its last rows go first (from L2).
        launch_fp4_rows<Kind::kNvfp4, false, T>(a, gs_copy, static_scale == nullptr, sms, stream);
        return true;
      }
      case QuantScheme::kNVFP4PerToken:
        launch_fp4_rows<Kind::kNvfp4, true, T>(a, static_cast<float*>(out.global_scale.data), false,
                                               sms, stream);
        return true;
      default:
        return false;
    }
  }
}

}  // namespace

void set_fp4_quantize_kernel(Fp4QuantizeKernel kernel) {
  fp4_kernel_choice().store(static_cast<int>(kernel));
}

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
    if (quantize_fp4_rows(a, config.scheme, load, out, fixed, stream)) return;
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
