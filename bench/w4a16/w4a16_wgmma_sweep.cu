// GEMM-level sweep of the W4A16 wgmma tile (measurement only): for DeepSeek-V3
// and Mixtral-8x7B routed problems (M tokens x top-k rows), GEMM1 (N = 2I,
// K = H, gathered rows, SiLU-and-mul) and GEMM2 (N = H, K = I, row scale) are
// timed for several wgmma configurations (instantiated here), the library's
// wgmma and large tiles (through w4a16_grouped_gemm), and cuBLAS bf16 on the
// same routing (one cublasGemmEx per expert over pre-gathered rows, bf16
// weights, no activation: a lower bound of the bf16 baseline's GEMM time).
// CUDA-graph replays over 4 rotating routings (weights >> L2), median; the
// bf16 peak (cuBLAS 8192^3) is measured in the same run. Each row also reports
// the relative L2 difference of its output to the large tile's (a cheap
// full-size cross-check of the new kernel; the tests check against float64).
// Usage: w4a16_wgmma_sweep <out.json> [quick]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../src/cuda/gemm/sm90_w4a16_wgmma_gemm.cuh"
#include "moekit/gemm/w4a16.hpp"

using namespace moekit::gemm;
using namespace moekit::gemm::sm90_w4a16;

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s failed: %s at %d\n", #x, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void fill_bytes(std::uint8_t* p, std::size_t n, std::uint32_t seed, int lo, int hi) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] =
        hi > lo ? static_cast<std::uint8_t>(lo + x % (hi - lo + 1)) : static_cast<std::uint8_t>(x);
  }
}
__global__ void fill_bf16(__nv_bfloat16* p, std::size_t n, std::uint32_t seed, float amp) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2bfloat16(((x % 2001) / 1000.0f - 1.0f) * amp);
  }
}
// Relative L2 difference of two bf16 arrays (host side, after download).
double rel_l2(const std::vector<std::uint16_t>& a, const std::vector<std::uint16_t>& b) {
  auto f = [](std::uint16_t h) {
    std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
    float v;
    std::memcpy(&v, &u, 4);
    return static_cast<double>(v);
  };
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = f(a[i]), y = f(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double bf16_peak() {
  const int n = 8192;
  __nv_bfloat16 *a, *b, *c;
  CK(cudaMalloc(&a, sizeof(__nv_bfloat16) * n * n));
  CK(cudaMalloc(&b, sizeof(__nv_bfloat16) * n * n));
  CK(cudaMalloc(&c, sizeof(__nv_bfloat16) * n * n));
  fill_bf16<<<1024, 256>>>(a, std::size_t(n) * n, 1, 1.0f);
  fill_bf16<<<1024, 256>>>(b, std::size_t(n) * n, 2, 1.0f);
  cublasHandle_t h;
  cublasCreate(&h);
  const float one = 1, zero = 0;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < 10; ++r) {
    CK(cudaEventRecord(e0));
    cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                 &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 3) ms.push_back(t);
  }
  cublasDestroy(h);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
  return 2.0 * n * double(n) * n / (median(ms) * 1e-3);
}

struct Routing {
  std::vector<std::int32_t> offsets_h, row_index_h;
  std::int32_t *offsets, *row_index;
  float* row_scale;
};

// Times `launch(routing)` as a graph over all routings; returns us per launch.
float time_graph(cudaStream_t s, std::vector<Routing>& routings, int reps,
                 const std::function<void(const Routing&)>& launch) {
  for (auto& r : routings) launch(r);
  CK(cudaStreamSynchronize(s));
  CK(cudaGetLastError());
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (auto& r : routings) launch(r);
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < reps + 1; ++r) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 1) ms.push_back(t * 1000.0f / routings.size());
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return median(ms);
}

struct Variant {
  const char* name;
  // Launches the variant's NVFP4 kernel for epilogue 0 / 1.
  std::function<cudaError_t(const Params&, int epi, std::int64_t m, cudaStream_t)> run;
};

template <typename Cfg>
Variant make_variant(const char* name) {
  return {name, [](const Params& p, int epi, std::int64_t m, cudaStream_t s) {
            return epi ? launch_w4a16_wgmma<Cfg, true, 1>(p, m, 0, s)
                       : launch_w4a16_wgmma<Cfg, true, 0>(p, m, 0, s);
          }};
}

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "w4a16_wgmma_sweep.json";
  const bool quick = argc > 2 && std::string(argv[2]) == "quick";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double peak = bf16_peak();
  std::printf("device %s, SMs %d; bf16 cuBLAS 8192^3 %.0f TFLOP/s\n", prop.name,
              prop.multiProcessorCount, peak / 1e12);
  FILE* js = std::fopen(out_path, "w");
  std::fprintf(js, "{\n \"device\": \"%s\", \"bf16_peak_flops\": %.4e,\n \"rows\": [\n", prop.name,
               peak);
  bool first_row = true;

  // WgmmaConfig<tokens, weight stages, staging stages, narrow tails, bulk
  // activation copies, fence>.
  const std::vector<Variant> variants = {
      make_variant<WgmmaConfig<128, 8, 4>>("wg128/w8/a4"),
      make_variant<WgmmaConfig<128, 8, 6>>("wg128/w8/a6"),
      make_variant<WgmmaConfig<128, 4, 4>>("wg128/w4/a4"),
      make_variant<WgmmaConfig<128, 8, 4, false>>("wg128/w8/a4/notails"),
      make_variant<WgmmaConfig<128, 8, 4, true, true>>("wg128/w8/a4/bulk"),
      make_variant<WgmmaConfig<64, 8, 4>>("wg64/w8/a4"),
      make_variant<WgmmaConfig<256, 4, 3, false>>("wg256/w4/a3/notails"),
      make_variant<WgmmaConfig<128, 8, 4, true, false, false>>("wg128/w8/a4/nofence(racy)"),
  };
  struct Preset {
    const char* name;
    int e, topk;
    std::int64_t h, i;
  };
  const std::vector<Preset> presets = {{"deepseek-v3", 256, 8, 7168, 2048},
                                       {"mixtral-8x7b", 8, 2, 4096, 14336}};
  const std::vector<int> ms_list = quick ? std::vector<int>{4096} : std::vector<int>{4096, 512};
  constexpr int kRoutings = 4;
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  cublasHandle_t cublas;
  cublasCreate(&cublas);
  cublasSetStream(cublas, stream);
  std::printf("%-13s %5s %-5s %-6s %-26s %9s %8s %6s %9s\n", "preset", "M", "gemm", "fmt", "kernel",
              "time_us", "TFLOP/s", "peak", "rel_diff");
  for (int m : ms_list) {
    for (const Preset& pr : presets) {
      const int rows = m * pr.topk;
      std::mt19937 rng(4321 + m);
      std::vector<Routing> routings(kRoutings);
      for (auto& r : routings) {
        std::vector<int> ids(rows), perm(pr.e);
        for (int t = 0; t < m; ++t) {
          for (int j = 0; j < pr.e; ++j) perm[j] = j;
          for (int j = 0; j < pr.topk; ++j) {
            std::swap(perm[j], perm[j + rng() % (pr.e - j)]);
            ids[t * pr.topk + j] = perm[j];
          }
        }
        std::vector<int> order(rows);
        for (int q = 0; q < rows; ++q) order[q] = q;
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
        r.offsets_h.assign(pr.e + 1, 0);
        r.row_index_h.resize(rows);
        std::vector<float> rs(rows);
        for (int q = 0; q < rows; ++q) {
          r.offsets_h[ids[order[q]] + 1]++;
          r.row_index_h[q] = order[q] / pr.topk;
          rs[q] = 0.125f + (rng() % 100) / 200.0f;
        }
        for (int j = 0; j < pr.e; ++j) r.offsets_h[j + 1] += r.offsets_h[j];
        CK(cudaMalloc(&r.offsets, sizeof(std::int32_t) * (pr.e + 1)));
        CK(cudaMalloc(&r.row_index, sizeof(std::int32_t) * rows));
        CK(cudaMalloc(&r.row_scale, sizeof(float) * rows));
        CK(cudaMemcpy(r.offsets, r.offsets_h.data(), sizeof(std::int32_t) * (pr.e + 1),
                      cudaMemcpyHostToDevice));
        CK(cudaMemcpy(r.row_index, r.row_index_h.data(), sizeof(std::int32_t) * rows,
                      cudaMemcpyHostToDevice));
        CK(cudaMemcpy(r.row_scale, rs.data(), sizeof(float) * rows, cudaMemcpyHostToDevice));
      }
      for (int gemm = 1; gemm <= 2; ++gemm) {
        const std::int64_t n = gemm == 1 ? 2 * pr.i : pr.h, k = gemm == 1 ? pr.h : pr.i;
        const std::int64_t out_w = gemm == 1 ? n / 2 : n;
        const std::int64_t a_rows = gemm == 1 ? m : rows;
        const double flops = 2.0 * rows * n * k;
        const int reps = m >= 4096 ? 5 : 9;
        __nv_bfloat16 *a, *out;
        CK(cudaMalloc(&a, sizeof(__nv_bfloat16) * a_rows * k));
        CK(cudaMalloc(&out, sizeof(__nv_bfloat16) * rows * out_w));
        fill_bf16<<<1024, 256>>>(a, std::size_t(a_rows) * k, 7 + gemm, gemm == 1 ? 1.0f : 0.05f);
        auto emit = [&](const char* fmt, const std::string& kernel, float us, double rel) {
          const double tf = flops / (us * 1e-6) / 1e12;
          std::printf("%-13s %5d GEMM%d %-6s %-26s %9.1f %8.1f %5.1f%% %9.2e\n", pr.name, m, gemm,
                      fmt, kernel.c_str(), us, tf, 100.0 * tf * 1e12 / peak, rel);
          std::fflush(stdout);
          std::fprintf(js,
                       "%s  {\"preset\": \"%s\", \"m\": %d, \"gemm\": %d, \"format\": "
                       "\"%s\", "
                       "\"kernel\": \"%s\", \"time_us\": %.2f, \"tflops\": %.2f, "
                       "\"peak_frac\": %.4f, \"rel_diff_vs_large\": %.3e}",
                       first_row ? "" : ",\n", pr.name, m, gemm, fmt, kernel.c_str(), us, tf,
                       tf * 1e12 / peak, rel);
          first_row = false;
          std::fflush(js);
        };
        for (W4Format f : {W4Format::kNVFP4, W4Format::kMXFP4}) {
          const bool nv = f == W4Format::kNVFP4;
          const int sfv = w4_scale_block(f);
          const std::size_t wb = std::size_t(pr.e) * n * k / 2;
          std::uint8_t *w, *s;
          float* alpha;
          CK(cudaMalloc(&w, wb));
          CK(cudaMalloc(&s, wb * 2 / sfv));
          CK(cudaMalloc(&alpha, sizeof(float) * pr.e));
          fill_bytes<<<4096, 256>>>(w, wb, 11 + gemm, 0, 0);
          fill_bytes<<<4096, 256>>>(s, wb * 2 / sfv, 13 + gemm, nv ? 0x20 : 118, nv ? 0x40 : 126);
          std::vector<float> alpha_h(pr.e, 1.0f / 448.0f);
          CK(cudaMemcpy(alpha, alpha_h.data(), sizeof(float) * pr.e, cudaMemcpyHostToDevice));
          auto args_for = [&](const Routing& r, W4Tile tile) {
            W4A16GemmArgs g;
            g.format = f;
            g.epilogue = gemm == 1 ? W4Epilogue::kSiluAndMul : W4Epilogue::kNone;
            g.tile = tile;
            g.num_experts = pr.e;
            g.m = rows;
            g.n = n;
            g.k = k;
            g.expert_offsets = r.offsets;
            g.a = a;
            g.row_index = gemm == 1 ? r.row_index : nullptr;
            g.w = w;
            g.w_scales = s;
            g.alpha = nv ? alpha : nullptr;
            g.row_scale = gemm == 2 ? r.row_scale : nullptr;
            g.out = out;
            g.stream = stream;
            return g;
          };
          auto download = [&] {
            std::vector<std::uint16_t> h(rows * out_w);
            CK(cudaStreamSynchronize(stream));
            CK(cudaMemcpy(h.data(), out, h.size() * 2, cudaMemcpyDeviceToHost));
            return h;
          };
          // Reference output: the large tile on routing 0.
          w4a16_grouped_gemm(args_for(routings[0], W4Tile::kLarge));
          const std::vector<std::uint16_t> ref = download();
          const char* fname = nv ? "nvfp4" : "mxfp4";
          for (W4Tile tile : {W4Tile::kLarge, W4Tile::kWgmma}) {
            const float us = time_graph(stream, routings, reps, [&](const Routing& r) {
              w4a16_grouped_gemm(args_for(r, tile));
            });
            w4a16_grouped_gemm(args_for(routings[0], tile));
            emit(fname, "lib:" + w4_tile_name(tile), us, rel_l2(download(), ref));
          }
          if (nv) {
            for (const Variant& v : variants) {
              auto run = [&](const Routing& r) {
                const W4A16GemmArgs g = args_for(r, W4Tile::kWgmma);
                Params p{};
                p.expert_offsets = g.expert_offsets;
                p.a = static_cast<const __nv_bfloat16*>(g.a);
                p.lda = k;
                p.row_index = g.row_index;
                p.w = g.w;
                p.w_scales = g.w_scales;
                p.alpha = g.alpha;
                p.row_scale = g.row_scale;
                p.out = out;
                p.ldo = out_w;
                p.num_experts = pr.e;
                p.n = static_cast<int>(n);
                p.k = static_cast<int>(k);
                p.swiglu_alpha = 1.702f;
                p.swiglu_limit = 7.0f;
                p.m = rows;
                CK(v.run(p, gemm == 1 ? 1 : 0, rows, stream));
              };
              const float us = time_graph(stream, routings, reps, run);
              run(routings[0]);
              emit(fname, v.name, us, rel_l2(download(), ref));
            }
          }
          CK(cudaFree(w));
          CK(cudaFree(s));
          CK(cudaFree(alpha));
        }
        // cuBLAS bf16 per expert on the same routings (pre-gathered rows).
        {
          __nv_bfloat16 *wb16, *ag;
          CK(cudaMalloc(&wb16, sizeof(__nv_bfloat16) * pr.e * n * k));
          CK(cudaMalloc(&ag, sizeof(__nv_bfloat16) * rows * k));
          fill_bf16<<<4096, 256>>>(wb16, std::size_t(pr.e) * n * k, 21 + gemm, 0.02f);
          fill_bf16<<<1024, 256>>>(ag, std::size_t(rows) * k, 23 + gemm, 1.0f);
          __nv_bfloat16* cb;
          CK(cudaMalloc(&cb, sizeof(__nv_bfloat16) * rows * n));
          const float one = 1, zero = 0;
          const float us = time_graph(stream, routings, reps, [&](const Routing& r) {
            for (int x = 0; x < pr.e; ++x) {
              const int r0 = r.offsets_h[x], re = r.offsets_h[x + 1] - r0;
              if (re == 0) continue;
              cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), re,
                           static_cast<int>(k), &one, wb16 + std::size_t(x) * n * k, CUDA_R_16BF,
                           static_cast<int>(k), ag + std::size_t(r0) * k, CUDA_R_16BF,
                           static_cast<int>(k), &zero, cb + std::size_t(r0) * n, CUDA_R_16BF,
                           static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            }
          });
          emit("bf16", "cublas-per-expert", us, 0.0);
          CK(cudaFree(wb16));
          CK(cudaFree(ag));
          CK(cudaFree(cb));
        }
        CK(cudaFree(a));
        CK(cudaFree(out));
      }
      for (auto& r : routings) {
        CK(cudaFree(r.offsets));
        CK(cudaFree(r.row_index));
        CK(cudaFree(r.row_scale));
      }
    }
  }
  std::fprintf(js, "\n ]\n}\n");
  std::fclose(js);
  cublasDestroy(cublas);
  return 0;
}
