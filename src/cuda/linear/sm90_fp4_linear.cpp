// Dense FP4 linear on SM90 (moekit/linear/fp4_linear.hpp): the W4A16 grouped GEMM with one expert
// and no offsets array; its kernel by the tuning rules for one expert of m rows (the wgmma kernel
// only with a workspace, into which x is put in its K order by the row gather).
#include "cuda/gemm/grouped_gemm.hpp"
#include "cuda/gemm/w4a16/sm90_w4a16_weight_shuffle.hpp"
#include "cuda/permute/permute_kernels.hpp"
#include "cuda/tuning/sm90_tuning.hpp"
#include "moekit/core/error.hpp"
#include "moekit/linear/fp4_linear.hpp"

namespace moekit::linear {

std::string fp4_linear_unsupported_reason(QuantScheme format, std::int64_t n, std::int64_t k) {
  if (format != QuantScheme::kNVFP4 && format != QuantScheme::kMXFP4)
    return "format must be nvfp4 or mxfp4, got " + std::string(scheme_name(format));
  if (n <= 0 || n % 16 != 0) return "n must be a positive multiple of 16, got " + std::to_string(n);
  if (k <= 0 || k % 64 != 0) return "k must be a positive multiple of 64, got " + std::to_string(k);
  return "";
}

void fp4_linear_prepare_weights(QuantScheme format, std::int64_t n, std::int64_t k,
                                const std::uint8_t* codes, const std::uint8_t* scales,
                                std::uint8_t* out_codes, std::uint8_t* out_scales) {
  const std::string why = fp4_linear_unsupported_reason(format, n, k);
  MOEKIT_CHECK(why.empty(), "fp4_linear_prepare_weights: ", why);
  gemm::w4a16_shuffle_weights(format, 1, n, k, false, codes, scales, out_codes, out_scales);
}

std::size_t fp4_linear_workspace_bytes(std::int64_t m, std::int64_t k) {
  return static_cast<std::size_t>(m * k) * 2;
}

void fp4_linear(const Fp4LinearArgs& args) {
  const std::string why = fp4_linear_unsupported_reason(args.format, args.n, args.k);
  MOEKIT_CHECK(why.empty(), "fp4_linear: ", why);
  MOEKIT_CHECK_ARG(args.m >= 0, "m", ">= 0", args.m);
  gemm::GroupedGemmArgs g;
  g.scheme = args.format == QuantScheme::kNVFP4 ? gemm::GemmScheme::kW4A16NVFP4
                                                : gemm::GemmScheme::kW4A16MXFP4;
  g.num_experts = 1;
  g.rows = args.m;
  g.n = args.n;
  g.k = args.k;
  g.expert_offsets = nullptr;  // dense: rows [0, m)
  g.a = args.x;
  g.lda = args.ldx;
  g.w = args.w;
  g.w_scales = args.w_scales;
  g.w_expert_scale = args.alpha;
  g.epilogue.bias = args.bias;
  g.out = args.out;
  g.ldo = args.ldo;
  g.stream = args.stream;
  const bool room = args.workspace != nullptr &&
                    args.workspace_bytes >= fp4_linear_workspace_bytes(args.m, args.k) &&
                    (args.ldx == 0 || args.ldx == args.k);
  // Without room for x in the wgmma K order, the mma.sync kernels read x as is.
  const gemm::GemmConfig config =
      room ? tuning::sm90::gemm_config(g.scheme, 1, args.m, args.n, args.k, false, true)
           : tuning::sm90::w4a16_mma_config(1, args.m, args.n, args.k, false);
  if (config.kernel == gemm::GemmKernel::kWgmma && args.m > 0) {
    cuda::GatherArgs gather;  // x's rows in order (no sorted ids), in the wgmma K order
    gather.src = args.x;
    gather.row_bytes = args.k * 2;
    gather.max_rows = args.m;
    gather.out = args.workspace;
    gather.order = gemm::KOrder::kWgmma;
    cuda::gather_rows(gather, args.stream);
    g.a = args.workspace;
    g.lda = 0;
  }
  gemm::grouped_gemm(g, config);
}

}  // namespace moekit::linear
