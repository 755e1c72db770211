// Helpers for the bf16 / fp8-block grouped GEMM tests: seeds, host codecs (bf16 RNE, e4m3 RNE
// saturating), device buffers, the float64 references and the relative L2 error.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemm/grouped_gemm.hpp"
#include "moekit/activation/activation.hpp"

namespace moekit::gemm_test {

// Seed: MOEKIT_TEST_SEED if set, else fresh; logged through RecordProperty and printed.
inline std::uint64_t test_seed() {
  std::uint64_t seed = 0;
  if (const char* env = std::getenv("MOEKIT_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  return seed;
}

#define MOEKIT_TEST_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

inline float bf16_to_float(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::uint16_t float_to_bf16(float f) {  // round to nearest even (finite inputs)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

inline float e4m3_to_float(std::uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                   : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
  if (e == 15 && m == 7) v = NAN;
  return s ? -v : v;
}
// Round to nearest, ties to even code; saturates to +-448.
inline std::uint8_t float_to_e4m3(float x) {
  const float a = std::min(std::fabs(x), 448.0f);
  std::uint8_t best = 0;
  float best_err = INFINITY;
  for (int c = 0; c < 127; ++c) {  // codes 0..126 are the non-negative finite values, ascending
    const float err = std::fabs(e4m3_to_float(static_cast<std::uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best_err = err;
      best = static_cast<std::uint8_t>(c);
    }
  }
  return static_cast<std::uint8_t>(best | (x < 0 ? 0x80 : 0));
}

// Owning device buffer.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : n_(n) {
    if (n_ > 0 && cudaMalloc(&p_, n_ * sizeof(T)) != cudaSuccess) p_ = nullptr;
  }
  explicit DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) { upload(h); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return static_cast<T*>(p_); }
  void upload(const std::vector<T>& h) {
    if (!h.empty()) cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_ > 0) cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

inline double rel_l2(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double d = out[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// expert_offsets [E+1] from per-expert counts.
inline std::vector<std::int32_t> offsets_of(const std::vector<int>& counts) {
  std::vector<std::int32_t> off(counts.size() + 1, 0);
  for (std::size_t e = 0; e < counts.size(); ++e) off[e + 1] = off[e] + counts[e];
  return off;
}

// D[r, n] = sum_k A[r, k] * B[e(r), n, k] in float64 (A, B given as float values).
inline std::vector<double> grouped_reference(const std::vector<float>& a,
                                             const std::vector<float>& b,
                                             const std::vector<std::int32_t>& off, int n, int k) {
  const int E = static_cast<int>(off.size()) - 1;
  std::vector<double> d(static_cast<std::size_t>(off[E]) * n, 0.0);
  for (int e = 0; e < E; ++e)
    for (int r = off[e]; r < off[e + 1]; ++r)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        const float* ar = &a[static_cast<std::size_t>(r) * k];
        const float* br = &b[(static_cast<std::size_t>(e) * n + j) * k];
        for (int x = 0; x < k; ++x) acc += static_cast<double>(ar[x]) * br[x];
        d[static_cast<std::size_t>(r) * n + j] = acc;
      }
  return d;
}

// Random inputs of the fused-GEMM1 tests, drawn from rng in this order: x [x_rows, k] ~ N(0, 1),
// w [E, n, k] ~ N(0, 1) * 2 / sqrt(k) (keeps the pre-activations ~ N(0, 4)), bias [E, n] ~ N(0, 1);
// x and w as bf16 bits and as the floats those bits hold.
struct GatedInputs {
  std::vector<std::uint16_t> x_bits, w_bits;
  std::vector<float> x, w, bias;
};
inline GatedInputs random_gated_inputs(std::mt19937_64& rng, std::size_t x_rows, int E, int n,
                                       int k) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  GatedInputs in;
  in.x_bits.resize(x_rows * k);
  in.w_bits.resize(static_cast<std::size_t>(E) * n * k);
  in.x.resize(in.x_bits.size());
  in.w.resize(in.w_bits.size());
  in.bias.resize(static_cast<std::size_t>(E) * n);
  const float w_scale = 2.0f / std::sqrt(static_cast<float>(k));
  for (std::size_t i = 0; i < in.x.size(); ++i)
    in.x[i] = bf16_to_float(in.x_bits[i] = float_to_bf16(dist(rng)));
  for (std::size_t i = 0; i < in.w.size(); ++i)
    in.w[i] = bf16_to_float(in.w_bits[i] = float_to_bf16(dist(rng) * w_scale));
  for (auto& b : in.bias) b = dist(rng);
  return in;
}

// The gated activation of the fused-GEMM1 tests: SiLU-and-mul, or SwiGLU-OAI with gpt-oss's alpha
// and a small limit (both clamps bind for part of the outputs), with the device bias f32 [E, N].
constexpr float kTestSwigluAlpha = 1.702f, kTestSwigluLimit = 1.5f;
inline gemm::GemmEpilogue test_gated_epilogue(Activation kind, const float* bias) {
  gemm::GemmEpilogue epi;
  epi.kind = kind == Activation::kSwigluOai ? gemm::EpilogueKind::kSwigluOai
                                            : gemm::EpilogueKind::kSiluAndMul;
  epi.swiglu_alpha = kTestSwigluAlpha;
  epi.swiglu_limit = kTestSwigluLimit;
  epi.bias = bias;
  return epi;
}

// GEMM1 with its gated activation in float64: for every row r of expert e (off), over columns c
// of I = n / 2: g = bias[e, c] + x[src(r)] . w[e, c], u = bias[e, I + c] + x[src(r)] . w[e, I + c]
// (src(r) = row_index[r], or r when row_index is empty), then SiLU(g) * u, or with swiglu the
// SwiGLU-OAI of gpt-oss (g clamped above at limit, u to [-limit, limit], g * sigmoid(alpha g) *
// (u + 1)). Rows in order, [rows used, I].
inline std::vector<double> gated_grouped_reference(
    const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
    const std::vector<std::int32_t>& off, const std::vector<std::int32_t>& row_index, int n, int k,
    bool swiglu, double alpha, double limit) {
  const int E = static_cast<int>(off.size()) - 1, I = n / 2;
  std::vector<double> ref;
  for (int e = 0; e < E; ++e)
    for (int r = off[e]; r < off[e + 1]; ++r)
      for (int c = 0; c < I; ++c) {
        double g = bias[static_cast<std::size_t>(e) * n + c],
               u = bias[static_cast<std::size_t>(e) * n + I + c];
        const int src = row_index.empty() ? r : row_index[static_cast<std::size_t>(r)];
        const float* xr = x.data() + static_cast<std::size_t>(src) * k;
        const float* wg = w.data() + (static_cast<std::size_t>(e) * n + c) * k;
        const float* wu = w.data() + (static_cast<std::size_t>(e) * n + I + c) * k;
        for (int q = 0; q < k; ++q) {
          g += static_cast<double>(xr[q]) * wg[q];
          u += static_cast<double>(xr[q]) * wu[q];
        }
        if (!swiglu) {
          ref.push_back(g / (1.0 + std::exp(-g)) * u);
        } else {
          g = std::min(g, limit);
          u = std::clamp(u, -limit, limit);
          ref.push_back(g / (1.0 + std::exp(-alpha * g)) * (u + 1.0));
        }
      }
  return ref;
}

// Block-quantizes W [E, N, K] to e4m3 with 128x128 scales [E, ceil(N/128), K/128]; returns the
// codes, the scales and the dequantized values (what the kernel multiplies).
struct BlockQuantized {
  std::vector<std::uint8_t> q;
  std::vector<float> scales;
  std::vector<float> dequant;
};
inline BlockQuantized quantize_weight_128x128(const std::vector<float>& w, int E, int n, int k) {
  const int nb = (n + 127) / 128, kb = k / 128;
  BlockQuantized out{std::vector<std::uint8_t>(w.size()),
                     std::vector<float>(static_cast<std::size_t>(E) * nb * kb),
                     std::vector<float>(w.size())};
  for (int e = 0; e < E; ++e)
    for (int bn = 0; bn < nb; ++bn)
      for (int bk = 0; bk < kb; ++bk) {
        float amax = 0;
        for (int j = bn * 128; j < std::min(n, bn * 128 + 128); ++j)
          for (int x = bk * 128; x < bk * 128 + 128; ++x)
            amax = std::max(amax, std::fabs(w[(static_cast<std::size_t>(e) * n + j) * k + x]));
        const float s = std::max(amax, 1e-10f) / 448.0f;
        out.scales[(static_cast<std::size_t>(e) * nb + bn) * kb + bk] = s;
        for (int j = bn * 128; j < std::min(n, bn * 128 + 128); ++j)
          for (int x = bk * 128; x < bk * 128 + 128; ++x) {
            const std::size_t i = (static_cast<std::size_t>(e) * n + j) * k + x;
            out.q[i] = float_to_e4m3(w[i] / s);
            out.dequant[i] = e4m3_to_float(out.q[i]) * s;
          }
      }
  return out;
}

// 1x128 groups of rows of A [R, K]: codes, scales [R, K/128], dequantized values.
inline BlockQuantized quantize_act_1x128(const std::vector<float>& a, int rows, int k) {
  const int kb = k / 128;
  BlockQuantized out{std::vector<std::uint8_t>(a.size()),
                     std::vector<float>(static_cast<std::size_t>(rows) * kb),
                     std::vector<float>(a.size())};
  for (int r = 0; r < rows; ++r)
    for (int bk = 0; bk < kb; ++bk) {
      float amax = 0;
      for (int x = bk * 128; x < bk * 128 + 128; ++x)
        amax = std::max(amax, std::fabs(a[static_cast<std::size_t>(r) * k + x]));
      const float s = std::max(amax, 1e-10f) / 448.0f;
      out.scales[static_cast<std::size_t>(r) * kb + bk] = s;
      for (int x = bk * 128; x < bk * 128 + 128; ++x) {
        const std::size_t i = static_cast<std::size_t>(r) * k + x;
        out.q[i] = float_to_e4m3(a[i] / s);
        out.dequant[i] = e4m3_to_float(out.q[i]) * s;
      }
    }
  return out;
}

}  // namespace moekit::gemm_test
