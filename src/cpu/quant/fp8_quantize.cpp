// CPU reference of the FP8 E4M3 schemes with fp32 decode scales (formats.md section 5):
// per-tensor, per-token, DeepSeek 1x128 activation groups and 128x128 weight tiles.
#include <algorithm>
#include <vector>

#include "cpu/quant/quantize_cpu.hpp"
#include "cpu/quant/row_io.hpp"
#include "moekit/quant/codecs.hpp"
#include "quant/quantize_checks.hpp"

namespace moekit::cpu {

namespace {

constexpr std::int64_t kGroup = 128;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Decode scale of element (row i of all B*M rows, column k).
struct ScaleIndex {
  QuantScheme scheme;
  std::int64_t rows, groups;
  std::int64_t operator()(std::int64_t i, std::int64_t k) const {
    switch (scheme) {
      case QuantScheme::kFP8PerTensor:
        return i / rows;
      case QuantScheme::kFP8PerToken:
        return i;
      case QuantScheme::kFP8Block1x128:
        return i * groups + k / kGroup;
      default: {  // 128x128
        const std::int64_t b = i / rows, r = i % rows;
        return (b * ceil_div(rows, kGroup) + r / kGroup) * groups + k / kGroup;
      }
    }
  }
};

}  // namespace

void quantize_fp8(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
                  const TensorView& static_scale) {
  const auto d = quant_detail::matrix_dims(x.shape);
  const QuantScheme scheme = config.scheme;
  const std::int64_t total_rows = d.batch * d.rows, cols = d.cols;
  const std::int64_t groups = ceil_div(cols, kGroup);
  std::uint8_t* values = out.values.ptr<std::uint8_t>();
  float* scales = out.scales.ptr<float>();

  if (scheme == QuantScheme::kFP8Block128x128) {
    // One task per (matrix, 128-row tile band): amax of every tile in the band, then quantize.
    const std::int64_t bands = ceil_div(d.rows, kGroup);
    parallel_for(d.batch * bands, 1, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> row(static_cast<std::size_t>(cols));
      std::vector<float> amax(static_cast<std::size_t>(groups));
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t b = t / bands, band = t % bands;
        const std::int64_t r0 = band * kGroup, r1 = std::min(d.rows, r0 + kGroup);
        std::fill(amax.begin(), amax.end(), 0.0f);
        for (std::int64_t r = r0; r < r1; ++r) {
          load_f32(x, (b * d.rows + r) * cols, cols, row.data());
          for (std::int64_t k = 0; k < cols; ++k) {
            float& m = amax[static_cast<std::size_t>(k / kGroup)];
            m = absmax_accumulate(m, row[static_cast<std::size_t>(k)]);
          }
        }
        float* s = scales + t * groups;
        for (std::int64_t gi = 0; gi < groups; ++gi) s[gi] = fp8_block_scale(amax[gi]);
        for (std::int64_t r = r0; r < r1; ++r) {
          const std::int64_t i = b * d.rows + r;
          load_f32(x, i * cols, cols, row.data());
          for (std::int64_t k = 0; k < cols; ++k) {
            values[i * cols + k] =
                fp8_quantize_element(row[static_cast<std::size_t>(k)], s[k / kGroup]);
          }
        }
      }
    });
    return;
  }

  std::vector<float> matrix_s;
  if (scheme == QuantScheme::kFP8PerTensor) {
    if (static_scale.defined()) {
      const float* s = static_scale.ptr<const float>();
      matrix_s.assign(s, s + d.batch);
    } else {
      matrix_s = matrix_amax(x, d.batch, d.rows, cols);
      for (float& v : matrix_s) v = fp8_tensor_scale(v);
    }
    std::copy(matrix_s.begin(), matrix_s.end(), scales);
  }

  for_each_row(x, total_rows, cols, [&](std::int64_t i, const float* row) {
    std::uint8_t* dst = values + i * cols;
    if (scheme == QuantScheme::kFP8Block1x128) {
      for (std::int64_t gi = 0; gi < groups; ++gi) {
        const std::int64_t k0 = gi * kGroup, k1 = std::min(cols, k0 + kGroup);
        const float s = fp8_block_scale(absmax(row + k0, k1 - k0));
        scales[i * groups + gi] = s;
        for (std::int64_t k = k0; k < k1; ++k) dst[k] = fp8_quantize_element(row[k], s);
      }
      return;
    }
    float s;
    if (scheme == QuantScheme::kFP8PerTensor) {
      s = matrix_s[static_cast<std::size_t>(i / d.rows)];
    } else {
      s = fp8_token_scale(absmax(row, cols));
      scales[i] = s;
    }
    for (std::int64_t k = 0; k < cols; ++k) dst[k] = fp8_quantize_element(row[k], s);
  });
}

void dequantize_fp8(const QuantizedView& q, const TensorView& out) {
  const auto d = quant_detail::matrix_dims(out.shape);
  const std::int64_t cols = d.cols;
  const ScaleIndex index{q.config.scheme, d.rows, ceil_div(cols, kGroup)};
  const std::uint8_t* values = q.values.ptr<const std::uint8_t>();
  const float* scales = q.scales.ptr<const float>();
  float* dst = out.ptr<float>();
  parallel_for(d.batch * d.rows, row_grain(cols), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float* e4m3 = e4m3_values();
      // Scales are constant over runs of 128 columns (or the whole row).
      for (std::int64_t k0 = 0; k0 < cols; k0 += kGroup) {
        const float s = scales[index(i, k0)];
        const std::int64_t k1 = std::min(cols, k0 + kGroup);
        for (std::int64_t k = k0; k < k1; ++k)
          dst[i * cols + k] = mul_rn(e4m3[values[i * cols + k]], s);
      }
    }
  });
}

}  // namespace moekit::cpu
