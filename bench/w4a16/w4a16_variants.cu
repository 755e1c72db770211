// Kernel-variant sweep for the W4A16 decode path (measurement only): each
// variant's GEMM1 and GEMM2 timed separately as CUDA-graph replays over 8
// rotating routings (weights L2-cold), reported as achieved weight bandwidth.
// Mode "profile" runs one layer per preset once (for ncu); "occupancy" sweeps decode shapes at
// 1 / 8 tokens (occupancy_sweep). Usage:
// w4a16_variants [profile | occupancy]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../../src/cuda/gemm/sm90_decode_grouped_gemm.cuh"
#include "../../src/cuda/gemm/sm90_w4a16_grouped_gemm.cuh"
#include "moekit/gemm/w4a16.hpp"

using namespace moekit::gemm;
using namespace moekit::gemm::sm90_w4a16;
using namespace moekit::gemm::sm90_decode;

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

// Read-only streaming ceiling: the touched bytes read once with 16-byte loads
// (L2 256B prefetch).
__global__ void stream_read_kernel(const uint4* p, std::size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) *sink = acc;
}

struct Problem {
  int e, topk, m;
  std::int64_t n, k;
  int epi;
  const char* name;
};

struct Setup {
  std::uint8_t *w, *s;
  __nv_bfloat16 *x, *out;
  std::vector<std::int32_t*> offsets, row_index;
  double distinct = 0;
};

Setup make_setup(const Problem& p, bool gather) {
  Setup s;
  const std::size_t wb = std::size_t(p.e) * p.n * p.k / 2;
  CK(cudaMalloc(&s.w, wb));
  CK(cudaMalloc(&s.s, wb / 8));
  fill_random<<<4096, 256>>>(s.w, wb, 3, 0, 0);
  fill_random<<<4096, 256>>>(s.s, wb / 8, 4, 0x20, 0x40);
  const int rows = p.m * p.topk;
  CK(cudaMalloc(&s.x, sizeof(__nv_bfloat16) * rows * p.k));
  CK(cudaMemset(s.x, 0x3c, sizeof(__nv_bfloat16) * rows * p.k));
  CK(cudaMalloc(&s.out, sizeof(__nv_bfloat16) * rows * p.n));
  std::mt19937 rng(5);
  for (int set = 0; set < 8; ++set) {
    std::vector<int> ids(rows), perm(p.e);
    for (int t = 0; t < p.m; ++t) {
      for (int j = 0; j < p.e; ++j) perm[j] = j;
      for (int j = 0; j < p.topk; ++j) {
        std::swap(perm[j], perm[j + rng() % (p.e - j)]);
        ids[t * p.topk + j] = perm[j];
      }
    }
    std::vector<int> order(rows);
    for (int r = 0; r < rows; ++r) order[r] = r;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
    std::vector<std::int32_t> off(p.e + 1, 0), ri(rows);
    for (int r = 0; r < rows; ++r) {
      off[ids[order[r]] + 1]++;
      ri[r] = gather ? order[r] / p.topk : r;
    }
    for (int j = 0; j < p.e; ++j) s.distinct += off[j + 1] > 0;
    for (int j = 0; j < p.e; ++j) off[j + 1] += off[j];
    std::int32_t *d_off, *d_ri;
    CK(cudaMalloc(&d_off, sizeof(std::int32_t) * (p.e + 1)));
    CK(cudaMalloc(&d_ri, sizeof(std::int32_t) * rows));
    CK(cudaMemcpy(d_off, off.data(), sizeof(std::int32_t) * (p.e + 1), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_ri, ri.data(), sizeof(std::int32_t) * rows, cudaMemcpyHostToDevice));
    s.offsets.push_back(d_off);
    s.row_index.push_back(d_ri);
  }
  s.distinct /= 8;
  CK(cudaDeviceSynchronize());
  return s;
}

void free_setup(Setup& s) {
  CK(cudaFree(s.w));
  CK(cudaFree(s.s));
  CK(cudaFree(s.x));
  CK(cudaFree(s.out));
  for (auto* q : s.offsets) CK(cudaFree(q));
  for (auto* q : s.row_index) CK(cudaFree(q));
}

// Dynamic shared memory of either kernel.
template <typename Cfg>
int smem_of(int experts) {
  if constexpr (requires { Cfg::kWarpsM; })
    return Cfg::smem_bytes(experts);
  else
    return decode_smem_bytes<Cfg, W4Codec<true>>(experts, false);
}

template <typename Cfg, bool kSkip>
auto kernel_of(int epi) {
  if constexpr (requires { Cfg::kWarpsM; }) {
    return epi ? w4a16_grouped_gemm_kernel<Cfg, true, 1, kSkip>
               : w4a16_grouped_gemm_kernel<Cfg, true, 0, kSkip>;
  } else {
    return epi ? decode_grouped_gemm_kernel<Cfg, W4Codec<true>, 1>
               : decode_grouped_gemm_kernel<Cfg, W4Codec<true>, 0>;
  }
}

template <typename Cfg, bool kSkip>
void launch(const Problem& p, const Setup& s, int set, cudaStream_t stream, bool all_units,
            int csize = 1) {
  Params params{};
  params.expert_offsets = s.offsets[set];
  params.a = s.x;
  params.lda = p.k;
  params.row_index = s.row_index[set];
  params.w = s.w;
  params.w_scales = s.s;
  params.out = s.out;
  params.ldo = p.epi ? p.n / 2 : p.n;
  params.num_experts = p.e;
  params.n = static_cast<int>(p.n);
  params.k = static_cast<int>(p.k);
  params.swiglu_alpha = 1.702f;
  params.swiglu_limit = 7.0f;
  const int smem = smem_of<Cfg>(p.e);
  auto kernel = kernel_of<Cfg, kSkip>(p.epi);
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, smem));
  const int rows = p.m * p.topk;
  const std::int64_t bound = ((rows + Cfg::kTokens - 1) / Cfg::kTokens + std::min(p.e, rows)) *
                             ((p.n + Cfg::kRows - 1) / Cfg::kRows);
  if (csize > 1) {  // decode kernel, split-K over a cluster of csize CTAs
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = csize;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.blockDim = dim3(Cfg::kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cfg.gridDim = dim3(csize * 132);
    int clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    cfg.gridDim = dim3(static_cast<unsigned>(std::min<std::int64_t>(bound, clusters) * csize));
    if constexpr (requires { Cfg::kWarpsM; })
      CK(cudaLaunchKernelEx(&cfg, kernel, params));
    else
      CK(cudaLaunchKernelEx(&cfg, kernel, params, DecodeMaps{}));
    return;
  }
  const std::int64_t grid = all_units ? bound : std::min<std::int64_t>(bound, per_sm * 132);
  if constexpr (requires { Cfg::kWarpsM; })
    kernel<<<grid, Cfg::kThreads, smem, stream>>>(params);
  else
    kernel<<<grid, Cfg::kThreads, smem, stream>>>(params, DecodeMaps{});
  CK(cudaGetLastError());
}

template <typename Cfg, bool kSkip = false>
void measure(const char* vname, const Problem& p, const Setup& s, cudaStream_t stream,
             bool all_units = false, int csize = 1) {
  for (int set = 0; set < 8; ++set) launch<Cfg, kSkip>(p, s, set, stream, all_units, csize);
  CK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int set = 0; set < 8; ++set) launch<Cfg, kSkip>(p, s, set, stream, all_units, csize);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < 22; ++r) {
    CK(cudaEventRecord(e0, stream));
    CK(cudaGraphLaunch(exec, stream));
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 2) ms.push_back(t / 8);
  }
  std::sort(ms.begin(), ms.end());
  const double t = ms[ms.size() / 2] * 1e-3;
  const double bytes = s.distinct * p.n * p.k * 0.5625;
  int per_sm = 0;
  auto kernel = kernel_of<Cfg, kSkip>(0);
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads,
                                                   smem_of<Cfg>(p.e)));
  const double flops = 2.0 * p.m * p.topk * double(p.n) * p.k;
  std::printf("%-22s %-26s %8.1f us %7.0f GB/s %6.1f TFLOP/s (ctas/sm %d)\n", p.name, vname,
              t * 1e6, bytes / t / 1e9, flops / t / 1e12, per_sm);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
}

void stream_read(const Problem& p, const Setup& s, cudaStream_t stream) {
  // Same byte count as the touched experts, read contiguously from rotating
  // offsets (L2-cold).
  const std::size_t bytes = static_cast<std::size_t>(s.distinct * p.n * p.k / 2);
  const std::size_t total = std::size_t(p.e) * p.n * p.k / 2;
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < 24; ++r) {
    const std::size_t off = (bytes * r) % (total - bytes + 1) / 16 * 16;
    CK(cudaEventRecord(e0, stream));
    stream_read_kernel<<<132 * 8, 512, 0, stream>>>(reinterpret_cast<const uint4*>(s.w + off),
                                                    bytes / 16, sink);
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r >= 4) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double t = ms[ms.size() / 2] * 1e-3;
  std::printf("%-22s %-26s %8.1f us %7.0f GB/s (codes only, contiguous)\n", p.name, "stream-read",
              t * 1e6, bytes / t / 1e9);
  CK(cudaFree(sink));
}

// Decode sizes (1 and 8 tokens on the small presets): CTA shapes with more warps per SM (fewer
// registers per thread) or shorter per-warp chains, against the two kAuto configurations.
int occupancy_sweep(cudaStream_t stream) {
  const std::vector<Problem> problems = {
      {128, 4, 1, 5760, 2880, 1, "gptoss M1 gemm1"}, {128, 4, 1, 2880, 2880, 0, "gptoss M1 gemm2"},
      {128, 8, 1, 3072, 4096, 1, "qwen3 M1 gemm1"},  {128, 8, 1, 4096, 1536, 0, "qwen3 M1 gemm2"},
      {256, 8, 1, 4096, 7168, 1, "dsv3 M1 gemm1"},   {256, 8, 1, 7168, 2048, 0, "dsv3 M1 gemm2"},
      {128, 4, 8, 5760, 2880, 1, "gptoss M8 gemm1"}, {128, 4, 8, 2880, 2880, 0, "gptoss M8 gemm2"},
      {128, 8, 8, 3072, 4096, 1, "qwen3 M8 gemm1"},  {128, 8, 8, 4096, 1536, 0, "qwen3 M8 gemm2"},
  };
  for (const Problem& p : problems) {
    Setup s = make_setup(p, p.epi == 1);
    stream_read(p, s, stream);
    measure<DecodeConfig<4, 2, 1, 4, 4>>("D8 <4,2,1,4,4>", p, s, stream);
    measure<DecodeConfig<4, 4, 1, 2, 4>>("wide <4,4,1,2,4>", p, s, stream);
    measure<DecodeConfig<4, 1, 1, 4, 8>>("<4,1,1,4,8> 16r 8/SM", p, s, stream);
    measure<DecodeConfig<4, 1, 1, 8, 8>>("<4,1,1,8,8> 16r ring8", p, s, stream);
    measure<DecodeConfig<8, 1, 1, 4, 4>>("<8,1,1,4,4> 16r 8Kw", p, s, stream);
    measure<DecodeConfig<4, 2, 1, 2, 6>>("<4,2,1,2,6> 32r 6/SM", p, s, stream);
    measure<DecodeConfig<2, 2, 1, 4, 8>>("<2,2,1,4,8> 32r 2Kw", p, s, stream);
    measure<DecodeConfig<4, 2, 1, 4, 4>>("D8 cluster2", p, s, stream, false, 2);
    free_setup(s);
  }
  return 0;
}

int main(int argc, char** argv) {
  const bool profile = argc > 1 && std::string(argv[1]) == "profile";
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  if (argc > 1 && std::string(argv[1]) == "occupancy") return occupancy_sweep(stream);
  const std::vector<Problem> problems = {
      {256, 8, 1, 4096, 7168, 1, "dsv3 M1 gemm1"},
      {256, 8, 1, 7168, 2048, 0, "dsv3 M1 gemm2"},
      {128, 8, 1, 3072, 4096, 1, "qwen3 M1 gemm1"},
      {128, 4, 1, 2880, 2880, 0, "gptoss M1 gemm2"},
      {8, 2, 1, 28672, 4096, 1, "mixtral M1 gemm1"},
      {8, 2, 1, 4096, 14336, 0, "mixtral M1 gemm2"},
      {128, 4, 8, 5760, 2880, 1, "gptoss M8 gemm1"},
      {128, 4, 8, 2880, 2880, 0, "gptoss M8 gemm2"},
      {8, 2, 64, 28672, 4096, 1, "mixtral M64 gemm1"},
      {8, 2, 64, 4096, 14336, 0, "mixtral M64 gemm2"},
      {256, 8, 64, 4096, 7168, 1, "dsv3 M64 gemm1"},
      {256, 8, 64, 7168, 2048, 0, "dsv3 M64 gemm2"},
  };
  using D8 = DecodeConfig<4, 2, 1, 4, 4>;
  for (const Problem& p : problems) {
    Setup s = make_setup(p, p.epi == 1);
    if (profile) {
      if (p.m == 1) {
        launch<D8, false>(p, s, 0, stream, false);
        CK(cudaStreamSynchronize(stream));
      }
    } else if (p.m == 64 && p.e == 8) {
      stream_read(p, s, stream);
      measure<DecodeConfig<2, 1, 2, 4, 8>>("decode16 <2,1,2,4,8>", p, s, stream);
      measure<TileConfig<4, 1, 1, 2, 4, 4>>("mid32 <4,1,1,2,4,4>", p, s, stream);
      measure<TileConfig<4, 1, 1, 2, 4, 6>>("<4,1,1,2,4,6> 6 stages", p, s, stream);
      measure<TileConfig<4, 1, 1, 4, 4, 4>>("<4,1,1,4,4,4> 256x32", p, s, stream);
      measure<TileConfig<8, 1, 1, 2, 4, 4>>("<8,1,1,2,4,4> 256x32", p, s, stream);
      measure<TileConfig<4, 1, 1, 2, 8, 4>>("large <4,1,1,2,8,4>", p, s, stream);
    } else {
      stream_read(p, s, stream);
      measure<D8>("decode8 <4,2,1,4,4>", p, s, stream);
      measure<D8>("decode8 cluster2", p, s, stream, false, 2);
      measure<DecodeConfig<4, 4, 1, 2, 4>>("wide <4,4,1,2,4>", p, s, stream);
      measure<DecodeConfig<4, 4, 1, 2, 4>>("wide cluster2", p, s, stream, false, 2);
      measure<DecodeConfig<4, 4, 1, 4, 2>>("<4,4,1,4,2> ring 4", p, s, stream);
      measure<DecodeConfig<2, 4, 1, 2, 8>>("<2,4,1,2,8> 2 K-warps", p, s, stream);
      measure<DecodeConfig<8, 4, 1, 2, 2>>("<8,4,1,2,2> 8 K-warps", p, s, stream);
      measure<DecodeConfig<4, 6, 1, 2, 3>>("<4,6,1,2,3> 96 rows", p, s, stream);
    }
    free_setup(s);
  }
  return 0;
}
