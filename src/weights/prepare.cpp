// Weight preparation (include/moekit/weights/prepare.hpp): row reorders, padding, scale swizzle
// and scale folding. Every row reorder goes through one helper (rows along dim 1 of [E, R, ...]).
#include "moekit/weights/prepare.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "moekit/core/error.hpp"
#include "moekit/quant/layout.hpp"

namespace moekit {
namespace {

void check_host(const TensorView& t, const char* where, const char* name, int min_rank) {
  if (!t.defined()) throw_arg_error(where, name, "a tensor", "absent");
  if (t.rank() < min_rank)
    throw_arg_error(where, std::string(name) + " rank", ">= " + std::to_string(min_rank), t.rank());
  if (!t.device.is_host())
    throw_arg_error(where, std::string(name) + " device", "host", t.device.str());
  if (!t.is_contiguous())
    throw_arg_error(where, std::string(name) + " layout", "contiguous", "strided");
}

// out[e, d, ...] = t[e, src[d], ...] (zeros where src[d] == -1); rows along dim 1.
Tensor gather_rows(const TensorView& t, const std::vector<std::int64_t>& src) {
  std::vector<std::int64_t> dims = t.shape.vec();
  const std::int64_t e = dims[0], rows_in = dims[1];
  std::int64_t inner = 1;
  for (std::size_t d = 2; d < dims.size(); ++d) inner *= dims[d];
  const std::size_t row_bytes = static_cast<std::size_t>(inner) * dtype_size(t.dtype);
  dims[1] = static_cast<std::int64_t>(src.size());
  Tensor out(t.dtype, Shape(dims));
  const auto* in = static_cast<const unsigned char*>(t.data);
  auto* o = static_cast<unsigned char*>(out.data());
  for (std::int64_t x = 0; x < e; ++x) {
    for (std::size_t d = 0; d < src.size(); ++d) {
      unsigned char* dst = o + (static_cast<std::size_t>(x) * src.size() + d) * row_bytes;
      if (src[d] < 0) {
        std::memset(dst, 0, row_bytes);
      } else {
        std::memcpy(dst, in + (static_cast<std::size_t>(x * rows_in + src[d])) * row_bytes,
                    row_bytes);
      }
    }
  }
  return out;
}

std::int64_t even_rows(const TensorView& t, const char* where) {
  check_host(t, where, "t", 2);
  const std::int64_t r = t.shape[1];
  if (r % 2 != 0) throw_arg_error(where, "t.shape[1] (2I)", "even", r);
  return r / 2;
}

}  // namespace

Tensor swap_gate_up(const TensorView& t) {
  const std::int64_t i = even_rows(t, "swap_gate_up");
  std::vector<std::int64_t> src(static_cast<std::size_t>(2 * i));
  for (std::int64_t r = 0; r < i; ++r) {
    src[static_cast<std::size_t>(r)] = i + r;
    src[static_cast<std::size_t>(i + r)] = r;
  }
  return gather_rows(t, src);
}

Tensor deinterleave_gate_up(const TensorView& t) {
  const std::int64_t i = even_rows(t, "deinterleave_gate_up");
  std::vector<std::int64_t> src(static_cast<std::size_t>(2 * i));
  for (std::int64_t r = 0; r < i; ++r) {
    src[static_cast<std::size_t>(r)] = 2 * r;          // gate from even rows
    src[static_cast<std::size_t>(i + r)] = 2 * r + 1;  // up from odd rows
  }
  return gather_rows(t, src);
}

Tensor interleave_gate_up(const TensorView& t) {
  const std::int64_t i = even_rows(t, "interleave_gate_up");
  std::vector<std::int64_t> src(static_cast<std::size_t>(2 * i));
  for (std::int64_t r = 0; r < i; ++r) {
    src[static_cast<std::size_t>(2 * r)] = r;
    src[static_cast<std::size_t>(2 * r + 1)] = i + r;
  }
  return gather_rows(t, src);
}

namespace {

// Row d of the interleaved layout <- row of the halves layout.
std::vector<std::int64_t> linear_gate_map(std::int64_t i, std::int64_t group) {
  std::vector<std::int64_t> src(static_cast<std::size_t>(2 * i));
  for (std::int64_t g = 0; g < i / group; ++g) {
    for (std::int64_t r = 0; r < group; ++r) {
      src[static_cast<std::size_t>(2 * g * group + r)] = i + g * group + r;    // up (linear)
      src[static_cast<std::size_t>((2 * g + 1) * group + r)] = g * group + r;  // gate
    }
  }
  return src;
}

void check_group(std::int64_t i, std::int64_t group, const char* where) {
  if (group < 1) throw_arg_error(where, "group", ">= 1", group);
  if (i % group != 0)
    throw_arg_error(where, "t.shape[1] / 2 (I)", "a multiple of group " + std::to_string(group), i);
}

}  // namespace

Tensor interleave_linear_gate(const TensorView& t, std::int64_t group) {
  const std::int64_t i = even_rows(t, "interleave_linear_gate");
  check_group(i, group, "interleave_linear_gate");
  return gather_rows(t, linear_gate_map(i, group));
}

Tensor deinterleave_linear_gate(const TensorView& t, std::int64_t group) {
  const std::int64_t i = even_rows(t, "deinterleave_linear_gate");
  check_group(i, group, "deinterleave_linear_gate");
  const std::vector<std::int64_t> fwd = linear_gate_map(i, group);
  std::vector<std::int64_t> inv(fwd.size());
  for (std::size_t d = 0; d < fwd.size(); ++d)
    inv[static_cast<std::size_t>(fwd[d])] = static_cast<std::int64_t>(d);
  return gather_rows(t, inv);
}

Tensor swizzle_block_scales(const TensorView& linear, ScaleLayout layout) {
  check_host(linear, "swizzle_block_scales", "linear", 2);
  const std::int64_t rows = linear.size(-2), kb = linear.size(-1);
  Shape out_shape = linear.shape;
  out_shape[linear.rank() - 2] = scale_padded_rows(layout, rows);
  out_shape[linear.rank() - 1] = scale_padded_cols(layout, kb);
  Tensor out(linear.dtype, out_shape);
  swizzle_scales(linear, layout, out);
  return out;
}

Tensor unswizzle_block_scales(const TensorView& swizzled, std::int64_t rows,
                              std::int64_t scale_cols, ScaleLayout layout) {
  check_host(swizzled, "unswizzle_block_scales", "swizzled", 2);
  Shape out_shape = swizzled.shape;
  out_shape[swizzled.rank() - 2] = rows;
  out_shape[swizzled.rank() - 1] = scale_cols;
  Tensor out(swizzled.dtype, out_shape);
  unswizzle_scales(swizzled, layout, rows, scale_cols, out);
  return out;
}

std::int64_t align_up(std::int64_t n, std::int64_t alignment) {
  if (alignment < 1) throw_arg_error("align_up", "alignment", ">= 1", alignment);
  if (n < 0) throw_arg_error("align_up", "n", ">= 0", n);
  return (n + alignment - 1) / alignment * alignment;
}

namespace {

// Copies the overlapping [rows, cols] corner of the last two dims from `t` into a zeroed `out`.
Tensor resize_last2(const TensorView& t, std::int64_t rows, std::int64_t cols) {
  Shape s = t.shape;
  const int r = t.rank();
  const std::int64_t in_rows = s[r - 2], in_cols = s[r - 1];
  s[r - 2] = rows;
  s[r - 1] = cols;
  Tensor out = Tensor::zeros(t.dtype, s);
  std::int64_t batch = 1;
  for (int d = 0; d < r - 2; ++d) batch *= t.shape[d];
  const std::size_t es = dtype_size(t.dtype);
  const std::int64_t cr = std::min(rows, in_rows), cc = std::min(cols, in_cols);
  const auto* in = static_cast<const unsigned char*>(t.data);
  auto* o = static_cast<unsigned char*>(out.data());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < cr; ++i)
      std::memcpy(o + static_cast<std::size_t>((b * rows + i) * cols) * es,
                  in + static_cast<std::size_t>((b * in_rows + i) * in_cols) * es,
                  static_cast<std::size_t>(cc) * es);
  return out;
}

}  // namespace

Tensor pad_rows_cols(const TensorView& t, std::int64_t rows_to, std::int64_t cols_to) {
  check_host(t, "pad_rows_cols", "t", 2);
  const std::int64_t rows = t.size(-2), cols = t.size(-1);
  MOEKIT_CHECK_ARG(rows_to >= rows, "rows_to", ">= rows " + std::to_string(rows), rows_to);
  MOEKIT_CHECK_ARG(cols_to >= cols, "cols_to", ">= cols " + std::to_string(cols), cols_to);
  return resize_last2(t, rows_to, cols_to);
}

Tensor crop_rows_cols(const TensorView& t, std::int64_t rows, std::int64_t cols) {
  check_host(t, "crop_rows_cols", "t", 2);
  MOEKIT_CHECK_ARG(rows >= 0 && rows <= t.size(-2), "rows",
                   "in [0, " + std::to_string(t.size(-2)) + "]", rows);
  MOEKIT_CHECK_ARG(cols >= 0 && cols <= t.size(-1), "cols",
                   "in [0, " + std::to_string(t.size(-1)) + "]", cols);
  return resize_last2(t, rows, cols);
}

Tensor pad_gate_up_rows(const TensorView& t, std::int64_t i_to) {
  const std::int64_t i = even_rows(t, "pad_gate_up_rows");
  MOEKIT_CHECK_ARG(i_to >= i, "i_to", ">= I " + std::to_string(i), i_to);
  std::vector<std::int64_t> src(static_cast<std::size_t>(2 * i_to), -1);
  for (std::int64_t r = 0; r < i; ++r) {
    src[static_cast<std::size_t>(r)] = r;
    src[static_cast<std::size_t>(i_to + r)] = i + r;
  }
  return gather_rows(t, src);
}

Tensor crop_gate_up_rows(const TensorView& t, std::int64_t i) {
  const std::int64_t i_from = even_rows(t, "crop_gate_up_rows");
  MOEKIT_CHECK_ARG(i >= 0 && i <= i_from, "i", "in [0, " + std::to_string(i_from) + "]", i);
  std::vector<std::int64_t> src(static_cast<std::size_t>(2 * i));
  for (std::int64_t r = 0; r < i; ++r) {
    src[static_cast<std::size_t>(r)] = r;
    src[static_cast<std::size_t>(i + r)] = i_from + r;
  }
  return gather_rows(t, src);
}

namespace {

// Values of a [E] or [E, 2] (gate, up) f32 scale tensor.
struct ScaleTable {
  std::int64_t experts = 0;
  int parts = 1;  // 2 for [E, 2]
  const float* v = nullptr;
  float at(std::int64_t e, int p) const { return v[e * parts + p]; }
};

ScaleTable read_scales(const TensorView& t, const char* name) {
  check_host(t, "fold_scales", name, 1);
  MOEKIT_CHECK_ARG(t.dtype == DType::kF32, std::string(name) + " dtype", "f32",
                   dtype_name(t.dtype));
  MOEKIT_CHECK_ARG(t.rank() == 1 || (t.rank() == 2 && t.shape[1] == 2),
                   std::string(name) + " shape", "[E] or [E, 2] (gate, up)", t.shape.str());
  MOEKIT_CHECK_ARG(t.shape[0] >= 1, std::string(name) + " shape", "[E >= 1, ...]", t.shape.str());
  return {t.shape[0], t.rank() == 2 ? 2 : 1, t.ptr<const float>()};
}

std::string where_of(const char* name, std::int64_t e, int part, int parts) {
  std::string s = std::string(name) + "[expert " + std::to_string(e);
  if (parts == 2) s += part == 0 ? ", gate" : ", up";
  return s + "]";
}

// The one input scale of a GEMM: every expert (and gate/up) must agree.
float common_input_scale(const TensorView& t, const char* name) {
  const ScaleTable s = read_scales(t, name);
  const float first = s.at(0, 0);
  for (std::int64_t e = 0; e < s.experts; ++e) {
    for (int p = 0; p < s.parts; ++p) {
      const float v = s.at(e, p);
      if (!(v == first)) {
        MOEKIT_FAIL("fold_scales: ", where_of(name, e, p, s.parts), " = ", v, " differs from ",
                    where_of(name, 0, 0, s.parts), " = ", first,
                    ": the fused kernels quantize the GEMM input once, with ONE input scale for "
                    "all experts and for gate and up");
      }
    }
  }
  MOEKIT_CHECK_ARG(first > 0.0f && first < 3.4e38f, name, "a finite positive scale", first);
  return first;
}

// Per-expert weight scale; gate and up must agree (one alpha per expert for the fused w13 GEMM).
std::vector<float> per_expert_weight_scale(const TensorView& t, const char* name) {
  const ScaleTable s = read_scales(t, name);
  std::vector<float> out(static_cast<std::size_t>(s.experts));
  for (std::int64_t e = 0; e < s.experts; ++e) {
    if (s.parts == 2 && !(s.at(e, 0) == s.at(e, 1))) {
      MOEKIT_FAIL("fold_scales: ", where_of(name, e, 0, 2), " = ", s.at(e, 0), " differs from ",
                  where_of(name, e, 1, 2), " = ", s.at(e, 1),
                  ": gate and up share one GEMM, hence one global weight scale (requantize one of "
                  "them to the other's scale)");
    }
    out[static_cast<std::size_t>(e)] = s.at(e, 0);
  }
  return out;
}

void fold_one(const TensorView& w_scale_2, const TensorView& a_scale, const char* w_name,
              const char* a_name, Tensor& alpha, Tensor& gscale) {
  const std::vector<float> w = per_expert_weight_scale(w_scale_2, w_name);
  const float a = common_input_scale(a_scale, a_name);
  MOEKIT_CHECK_ARG(a_scale.shape[0] == static_cast<std::int64_t>(w.size()),
                   std::string(a_name) + " experts", w.size(), a_scale.shape[0]);
  alpha = Tensor(DType::kF32, Shape{static_cast<std::int64_t>(w.size())});
  for (std::size_t e = 0; e < w.size(); ++e) alpha.ptr<float>()[e] = w[e] * a;
  gscale = Tensor(DType::kF32, Shape{1});
  gscale.ptr<float>()[0] = 1.0f / a;
}

}  // namespace

FoldedScales fold_scales(const TensorView& w13_scale_2, const TensorView& a13_scale,
                         const TensorView& w2_scale_2, const TensorView& a2_scale) {
  FoldedScales f;
  fold_one(w13_scale_2, a13_scale, "w13_scale_2", "a13_scale", f.g1_alpha, f.a1_gscale);
  if (w2_scale_2.defined() || a2_scale.defined())
    fold_one(w2_scale_2, a2_scale, "w2_scale_2", "a2_scale", f.g2_alpha, f.a2_gscale);
  return f;
}

UnfoldedScales unfold_scales(const FoldedScales& f) {
  auto unfold = [](const Tensor& alpha, const Tensor& gscale, Tensor& w, Tensor& a) {
    if (!alpha.defined()) return;
    const std::int64_t e = alpha.numel();
    const float input = 1.0f / gscale.ptr<const float>()[0];
    w = Tensor(DType::kF32, Shape{e});
    a = Tensor(DType::kF32, Shape{e});
    for (std::int64_t i = 0; i < e; ++i) {
      a.ptr<float>()[i] = input;
      w.ptr<float>()[i] = alpha.ptr<const float>()[i] / input;
    }
  };
  UnfoldedScales u;
  unfold(f.g1_alpha, f.a1_gscale, u.w13_scale_2, u.a13_scale);
  unfold(f.g2_alpha, f.a2_gscale, u.w2_scale_2, u.a2_scale);
  return u;
}

}  // namespace moekit
