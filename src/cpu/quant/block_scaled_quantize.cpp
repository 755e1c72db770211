// CPU reference of the block-scaled schemes: NVFP4, NVFP4PerToken, MXFP4 (e2m1 values) and MXFP8
// (e4m3 values), formats.md sections 3-6.
#include <cstring>
#include <vector>

#include "cpu/quant/quantize_cpu.hpp"
#include "cpu/quant/row_io.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/quant/layout.hpp"
#include "quant/quantize_checks.hpp"

namespace moekit::cpu {

namespace {

static_assert(static_cast<int>(ScaleRule::kRceil) == static_cast<int>(MxRule::kRceil) &&
              static_cast<int>(ScaleRule::kFloor) == static_cast<int>(MxRule::kFloor));

struct BlockGeometry {
  std::int64_t batch, rows, cols;
  int sfv;
  std::int64_t kb;            // scale columns per row
  std::int64_t scale_matrix;  // bytes of one matrix's scale buffer (padded)
  ScaleLayout layout;
  std::int64_t scale_index(std::int64_t b, std::int64_t r, std::int64_t c) const {
    return b * scale_matrix + scale_offset(layout, r, c, kb);
  }
};

BlockGeometry geometry(const Shape& shape, const QuantConfig& config) {
  const auto d = quant_detail::matrix_dims(shape);
  BlockGeometry g{};
  g.batch = d.batch;
  g.rows = d.rows;
  g.cols = d.cols;
  g.sfv = scale_block_size(config.scheme);
  g.kb = d.cols / g.sfv;
  g.layout = config.layout;
  g.scale_matrix = scale_padded_rows(g.layout, g.rows) * scale_padded_cols(g.layout, g.kb);
  return g;
}

}  // namespace

void quantize_block_scaled(const TensorView& x, const QuantConfig& config, const QuantizedView& out,
                           const TensorView& static_scale) {
  const BlockGeometry g = geometry(x.shape, config);
  const QuantScheme scheme = config.scheme;
  const auto rule = static_cast<MxRule>(config.rule);
  std::uint8_t* scales = out.scales.ptr<std::uint8_t>();
  std::uint8_t* values = out.values.ptr<std::uint8_t>();
  // Padding rows / columns of swizzled layouts are 0.
  if (g.batch * g.scale_matrix > 0) {
    std::memset(scales, 0, static_cast<std::size_t>(g.batch * g.scale_matrix));
  }

  // NVFP4 per-matrix encode scale: static, or 2688 / amax.
  std::vector<float> matrix_gs;
  if (scheme == QuantScheme::kNVFP4) {
    if (static_scale.defined()) {
      const float* s = static_scale.ptr<const float>();
      matrix_gs.assign(s, s + g.batch);
    } else {
      matrix_gs = matrix_amax(x, g.batch, g.rows, g.cols);
      for (float& v : matrix_gs) v = nvfp4_global_scale(v);
    }
    std::memcpy(out.global_scale.data, matrix_gs.data(), matrix_gs.size() * sizeof(float));
  }
  float* row_gs_out =
      scheme == QuantScheme::kNVFP4PerToken ? out.global_scale.ptr<float>() : nullptr;

  const bool fp4 = is_fp4(scheme);
  const std::int64_t value_row_bytes = fp4 ? g.cols / 2 : g.cols;
  for_each_row(x, g.batch * g.rows, g.cols, [&](std::int64_t i, const float* row) {
    const std::int64_t b = i / g.rows, r = i % g.rows;
    std::uint8_t* vrow = values + i * value_row_bytes;
    float gs = 1.0f;
    if (scheme == QuantScheme::kNVFP4) {
      gs = matrix_gs[static_cast<std::size_t>(b)];
    } else if (scheme == QuantScheme::kNVFP4PerToken) {
      gs = nvfp4_global_scale(absmax(row, g.cols));
      row_gs_out[i] = gs;
    }
    for (std::int64_t c = 0; c < g.kb; ++c) {
      const float* blk = row + c * g.sfv;
      const float vmax = absmax(blk, g.sfv);
      std::uint8_t sf = 0;
      float out_scale;
      switch (scheme) {
        case QuantScheme::kNVFP4:
        case QuantScheme::kNVFP4PerToken:
          out_scale = nvfp4_block_scale(vmax, gs, &sf);
          break;
        case QuantScheme::kMXFP4:
          out_scale = mxfp4_block_scale(vmax, rule, &sf);
          break;
        default:
          out_scale = mxfp8_block_scale(vmax, rule, &sf);
          break;
      }
      scales[g.scale_index(b, r, c)] = sf;
      if (fp4) {
        // Codes first (a loop the compiler vectorizes), then the nibble packing.
        std::uint8_t codes[32];
        for (int j = 0; j < g.sfv; ++j) codes[j] = fp4_quantize_element(blk[j], out_scale);
        std::uint8_t* dst = vrow + c * g.sfv / 2;
        for (int j = 0; j < g.sfv; j += 2) dst[j / 2] = pack_e2m1x2(codes[j], codes[j + 1]);
      } else {
        std::uint8_t* dst = vrow + c * g.sfv;
        for (int j = 0; j < g.sfv; ++j) dst[j] = mxfp8_quantize_element(blk[j], out_scale);
      }
    }
  });
}

void dequantize_block_scaled(const QuantizedView& q, const TensorView& out) {
  const BlockGeometry g = geometry(out.shape, q.config);
  const QuantScheme scheme = q.config.scheme;
  const std::uint8_t* scales = q.scales.ptr<const std::uint8_t>();
  const std::uint8_t* values = q.values.ptr<const std::uint8_t>();
  const float* gs_all = q.global_scale.ptr<const float>();
  float* dst_all = out.ptr<float>();
  const bool fp4 = is_fp4(scheme);
  const std::int64_t value_row_bytes = fp4 ? g.cols / 2 : g.cols;
  parallel_for(g.batch * g.rows, row_grain(g.cols), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t b = i / g.rows, r = i % g.rows;
      const std::uint8_t* vrow = values + i * value_row_bytes;
      float* dst = dst_all + i * g.cols;
      const float gs = scheme == QuantScheme::kNVFP4           ? gs_all[b]
                       : scheme == QuantScheme::kNVFP4PerToken ? gs_all[i]
                                                               : 1.0f;
      for (std::int64_t c = 0; c < g.kb; ++c) {
        const std::uint8_t sf = scales[g.scale_index(b, r, c)];
        float* d = dst + c * g.sfv;
        if (fp4) {
          // The value depends only on (code, sf, gs): a 16-entry table per block, same bits.
          float lut[16];
          for (int code = 0; code < 16; ++code) {
            const auto cc = static_cast<std::uint8_t>(code);
            lut[code] = scheme == QuantScheme::kMXFP4 ? mul_rn(e2m1_to_float(cc), e8m0_to_float(sf))
                                                      : nvfp4_dequantize_element(cc, sf, gs);
          }
          const std::uint8_t* src = vrow + c * g.sfv / 2;
          for (int j = 0; j < g.sfv / 2; ++j) {
            d[2 * j] = lut[src[j] & 0xF];
            d[2 * j + 1] = lut[src[j] >> 4];
          }
        } else {
          const float* e4m3 = e4m3_values();
          const float scale = e8m0_to_float(sf);
          const std::uint8_t* src = vrow + c * g.sfv;
          for (int j = 0; j < g.sfv; ++j) d[j] = mul_rn(e4m3[src[j]], scale);
        }
      }
    }
  });
}

}  // namespace moekit::cpu
