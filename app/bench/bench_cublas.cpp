// The cuBLAS ceilings and baseline of `moekit bench` (see bench_cublas.hpp).
#include "bench/bench_cublas.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "bench/bench_kernels.hpp"
#include "bench/bench_util.hpp"
#include "cuda/runtime/cuda_check.hpp"
#include "cuda/activation/gated_activation.hpp"

#define MOEKIT_CUBLAS_CHECK(expr)                                                     \
  do {                                                                                \
    cublasStatus_t moekit_st_ = (expr);                                               \
    if (moekit_st_ != CUBLAS_STATUS_SUCCESS)                                          \
      MOEKIT_FAIL(#expr, " failed: ", cublasGetStatusString(moekit_st_), " at ", __FILE__, \
                  ":", __LINE__);                                                     \
  } while (0)

namespace moekit::bench {
namespace {

constexpr std::size_t kCublasWorkspace = 64ull << 20;

// Median milliseconds of `reps` event-timed calls of fn after 3 warm-ups.
template <typename Fn>
double median_ms(int reps, cudaStream_t s, Fn&& fn) {
  cudaEvent_t a, b;
  MOEKIT_CUDA_CHECK(cudaEventCreate(&a));
  MOEKIT_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    MOEKIT_CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    MOEKIT_CUDA_CHECK(cudaEventRecord(b, s));
    MOEKIT_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    MOEKIT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double fp8_peak(cublasLtHandle_t lt, void* workspace, cudaStream_t s, int reps, bool fast_accum) {
  const int n = 8192;
  DeviceBuffer a(static_cast<std::size_t>(n) * n), b(static_cast<std::size_t>(n) * n),
      d(static_cast<std::size_t>(n) * n * 2);
  fill_random_e4m3(a.p, static_cast<std::size_t>(n) * n, 11, s);
  fill_random_e4m3(b.p, static_cast<std::size_t>(n) * n, 12, s);
  cublasLtMatmulDesc_t op;
  MOEKIT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  MOEKIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  MOEKIT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
  const std::int8_t fast = fast_accum ? 1 : 0;
  MOEKIT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
  cublasLtMatrixLayout_t la, lb, ld;
  MOEKIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n));
  MOEKIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n));
  MOEKIT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n));
  cublasLtMatmulPreference_t pref;
  MOEKIT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const std::size_t ws = kCublasWorkspace;
  MOEKIT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  MOEKIT_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
  MOEKIT_CHECK(found > 0, "bench: cuBLASLt found no fp8 algorithm for 8192^3");
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = median_ms(reps, s, [&] {
    MOEKIT_CUBLAS_CHECK(cublasLtMatmul(lt, op, &alpha, a.p, la, b.p, lb, &beta, d.p, ld, d.p, ld,
                                       &heur.algo, workspace, ws, s));
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  return 2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12;
}

}  // namespace

Ceilings measure_ceilings(int reps, StreamHandle stream) {
  auto s = static_cast<cudaStream_t>(stream);
  Ceilings c;
  {  // copy: 2 GiB read + 2 GiB written per copy
    const std::size_t bytes = 2ull << 30;
    DeviceBuffer src(bytes), dst(bytes);
    fill_random_bf16(src.p, bytes / 2, 7, 1.0f, s);
    const double ms = median_ms(reps, s, [&] {
      MOEKIT_CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice, s));
    });
    c.copy_gbps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  }
  DeviceBuffer ws(kCublasWorkspace);
  {  // bf16 8192^3
    const int n = 8192;
    DeviceBuffer a(static_cast<std::size_t>(n) * n * 2), b(static_cast<std::size_t>(n) * n * 2),
        d(static_cast<std::size_t>(n) * n * 2);
    fill_random_bf16(a.p, static_cast<std::size_t>(n) * n, 8, 1.0f, s);
    fill_random_bf16(b.p, static_cast<std::size_t>(n) * n, 9, 1.0f, s);
    cublasHandle_t h;
    MOEKIT_CUBLAS_CHECK(cublasCreate(&h));
    MOEKIT_CUBLAS_CHECK(cublasSetStream(h, s));
    MOEKIT_CUBLAS_CHECK(cublasSetWorkspace(h, ws.p, kCublasWorkspace));
    const float alpha = 1.0f, beta = 0.0f;
    const double ms = median_ms(reps, s, [&] {
      MOEKIT_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, a.p,
                                       CUDA_R_16BF, n, b.p, CUDA_R_16BF, n, &beta, d.p,
                                       CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    });
    cublasDestroy(h);
    c.bf16_tflops = 2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12;
  }
  {
    cublasLtHandle_t lt;
    MOEKIT_CUBLAS_CHECK(cublasLtCreate(&lt));
    c.fp8_fast_accum_tflops = fp8_peak(lt, ws.p, s, reps, true);
    c.fp8_exact_accum_tflops = fp8_peak(lt, ws.p, s, reps, false);
    cublasLtDestroy(lt);
    c.fp8_tflops = std::max(c.fp8_fast_accum_tflops, c.fp8_exact_accum_tflops);
  }
  MOEKIT_CUDA_CHECK(cudaStreamSynchronize(s));
  return c;
}

struct CublasBaseline::Impl {
  cublasHandle_t handle = nullptr;
  void* workspace = nullptr;
};

CublasBaseline::CublasBaseline() : impl_(std::make_unique<Impl>()) {
  MOEKIT_CUBLAS_CHECK(cublasCreate(&impl_->handle));
  MOEKIT_CUDA_CHECK(cudaMalloc(&impl_->workspace, kCublasWorkspace));
  MOEKIT_CUBLAS_CHECK(cublasSetWorkspace(impl_->handle, impl_->workspace, kCublasWorkspace));
}

CublasBaseline::~CublasBaseline() {
  cublasDestroy(impl_->handle);
  cudaFree(impl_->workspace);
}

void CublasBaseline::run(const std::vector<std::int32_t>& off, const std::int32_t* device_offsets,
                         std::int64_t hidden, std::int64_t inter, const void* a, const void* w13,
                         const void* w2, void* h1, void* act, void* out, StreamHandle stream) {
  auto s = static_cast<cudaStream_t>(stream);
  MOEKIT_CUBLAS_CHECK(cublasSetStream(impl_->handle, s));
  const int e_count = static_cast<int>(off.size()) - 1;
  const float alpha = 1.0f, beta = 0.0f;
  const int h = static_cast<int>(hidden), i2 = static_cast<int>(2 * inter),
            i1 = static_cast<int>(inter);
  auto bf = [](const void* p, std::int64_t elems) {
    return static_cast<const char*>(p) + elems * 2;
  };
  // Column-major view: C[2I, c] = W13_e^T[2I, H] (W13_e stored [2I, H] row-major) x A_e^T[H, c].
  for (int e = 0; e < e_count; ++e) {
    const int c = off[e + 1] - off[e];
    if (c == 0) continue;
    MOEKIT_CUBLAS_CHECK(cublasGemmEx(
        impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, i2, c, h, &alpha, bf(w13, std::int64_t{e} * i2 * h),
        CUDA_R_16BF, h, bf(a, std::int64_t{off[e]} * h), CUDA_R_16BF, h, &beta,
        const_cast<char*>(bf(h1, std::int64_t{off[e]} * i2)), CUDA_R_16BF, i2, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  }
  cuda::gated_activation_bf16(h1, act, off.back(), inter, device_offsets + e_count,
                              cuda::GatedActivationArgs{}, stream);
  for (int e = 0; e < e_count; ++e) {
    const int c = off[e + 1] - off[e];
    if (c == 0) continue;
    MOEKIT_CUBLAS_CHECK(cublasGemmEx(
        impl_->handle, CUBLAS_OP_T, CUBLAS_OP_N, h, c, i1, &alpha, bf(w2, std::int64_t{e} * h * i1),
        CUDA_R_16BF, i1, bf(act, std::int64_t{off[e]} * i1), CUDA_R_16BF, i1, &beta,
        const_cast<char*>(bf(out, std::int64_t{off[e]} * h)), CUDA_R_16BF, h, CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace moekit::bench
