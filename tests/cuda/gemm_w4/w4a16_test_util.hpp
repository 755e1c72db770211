// Shared helpers of the W4A16 GPU tests (w4a16_grouped_gemm_test.cpp, w4a16_wgmma_test.cpp):
// bf16 conversions, the e2m1 / e4m3 / e8m0 values, a device array, and random weights in the
// moekit convention with their shuffled form (the reference dequantizes the unshuffled ones).
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm/grouped_gemm_launchers.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_weight_shuffle.hpp"
#include "cuda/gpu_test_util.hpp"
#include "cuda/runtime/current_device.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit::gemm::w4a16_test {

using u8 = std::uint8_t;

// The 4-bit weight formats (QuantScheme::kNVFP4 / kMXFP4) and their W4A16 GEMM schemes.
using W4Format = QuantScheme;
inline int w4_scale_block(W4Format f) { return scale_block_size(f); }
inline std::string w4_format_name(W4Format f) { return std::string(scheme_name(f)); }
inline GemmScheme w4a16_scheme(W4Format f) {
  return f == W4Format::kNVFP4 ? GemmScheme::kW4A16NVFP4 : GemmScheme::kW4A16MXFP4;
}

// The W4A16 kernels the tests sweep: the decode kernel with 8 / 16 tokens per unit, the mma.sync
// tiles, the wgmma kernel (A in its K order).
enum class W4Tile { kDecode8, kDecode16, kMid32, kLarge, kWgmma };
inline std::string w4_tile_name(W4Tile t) {
  switch (t) {
    case W4Tile::kDecode8: return "decode8";
    case W4Tile::kDecode16: return "decode16";
    case W4Tile::kMid32: return "mid32";
    case W4Tile::kLarge: return "large";
    case W4Tile::kWgmma: return "wgmma";
  }
  return "?";
}

// The config of `tile` for a W4A16 GEMM of E experts and `rows` rows (n x k, gated): the tuning
// rules' variant of the kernel for a grid capped at max_ctas (0: the device), a cluster split of
// k_split (0: the rule), a wgmma token tile (0: the rule).
inline GemmConfig w4_config(W4Tile tile, int e, std::int64_t rows, std::int64_t n, std::int64_t k,
                            bool gated, int max_ctas = 0, int k_split = 0, int tokens = 0) {
  const GemmScheme s = GemmScheme::kW4A16NVFP4;
  GemmConfig c;
  switch (tile) {
    case W4Tile::kDecode8:
    case W4Tile::kDecode16: {
      c.kernel = GemmKernel::kDecode;
      c.decode16 = tile == W4Tile::kDecode16;
      // The wide (64-row) variant when its units fill half of the CTA slots the grid may use; the
      // short-K form without epilogue for K <= 2048 when its units fill its slots (the rules of
      // sm90_tuning.cpp, with the cap).
      const int sms = cuda::current_device_multiprocessors();
      auto fills = [&](const GemmConfig& v, int factor) {
        const DecodeShape sh = decode_shape(s, v);
        int slots = sh.min_blocks * sms;
        if (max_ctas > 0) slots = std::min(slots, max_ctas);
        return tuning::sm90::decode_units(e, rows, n, sh.tokens, sh.rows) * factor >= slots;
      };
      GemmConfig wide = c;
      wide.decode_wide = true;
      c.decode_wide = fills(wide, 2);
      if (!c.decode16 && c.decode_wide && !gated && k / 64 <= 32 && k_split <= 1) {
        GemmConfig short_k = wide;
        short_k.decode_short_k = true;
        c.decode_short_k = fills(short_k, 1);
      }
      break;
    }
    case W4Tile::kMid32: c.kernel = GemmKernel::kW4Mid32; break;
    case W4Tile::kLarge: c.kernel = GemmKernel::kW4Large; break;
    case W4Tile::kWgmma:
      c = tuning::sm90::gemm_config_for(s, GemmKernel::kWgmma, e, rows, n, k, gated, true);
      if (tokens != 0 && tokens != c.tokens) {
        c.tokens = tokens;
        c.ctas_per_sm = 1;
        if (tokens == 32) {
          const std::int64_t per_expert = tuning::sm90::rows_per_active_expert(e, rows);
          c.ctas_per_sm = e <= 8 && per_expert <= 24 ? 2 : 3;
        }
      }
      break;
  }
  c.max_ctas = max_ctas;
  c.k_split = k_split;
  return c;
}

inline std::uint32_t test_seed() {
  if (const char* s = std::getenv("MOEKIT_TEST_SEED"))
    return static_cast<std::uint32_t>(std::stoul(s));
  return std::random_device{}();
}

inline float bf16_to_float(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::uint16_t float_to_bf16(float f) {  // RN-even, finite inputs
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

inline double e2m1_value(int code) {
  static const double kMag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8) ? -kMag[code & 7] : kMag[code & 7];
}
inline double e4m3_value(int b) {
  const int e = (b >> 3) & 0xF, m = b & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -v : v;
}
inline double scale_value(W4Format f, int b) {
  return f == W4Format::kNVFP4 ? e4m3_value(b) : std::ldexp(1.0, b - 127);
}

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  std::size_t count = 0;
  explicit DeviceArray(std::size_t n) : count(n) {
    if (n) {
      void* raw = nullptr;
      EXPECT_EQ(cudaMalloc(&raw, n * sizeof(T)), cudaSuccess);
      ptr = static_cast<T*>(raw);
    }
  }
  DeviceArray(const std::vector<T>& h) : DeviceArray(h.size()) { upload(h); }
  ~DeviceArray() { cudaFree(ptr); }
  void upload(const std::vector<T>& h) {
    if (count) {
      EXPECT_EQ(cudaMemcpy(ptr, h.data(), count * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<T> download() const {
    std::vector<T> h(count);
    if (count) {
      EXPECT_EQ(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }
};

// One expert weight set in the moekit convention plus its shuffled form.
struct W4Weights {
  W4Format format;
  int e;
  std::int64_t n, k;
  std::vector<u8> codes, scales, shuffled_codes, shuffled_scales;
  std::vector<float> alpha;  // [E] decode global scale (1 for MXFP4)
  double deq(int ex, std::int64_t row, std::int64_t kk) const {
    const int code = (codes[(ex * n + row) * (k / 2) + kk / 2] >> ((kk % 2) * 4)) & 0xF;
    const int sfv = w4_scale_block(format);
    const int sb = scales[(ex * n + row) * (k / sfv) + kk / sfv];
    return e2m1_value(code) * scale_value(format, sb) * alpha[ex];
  }
};

inline W4Weights random_weights(std::mt19937& rng, W4Format f, int e, std::int64_t n,
                                std::int64_t k, bool gated) {
  W4Weights w{f, e, n, k, {}, {}, {}, {}, {}};
  const int sfv = w4_scale_block(f);
  w.codes.resize(e * n * k / 2);
  w.scales.resize(e * n * k / sfv);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& c : w.codes) c = static_cast<u8>(byte(rng));
  std::uniform_int_distribution<int> nv_sf(0x18, 0x50), mx_sf(115, 130), rare(0, 63);
  for (auto& s : w.scales) {
    if (f == W4Format::kNVFP4) {
      const int r = rare(rng);
      s = static_cast<u8>(r == 0 ? 0 : r == 1 ? 1 + byte(rng) % 7 : nv_sf(rng));  // zero, subnormal
    } else {
      s = static_cast<u8>(mx_sf(rng));
    }
  }
  std::uniform_real_distribution<float> gs(0.5f, 2.0f);
  for (int i = 0; i < e; ++i)
    w.alpha.push_back(f == W4Format::kNVFP4 ? 1.0f / (gs(rng) * 64.0f) : 1.0f);
  w.shuffled_codes.resize(w.codes.size());
  w.shuffled_scales.resize(w.scales.size());
  w4a16_shuffle_weights(f, e, n, k, gated, w.codes.data(), w.scales.data(), w.shuffled_codes.data(),
                        w.shuffled_scales.data());
  return w;
}

// rows x k bf16 (row stride k) in the wgmma K order (KOrder::kWgmma), written out from its
// definition: inside every 64-wide chunk, word w (two bf16) holds natural word 8 (w % 4) + w / 4.
inline std::vector<std::uint16_t> to_wgmma_k_order(const std::vector<std::uint16_t>& a,
                                                   std::int64_t rows, std::int64_t k) {
  std::vector<std::uint16_t> out(a.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < k / 64; ++c)
      for (int w = 0; w < 32; ++w)
        for (int h = 0; h < 2; ++h)
          out[r * k + 64 * c + 2 * w + h] = a[r * k + 64 * c + 2 * (8 * (w % 4) + w / 4) + h];
  return out;
}

}  // namespace moekit::gemm::w4a16_test
