// Host implementations of the block-scale layout transforms (formats.md section 6).
#include "moekit/quant/layout.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "moekit/core/error.hpp"
#include "moekit/core/parallel.hpp"

namespace moekit {

namespace {

void check_byte_tensor(const char* where, const char* name, const TensorView& t) {
  if (t.data == nullptr && t.numel() != 0)
    throw_arg_error(where, name, "a tensor", "an absent tensor");
  if (dtype_size(t.dtype) != 1) {
    throw_arg_error(where, std::string(name) + ".dtype", "a 1-byte scale type (e4m3, e8m0, u8)",
                    dtype_name(t.dtype));
  }
  if (!t.is_contiguous()) {
    throw_arg_error(where, name, "a contiguous tensor", "strides " + t.strides.str());
  }
  if (!t.device.is_host())
    throw_arg_error(where, std::string(name) + ".device", "host", t.device.str());
  if (t.rank() != 2 && t.rank() != 3) {
    throw_arg_error(where, std::string(name) + ".shape", "[rows, cols] or [B, rows, cols]",
                    t.shape.str());
  }
}

Shape with_batch(const TensorView& like, std::int64_t rows, std::int64_t cols) {
  return like.rank() == 3 ? Shape{like.shape[0], rows, cols} : Shape{rows, cols};
}

}  // namespace

void swizzle_scales(const TensorView& linear, ScaleLayout layout, const TensorView& out) {
  const char* where = "swizzle_scales";
  check_byte_tensor(where, "linear", linear);
  check_byte_tensor(where, "out", out);
  const std::int64_t rows = linear.size(-2), kb = linear.size(-1);
  const std::int64_t batch = linear.rank() == 3 ? linear.shape[0] : 1;
  const std::int64_t prow = scale_padded_rows(layout, rows), pcol = scale_padded_cols(layout, kb);
  const Shape expected = with_batch(linear, prow, pcol);
  if (!(out.shape == expected))
    throw_arg_error(where, "out.shape", expected.str(), out.shape.str());
  if (out.dtype != linear.dtype) {
    throw_arg_error(where, "out.dtype", dtype_name(linear.dtype), dtype_name(out.dtype));
  }
  const auto* src = linear.ptr<const std::uint8_t>();
  auto* dst = out.ptr<std::uint8_t>();
  const std::int64_t matrix = prow * pcol;
  if (batch * matrix > 0) std::memset(dst, 0, static_cast<std::size_t>(batch * matrix));
  parallel_for(batch * rows, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(kb, 1)),
               [&](std::int64_t begin, std::int64_t end) {
                 for (std::int64_t i = begin; i < end; ++i) {
                   const std::int64_t b = i / rows, r = i % rows;
                   for (std::int64_t c = 0; c < kb; ++c) {
                     dst[b * matrix + scale_offset(layout, r, c, kb)] = src[i * kb + c];
                   }
                 }
               });
}

void unswizzle_scales(const TensorView& swizzled, ScaleLayout layout, std::int64_t rows,
                      std::int64_t scale_cols, const TensorView& out) {
  const char* where = "unswizzle_scales";
  check_byte_tensor(where, "swizzled", swizzled);
  check_byte_tensor(where, "out", out);
  if (rows < 0) throw_arg_error(where, "rows", ">= 0", rows);
  if (scale_cols < 0) throw_arg_error(where, "scale_cols", ">= 0", scale_cols);
  const std::int64_t prow = scale_padded_rows(layout, rows);
  const std::int64_t pcol = scale_padded_cols(layout, scale_cols);
  const Shape expected_in = with_batch(swizzled, prow, pcol);
  if (!(swizzled.shape == expected_in)) {
    throw_arg_error(where, "swizzled.shape", expected_in.str(), swizzled.shape.str());
  }
  const Shape expected = with_batch(swizzled, rows, scale_cols);
  if (!(out.shape == expected))
    throw_arg_error(where, "out.shape", expected.str(), out.shape.str());
  if (out.dtype != swizzled.dtype) {
    throw_arg_error(where, "out.dtype", dtype_name(swizzled.dtype), dtype_name(out.dtype));
  }
  const std::int64_t batch = swizzled.rank() == 3 ? swizzled.shape[0] : 1;
  const auto* src = swizzled.ptr<const std::uint8_t>();
  auto* dst = out.ptr<std::uint8_t>();
  const std::int64_t matrix = prow * pcol;
  parallel_for(
      batch * rows, std::max<std::int64_t>(1, 65536 / std::max<std::int64_t>(scale_cols, 1)),
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          const std::int64_t b = i / rows, r = i % rows;
          for (std::int64_t c = 0; c < scale_cols; ++c) {
            dst[i * scale_cols + c] = src[b * matrix + scale_offset(layout, r, c, scale_cols)];
          }
        }
      });
}

}  // namespace moekit
