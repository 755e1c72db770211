// Internal: small device kernels of the CUDA PrepareFinalize (plain C++ declarations; launched
// asynchronously on `stream`).
#pragma once

#include <cstdint>

#include "moekit/core/tensor.hpp"

namespace moekit::cuda {

// out[t, c] = float(x[t, c]) * w[t * k] (f32, RN; the Llama4 weight-on-input scaling, k == 1).
void scale_rows_by_weight(const TensorView& x, const TensorView& topk_weights,
                          const TensorView& out, StreamHandle stream);
// rows[a] = a for a in [0, n): the source rows of a contiguous [M, k, H] expert output.
void iota_rows(const TensorView& rows, StreamHandle stream);
// output = src as output's dtype (f32 <-> bf16 RN-even, or a plain copy), [M, H] contiguous.
void convert_rows(const TensorView& src, const TensorView& output, StreamHandle stream);

}  // namespace moekit::cuda
