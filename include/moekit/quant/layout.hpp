// Block-scale layouts (formats.md section 6): linear, swizzled 128x4 (tensor-core MMA layout) and
// swizzled 8x4 (small-M). Byte-addressed; scales are 1-byte types (e4m3 / e8m0).
#pragma once

#include <cstdint>

#include "moekit/core/host_device.hpp"
#include "moekit/core/tensor.hpp"
#include "moekit/quant/scheme.hpp"

namespace moekit {

// Byte offset of scale (r, c) of a [rows, scale_cols] matrix in the given layout.
MOEKIT_HD std::int64_t scale_offset(ScaleLayout layout, std::int64_t r, std::int64_t c,
                                    std::int64_t scale_cols) {
  const std::int64_t kp = 4 * ((scale_cols + 3) / 4);
  const std::int64_t tk = kp / 4;
  switch (layout) {
    case ScaleLayout::kLinear:
      return r * scale_cols + c;
    case ScaleLayout::kSwizzled128x4:
      return ((r / 128) * tk + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
    case ScaleLayout::kSwizzled8x4:
      return ((r / 8) * tk + c / 4) * 32 + (r % 8) * 4 + (c % 4);
  }
  return -1;
}

// Padded rows / cols of one matrix's scale buffer in a layout (linear: unpadded).
// scale_offset split into a row part and a column part (scale_offset(l, r, c, kb) ==
// scale_row_offset(l, r, kb) + scale_col_offset(l, c)), so a kernel whose threads keep their
// column across rows computes the column part once.
MOEKIT_HD std::int64_t scale_row_offset(ScaleLayout layout, std::int64_t r,
                                        std::int64_t scale_cols) {
  // Unsigned shifts and masks (r, scale_cols >= 0): no signed-division fix-ups in kernels.
  const std::uint64_t ur = static_cast<std::uint64_t>(r);
  const std::uint64_t tk = (static_cast<std::uint64_t>(scale_cols) + 3) >> 2;
  switch (layout) {
    case ScaleLayout::kLinear:
      return r * scale_cols;
    case ScaleLayout::kSwizzled128x4:
      return static_cast<std::int64_t>((ur >> 7) * tk * 512 + (ur & 31) * 16 + ((ur >> 5) & 3) * 4);
    case ScaleLayout::kSwizzled8x4:
      return static_cast<std::int64_t>((ur >> 3) * tk * 32 + (ur & 7) * 4);
  }
  return -1;
}
MOEKIT_HD std::int64_t scale_col_offset(ScaleLayout layout, std::int64_t c) {
  const std::uint64_t uc = static_cast<std::uint64_t>(c);
  switch (layout) {
    case ScaleLayout::kLinear:
      return c;
    case ScaleLayout::kSwizzled128x4:
      return static_cast<std::int64_t>((uc >> 2) * 512 + (uc & 3));
    case ScaleLayout::kSwizzled8x4:
      return static_cast<std::int64_t>((uc >> 2) * 32 + (uc & 3));
  }
  return -1;
}

MOEKIT_HD std::int64_t scale_padded_rows(ScaleLayout layout, std::int64_t rows) {
  return layout == ScaleLayout::kSwizzled128x4 ? 128 * ((rows + 127) / 128)
         : layout == ScaleLayout::kSwizzled8x4 ? 8 * ((rows + 7) / 8)
                                               : rows;
}
MOEKIT_HD std::int64_t scale_padded_cols(ScaleLayout layout, std::int64_t scale_cols) {
  return layout == ScaleLayout::kLinear ? scale_cols : 4 * ((scale_cols + 3) / 4);
}

// linear [B?, rows, scale_cols] -> swizzled [B?, Mp, Kp] (padding written as 0), and back.
void swizzle_scales(const TensorView& linear, ScaleLayout layout, const TensorView& out);
void unswizzle_scales(const TensorView& swizzled, ScaleLayout layout, std::int64_t rows,
                      std::int64_t scale_cols, const TensorView& out);

}  // namespace moekit
