// Standalone benchmark of the SM90 W4A16 expert GEMMs (GEMM1 with fused gather
// + activation, then GEMM2 with the top-k weight fused as a row scale): one MoE
// layer's expert part, per preset, format and token count, timed as CUDA-graph
// replays over rotating routings (so the touched experts' weights come from
// HBM), against the floor max(W / copy bandwidth, F / bf16 peak) with both
// ceilings measured in the same run.
// Usage: w4a16_bench <out.json> [quick | decode | mid | prefill]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "moekit/gemm/w4a16.hpp"

using namespace moekit::gemm;

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s failed: %s at %d\n", #x, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void fill_random(std::uint8_t* p, std::size_t n, std::uint32_t seed, int lo, int hi) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] =
        hi > lo ? static_cast<std::uint8_t>(lo + x % (hi - lo + 1)) : static_cast<std::uint8_t>(x);
  }
}
__global__ void fill_bf16(__nv_bfloat16* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2bfloat16((x % 2001) / 1000.0f - 1.0f);
  }
}

struct Preset {
  const char* name;
  int e, topk;
  std::int64_t h, i;
  W4Epilogue act;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double measure_copy_bw() {
  const std::size_t bytes = std::size_t{2} << 30;
  void *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < 12; ++r) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 2) ms.push_back(t);
  }
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * bytes / (median(ms) * 1e-3);
}

double measure_bf16_peak() {
  const int n = 8192;
  __nv_bfloat16 *a, *b, *c;
  CK(cudaMalloc(&a, sizeof(__nv_bfloat16) * n * n));
  CK(cudaMalloc(&b, sizeof(__nv_bfloat16) * n * n));
  CK(cudaMalloc(&c, sizeof(__nv_bfloat16) * n * n));
  fill_bf16<<<1024, 256>>>(a, std::size_t(n) * n, 1);
  fill_bf16<<<1024, 256>>>(b, std::size_t(n) * n, 2);
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
  std::int32_t *offsets, *row_index;
  float* row_scale;
  int distinct;
};

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : "w4a16_bench.json";
  const std::string mode = argc > 2 ? argv[2] : "";  // "quick": M 1, 64; "decode": M 1, 8, 64
  const bool quick = mode == "quick";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double bw = measure_copy_bw();
  const double peak = measure_bf16_peak();
  std::printf("device %s, SMs %d, L2 %d MB; copy %.0f GB/s, bf16 cuBLAS %.0f TFLOP/s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, bw / 1e9, peak / 1e12);

  const std::vector<Preset> presets = {
      {"deepseek-v3", 256, 8, 7168, 2048, W4Epilogue::kSiluAndMul},
      {"qwen3-235b-a22b", 128, 8, 4096, 1536, W4Epilogue::kSiluAndMul},
      {"gpt-oss-120b", 128, 4, 2880, 2880, W4Epilogue::kSwigluOai},
      {"mixtral-8x7b", 8, 2, 4096, 14336, W4Epilogue::kSiluAndMul},
  };
  const std::vector<int> token_counts =
      quick ? std::vector<int>{1, 64}
      : mode == "decode" ? std::vector<int>{1, 8, 64}
      : mode == "mid"     ? std::vector<int>{512}
      : mode == "prefill" ? std::vector<int>{512, 4096}
                          : std::vector<int>{1, 8, 64, 512, 4096};
  FILE* js = std::fopen(out_path, "w");
  std::fprintf(js,
               "{\n \"device\": \"%s\", \"copy_bw_Bps\": %.4e, "
               "\"bf16_peak_flops\": %.4e,\n \"rows\": [\n",
               prop.name, bw, peak);
  bool first_row = true;
  std::printf("%-16s %-6s %5s %-9s %9s %9s %7s %9s %s\n", "preset", "fmt", "M", "tile", "time_us",
              "floor_us", "frac", "TFLOP/s", "D");
  constexpr int kSets = 8;
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  for (const Preset& p : presets) {
    for (W4Format f : {W4Format::kNVFP4, W4Format::kMXFP4}) {
      const int sfv = w4_scale_block(f);
      const std::size_t w13_bytes = std::size_t(p.e) * 2 * p.i * p.h / 2;
      const std::size_t w2_bytes = std::size_t(p.e) * p.h * p.i / 2;
      std::uint8_t *w13, *w2, *s13, *s2;
      CK(cudaMalloc(&w13, w13_bytes));
      CK(cudaMalloc(&w2, w2_bytes));
      CK(cudaMalloc(&s13, w13_bytes * 2 / sfv));
      CK(cudaMalloc(&s2, w2_bytes * 2 / sfv));
      fill_random<<<4096, 256>>>(w13, w13_bytes, 11, 0, 0);
      fill_random<<<4096, 256>>>(w2, w2_bytes, 12, 0, 0);
      const int lo = f == W4Format::kNVFP4 ? 0x20 : 118, hi = f == W4Format::kNVFP4 ? 0x40 : 126;
      fill_random<<<4096, 256>>>(s13, w13_bytes * 2 / sfv, 13, lo, hi);
      fill_random<<<4096, 256>>>(s2, w2_bytes * 2 / sfv, 14, lo, hi);
      std::vector<float> alpha_h(p.e, 1.0f / 448.0f);
      float* alpha;
      CK(cudaMalloc(&alpha, sizeof(float) * p.e));
      CK(cudaMemcpy(alpha, alpha_h.data(), sizeof(float) * p.e, cudaMemcpyHostToDevice));
      CK(cudaDeviceSynchronize());
      for (int m : token_counts) {
        const int rows = m * p.topk;
        __nv_bfloat16 *x, *act, *y;
        // m x topk rows: the wgmma tile reads its (already gathered) rows in order.
        CK(cudaMalloc(&x, sizeof(__nv_bfloat16) * m * p.topk * p.h));
        CK(cudaMalloc(&act, sizeof(__nv_bfloat16) * rows * p.i));
        CK(cudaMalloc(&y, sizeof(__nv_bfloat16) * rows * p.h));
        fill_bf16<<<1024, 256>>>(x, std::size_t(m) * p.topk * p.h, 7);
        std::mt19937 rng(1234 + m);
        std::vector<Routing> sets(kSets);
        double distinct_sum = 0;
        for (auto& s : sets) {
          std::vector<int> ids(rows);
          std::vector<int> perm(p.e);
          for (int t = 0; t < m; ++t) {
            for (int j = 0; j < p.e; ++j) perm[j] = j;
            for (int j = 0; j < p.topk; ++j) {  // distinct experts per token
              std::swap(perm[j], perm[j + rng() % (p.e - j)]);
              ids[t * p.topk + j] = perm[j];
            }
          }
          std::vector<int> order(rows);
          for (int r = 0; r < rows; ++r) order[r] = r;
          std::stable_sort(order.begin(), order.end(),
                           [&](int a, int b) { return ids[a] < ids[b]; });
          std::vector<std::int32_t> off(p.e + 1, 0), ri(rows);
          std::vector<float> rs(rows);
          for (int r = 0; r < rows; ++r) {
            off[ids[order[r]] + 1]++;
            ri[r] = order[r] / p.topk;
            rs[r] = 0.125f + (rng() % 100) / 200.0f;
          }
          s.distinct = 0;
          for (int j = 0; j < p.e; ++j) s.distinct += off[j + 1] > 0;
          for (int j = 0; j < p.e; ++j) off[j + 1] += off[j];
          distinct_sum += s.distinct;
          CK(cudaMalloc(&s.offsets, sizeof(std::int32_t) * (p.e + 1)));
          CK(cudaMalloc(&s.row_index, sizeof(std::int32_t) * rows));
          CK(cudaMalloc(&s.row_scale, sizeof(float) * rows));
          CK(cudaMemcpy(s.offsets, off.data(), sizeof(std::int32_t) * (p.e + 1),
                        cudaMemcpyHostToDevice));
          CK(cudaMemcpy(s.row_index, ri.data(), sizeof(std::int32_t) * rows,
                        cudaMemcpyHostToDevice));
          CK(cudaMemcpy(s.row_scale, rs.data(), sizeof(float) * rows, cudaMemcpyHostToDevice));
        }
        const double d = distinct_sum / kSets;
        const double bpw = f == W4Format::kNVFP4 ? 0.5625 : 0.53125;
        const double wbytes = d * 3.0 * p.h * p.i * bpw;
        const double flops = 2.0 * m * p.topk * 3.0 * p.h * p.i;
        const double floor_s = std::max(wbytes / bw, flops / peak);

        // (tile, k_split, GEMM2 launched as a PDL dependent of GEMM1): auto
        // first (the library's choice), then forced ones; "/ks1" = cluster
        // split-K off (the v3 behaviour), "/pdl" = GEMM2 overlaps GEMM1's tail.
        struct Row {
          W4Tile tile;
          int k_split;
          bool pdl;
        };
        std::vector<Row> tiles = {{W4Tile::kAuto, 0, false}, {W4Tile::kAuto, 0, true}};
        if (m <= 64)
          tiles.insert(tiles.end(), {{W4Tile::kAuto, 1, false},
                                     {W4Tile::kDecode8, 0, false},
                                     {W4Tile::kDecode16, 0, false},
                                     {W4Tile::kMid32, 0, false}});
        else
          tiles.insert(tiles.end(), {{W4Tile::kMid32, 0, false},
                                     {W4Tile::kLarge, 0, false},
                                     {W4Tile::kWgmma, 0, false}});
        if (m == 512) tiles.push_back({W4Tile::kDecode16, 0, false});  // 16 rows/expert (v5)
        for (const auto& [tile, k_split, pdl] : tiles) {
          auto layer = [&](const Routing& s) {
            W4A16GemmArgs g1;
            g1.format = f;
            g1.epilogue = p.act;
            g1.tile = tile;
            g1.num_experts = p.e;
            g1.m = rows;
            g1.n = 2 * p.i;
            g1.k = p.h;
            g1.expert_offsets = s.offsets;
            g1.a = x;
            g1.row_index = tile == W4Tile::kWgmma ? nullptr : s.row_index;
            g1.w = w13;
            g1.w_scales = s13;
            g1.alpha = f == W4Format::kNVFP4 ? alpha : nullptr;
            g1.out = act;
            g1.stream = stream;
            g1.k_split = k_split;
            // The wgmma tile reads (and GEMM1 writes GEMM2's) activations in the wgmma K order,
            // rows gathered; the random x stands for already converted rows (timing only).
            if (tile == W4Tile::kWgmma) g1.a_order = g1.out_order = W4KOrder::kWgmma;
            w4a16_grouped_gemm(g1);
            W4A16GemmArgs g2 = g1;
            g2.epilogue = W4Epilogue::kNone;
            g2.n = p.h;
            g2.k = p.i;
            g2.a = act;
            g2.row_index = nullptr;
            g2.w = w2;
            g2.w_scales = s2;
            g2.row_scale = s.row_scale;
            g2.out_order = W4KOrder::kNatural;
            g2.out = y;
            if (tile == W4Tile::kAuto) g2.tile = W4Tile::kAuto;
            g2.overlap_previous = pdl;
            w4a16_grouped_gemm(g2);
          };
          for (auto& s : sets) layer(s);  // warm-up (module load, attributes)
          CK(cudaStreamSynchronize(stream));
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
          for (auto& s : sets) layer(s);
          CK(cudaStreamEndCapture(stream, &graph));
          CK(cudaGraphInstantiate(&exec, graph, 0));
          cudaEvent_t e0, e1;
          CK(cudaEventCreate(&e0));
          CK(cudaEventCreate(&e1));
          const int reps = (m >= 4096) ? 5 : 25;
          std::vector<float> ms;
          for (int r = 0; r < reps + 2; ++r) {
            CK(cudaEventRecord(e0, stream));
            CK(cudaGraphLaunch(exec, stream));
            CK(cudaEventRecord(e1, stream));
            CK(cudaEventSynchronize(e1));
            float t;
            CK(cudaEventElapsedTime(&t, e0, e1));
            if (r >= 2) ms.push_back(t / kSets);
          }
          std::sort(ms.begin(), ms.end());
          const double t_s = ms[ms.size() / 2] * 1e-3;
          const double spread = (ms.back() - ms.front()) / ms[ms.size() / 2];
          W4A16GemmArgs probe;
          probe.tile = tile;
          probe.num_experts = p.e;
          probe.m = rows;
          const std::string tname =
              w4_tile_name(tile) +
              (tile == W4Tile::kAuto ? "(" + w4_tile_name(w4a16_resolve_tile(probe)) + ")" : "") +
              (k_split == 1 ? "/ks1" : "") + (pdl ? "/pdl" : "");
          std::printf("%-16s %-6s %5d %-18s %9.1f %9.1f %7.3f %9.1f %.1f\n", p.name,
                      w4_format_name(f).c_str(), m, tname.c_str(), t_s * 1e6, floor_s * 1e6,
                      floor_s / t_s, flops / t_s / 1e12, d);
          std::fflush(stdout);
          std::fprintf(js,
                       "%s  {\"preset\": \"%s\", \"format\": \"%s\", \"m\": "
                       "%d, \"tile\": \"%s\", "
                       "\"time_us\": %.2f, \"spread\": %.3f, \"floor_us\": "
                       "%.2f, \"floor_frac\": %.4f, "
                       "\"tflops\": %.2f, \"distinct_experts\": %.2f, "
                       "\"weight_bytes\": %.4e}",
                       first_row ? "" : ",\n", p.name, w4_format_name(f).c_str(), m, tname.c_str(),
                       t_s * 1e6, spread, floor_s * 1e6, floor_s / t_s, flops / t_s / 1e12, d,
                       wbytes);
          first_row = false;
          std::fflush(js);
          CK(cudaGraphExecDestroy(exec));
          CK(cudaGraphDestroy(graph));
          CK(cudaEventDestroy(e0));
          CK(cudaEventDestroy(e1));
        }
        for (auto& s : sets) {
          CK(cudaFree(s.offsets));
          CK(cudaFree(s.row_index));
          CK(cudaFree(s.row_scale));
        }
        CK(cudaFree(x));
        CK(cudaFree(act));
        CK(cudaFree(y));
      }
      CK(cudaFree(w13));
      CK(cudaFree(w2));
      CK(cudaFree(s13));
      CK(cudaFree(s2));
      CK(cudaFree(alpha));
    }
  }
  std::fprintf(js, "\n ]\n}\n");
  std::fclose(js);
  return 0;
}
