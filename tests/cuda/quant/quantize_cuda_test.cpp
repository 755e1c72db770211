// The CUDA quantize / dequantize backend against the CPU reference, byte for byte: every scheme,
// layout, rule and input dtype; M in {0, 1, 3, 127, 128, 129}; Kb in {3, 4, 5} (padding);
// batched inputs; computed and static per-tensor scales. Outputs are poisoned with two different
// bytes before two runs: both must equal the reference (every byte written, runs bitwise equal).
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/quant/device_test_util.hpp"
#include "cuda/quant/quantize_cuda.hpp"
#include "moekit/quant/codecs.hpp"
#include "moekit/quant/quantize.hpp"

namespace moekit {
namespace {

using cuda_test::bytes_equal;
using cuda_test::poison;
using cuda_test::to_device;

// Host input [shape] of `dtype` with per-block character: zero blocks, -0, tiny blocks, exact
// e2m1 tie points on power-of-two scales, and values spread over many binades.
Tensor make_input(DType dtype, const Shape& shape, std::mt19937_64& rng) {
  const std::int64_t n = shape.numel();
  std::vector<float> v(static_cast<std::size_t>(n));
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
  std::uniform_int_distribution<int> kind(0, 19), pick(0, 7), ex(-20, 20);
  for (std::int64_t b = 0; b < n; b += 16) {
    const int k = kind(rng);
    const int e = ex(rng);
    for (std::int64_t i = b; i < std::min(n, b + 16); ++i) {
      float x;
      if (k == 0) {
        x = (i % 3 == 0) ? -0.0f : 0.0f;
      } else if (k == 1) {
        x = std::ldexp(cuda_test::spread_value(rng), -120);
      } else if (k <= 4) {
        x = std::ldexp(ties[pick(rng)], e) * ((i & 1) ? -1.0f : 1.0f);
        if (i == b) x = std::ldexp(6.0f, e);
      } else {
        x = std::ldexp(cuda_test::spread_value(rng), e / 4);
      }
      v[static_cast<std::size_t>(i)] = x;
    }
  }
  Tensor t(dtype, shape);
  for (std::int64_t i = 0; i < n; ++i) {
    float x = v[static_cast<std::size_t>(i)];
    // Keep f16 finite (max 65504): an Inf input makes scales Inf and dequantized values NaN,
    // whose payload bits are outside the bit-exact contract.
    if (dtype == DType::kF16 && std::fabs(x) > 60000.0f) x = std::copysign(60000.0f, x);
    if (dtype == DType::kF32) t.ptr<float>()[i] = x;
    if (dtype == DType::kBF16) t.ptr<std::uint16_t>()[i] = float_to_bf16(x);
    if (dtype == DType::kF16) t.ptr<std::uint16_t>()[i] = float_to_f16(x);
  }
  return t;
}

struct DeviceQuant {
  Tensor values, scales, global_scale;
  QuantizedView view(const QuantConfig& c) const {
    QuantizedView v;
    v.values = values.view();
    if (scales.defined()) v.scales = scales.view();
    if (global_scale.defined()) v.global_scale = global_scale.view();
    v.config = c;
    return v;
  }
};

DeviceQuant alloc_device(const Shape& x_shape, const QuantConfig& c) {
  const QuantShapes s = infer_quant_shapes(x_shape, c);
  DeviceQuant d;
  d.values = Tensor(s.value_dtype, s.values, Device::cuda());
  if (s.scales.rank() > 0) d.scales = Tensor(s.scale_dtype, s.scales, Device::cuda());
  if (s.has_global_scale) d.global_scale = Tensor(DType::kF32, s.global_scale, Device::cuda());
  return d;
}

// The FP4 schemes of a 2-byte input have two kernels (cuda::Fp4QuantizeKernel): check_case runs
// both, forced, whatever size it is given. Restores the size-based choice on exit.
struct Fp4KernelScope {
  explicit Fp4KernelScope(cuda::Fp4QuantizeKernel k) { cuda::set_fp4_quantize_kernel(k); }
  ~Fp4KernelScope() { cuda::set_fp4_quantize_kernel(cuda::Fp4QuantizeKernel::kAuto); }
};

std::vector<cuda::Fp4QuantizeKernel> kernels_for(const QuantConfig& c, DType dtype) {
  const bool fp4 = c.scheme == QuantScheme::kNVFP4 || c.scheme == QuantScheme::kNVFP4PerToken ||
                   c.scheme == QuantScheme::kMXFP4;
  if (fp4 && (dtype == DType::kBF16 || dtype == DType::kF16))
    return {cuda::Fp4QuantizeKernel::kRows, cuda::Fp4QuantizeKernel::kChunks};
  return {cuda::Fp4QuantizeKernel::kAuto};
}

const char* kernel_name(cuda::Fp4QuantizeKernel k) {
  return k == cuda::Fp4QuantizeKernel::kRows ? " fp4-rows-kernel"
         : k == cuda::Fp4QuantizeKernel::kChunks ? " fp4-chunk-kernel" : "";
}

void check_case(const QuantConfig& c, DType dtype, const Shape& shape, bool with_static,
                std::mt19937_64& rng) {
  SCOPED_TRACE(c.str() + " " + std::string(dtype_name(dtype)) + shape.str() +
               (with_static ? " static-scale" : ""));
  const Tensor x = make_input(dtype, shape, rng);
  const std::int64_t batch = shape.rank() == 3 ? shape[0] : 1;
  Tensor static_h, static_d;
  if (with_static) {
    static_h = Tensor(DType::kF32, Shape{batch});
    std::uniform_real_distribution<float> u(0.5f, 4.0f);
    for (std::int64_t b = 0; b < batch; ++b) static_h.ptr<float>()[b] = u(rng);
    static_d = to_device(static_h);
  }
  const QuantizedTensor ref = quantize(x, c, with_static ? static_h.view() : TensorView{});
  const Tensor x_d = to_device(x);
  const DeviceQuant q = alloc_device(shape, c);
  for (const cuda::Fp4QuantizeKernel kernel : kernels_for(c, dtype)) {
    SCOPED_TRACE(kernel_name(kernel));
    const Fp4KernelScope scope(kernel);
    for (int byte : {0xA5, 0x5A}) {
      poison(q.values, byte);
      poison(q.scales, byte);
      poison(q.global_scale, byte);
      quantize(x_d, c, q.view(c), QuantBackend::kCuda, with_static ? static_d.view() : TensorView{});
      cuda_test::sync();
      EXPECT_TRUE(bytes_equal(ref.values, q.values, "values"));
      if (ref.scales.defined()) {
        EXPECT_TRUE(bytes_equal(ref.scales, q.scales, "scales"));
      }
      if (ref.global_scale.defined()) {
        EXPECT_TRUE(bytes_equal(ref.global_scale, q.global_scale, "global_scale"));
      }
    }
  }
  // Dequantize the reference's codes on both backends.
  const Tensor ref_deq = dequantize(ref.view());
  DeviceQuant r;
  r.values = to_device(ref.values);
  if (ref.scales.defined()) r.scales = to_device(ref.scales);
  if (ref.global_scale.defined()) r.global_scale = to_device(ref.global_scale);
  Tensor out_d(DType::kF32, shape, Device::cuda());
  poison(out_d, 0xA5);
  dequantize(r.view(c), out_d, QuantBackend::kCuda);
  cuda_test::sync();
  EXPECT_TRUE(bytes_equal(ref_deq, out_d, "dequantized"));
}

std::vector<Shape> shapes_for(QuantScheme s) {
  const int sfv = scale_block_size(s);
  std::vector<std::int64_t> ks;
  if (has_block_scales(s)) {
    ks = {3LL * sfv, 4LL * sfv, 5LL * sfv};
  } else {
    ks = {7, 200, 384};  // K % 8 != 0 (scalar path), K % 128 != 0, multiple of 128
  }
  std::vector<Shape> out;
  for (std::int64_t m : {0, 1, 3, 127, 128, 129})
    for (std::int64_t k : ks) out.push_back(Shape{m, k});
  out.push_back(Shape{2, 65, ks[1]});
  out.push_back(Shape{129, 7168});
  // The FP4 row-group kernel's limits (quantize_fp4_rows.cuh): K = 8192 is its largest row (512
  // units), K = 8704 falls back to the chunk / row kernels; 1100 rows make its persistent CTAs
  // take several rows each.
  out.push_back(Shape{37, 8192});
  out.push_back(Shape{3, 8704});
  out.push_back(Shape{1100, 2048});
  // Its warps' unit counts: K = 2880 (180 units) and 4608 (288) on 256-thread groups and
  // K = 6400 (400) on 224-thread groups have warps with fewer units and lanes past the row end
  // (K = 2048 / 7168 / 8192 fill theirs exactly).
  out.push_back(Shape{67, 2880});
  out.push_back(Shape{2, 9, 4608});
  out.push_back(Shape{67, 6400});
  return out;
}

std::vector<QuantConfig> all_configs() {
  std::vector<QuantConfig> cs;
  for (QuantScheme s : {QuantScheme::kBF16, QuantScheme::kFP8PerTensor, QuantScheme::kFP8PerToken,
                        QuantScheme::kFP8Block1x128, QuantScheme::kFP8Block128x128,
                        QuantScheme::kMXFP8, QuantScheme::kNVFP4, QuantScheme::kNVFP4PerToken,
                        QuantScheme::kMXFP4}) {
    const std::vector<ScaleLayout> layouts =
        has_block_scales(s) ? std::vector<ScaleLayout>{ScaleLayout::kLinear,
                                                       ScaleLayout::kSwizzled128x4,
                                                       ScaleLayout::kSwizzled8x4}
                            : std::vector<ScaleLayout>{ScaleLayout::kLinear};
    const std::vector<ScaleRule> rules = is_mx(s)
                                             ? std::vector<ScaleRule>{ScaleRule::kRceil, ScaleRule::kFloor}
                                             : std::vector<ScaleRule>{ScaleRule::kRceil};
    for (ScaleLayout l : layouts)
      for (ScaleRule r : rules) cs.push_back(QuantConfig{s, l, r});
  }
  return cs;
}

class QuantizeCuda : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizeCuda, MatchesReferenceByteForByte) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed ^ static_cast<std::uint64_t>(GetParam()));
  for (const QuantConfig& c : all_configs()) {
    for (const Shape& shape : shapes_for(c.scheme)) check_case(c, GetParam(), shape, false, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, QuantizeCuda,
                         ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(QuantizeCudaStatic, StaticScalesMatchReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed + 1);
  for (ScaleLayout l : {ScaleLayout::kLinear, ScaleLayout::kSwizzled128x4}) {
    check_case(QuantConfig{QuantScheme::kNVFP4, l, ScaleRule::kRceil}, DType::kBF16, Shape{129, 80},
               true, rng);
    check_case(QuantConfig{QuantScheme::kNVFP4, l, ScaleRule::kRceil}, DType::kF32,
               Shape{3, 33, 64}, true, rng);
  }
  // Static gs through the FP4 row-group kernel (which copies it to the gs output itself), one
  // per matrix of a batch, bf16 and f16, 2 and 4 units per thread.
  check_case(QuantConfig{QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4}, DType::kBF16,
             Shape{3, 33, 4608}, true, rng);
  check_case(QuantConfig{QuantScheme::kNVFP4, ScaleLayout::kLinear}, DType::kF16, Shape{2, 130, 2880},
             true, rng);
  check_case(QuantConfig{QuantScheme::kFP8PerTensor}, DType::kBF16, Shape{127, 200}, true, rng);
}

// A large tensor: the amax pre-pass runs many CTAs and atomics; results must not vary.
TEST(QuantizeCudaLarge, ComputedGlobalScaleIsDeterministic) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed + 2);
  check_case(QuantConfig{QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4}, DType::kBF16,
             Shape{1000, 7168}, false, rng);
  check_case(QuantConfig{QuantScheme::kFP8PerTensor}, DType::kBF16, Shape{1000, 7168}, false, rng);
}

// Many short rows: every row group of the FP4 row-group kernel (quantize_fp4_rows.cuh) streams
// several rows through each of its shared-memory row buffers (refills, barrier phases), with
// every FP4 scheme; small enough for compute-sanitizer (memcheck, racecheck, synccheck).
TEST(QuantizeCudaFp4Rows, StreamsManyRowsPerGroup) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed + 5);
  // check_case runs both FP4 kernels (forced) on every shape.
  for (const QuantConfig& c : {QuantConfig{QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4},
                               QuantConfig{QuantScheme::kNVFP4PerToken, ScaleLayout::kLinear},
                               QuantConfig{QuantScheme::kMXFP4, ScaleLayout::kSwizzled128x4}}) {
    check_case(c, DType::kBF16, Shape{2200, 256}, c.scheme == QuantScheme::kNVFP4, rng);
    check_case(c, DType::kF16, Shape{3, 1500, 64}, false, rng);
  }
}

// Quantizes host x / device x_d with config c on both backends (gs: NVFP4's static global scale)
// and compares the codes and scale bytes (the device outputs poisoned first).
void expect_codes_match(const Tensor& x, const Tensor& x_d, const Tensor& gs, const Tensor& gs_d,
                        const QuantConfig& c) {
  const bool nv = c.scheme == QuantScheme::kNVFP4;
  const QuantizedTensor ref = quantize(x, c, nv ? gs.view() : TensorView{});
  const DeviceQuant q = alloc_device(x.shape(), c);
  for (const cuda::Fp4QuantizeKernel kernel : kernels_for(c, x.dtype())) {
    SCOPED_TRACE(kernel_name(kernel));
    const Fp4KernelScope scope(kernel);
    poison(q.values, 0xA5);
    poison(q.scales, 0xA5);
    poison(q.global_scale, 0xA5);
    quantize(x_d, c, q.view(c), QuantBackend::kCuda, nv ? gs_d.view() : TensorView{});
    cuda_test::sync();
    EXPECT_TRUE(bytes_equal(ref.values, q.values, "values"));
    EXPECT_TRUE(bytes_equal(ref.scales, q.scales, "scales"));
  }
}

// Inf and saturation inputs with a static scale (no NaN: outside the bit-exact contract).
TEST(QuantizeCudaSpecials, InfinitiesSaturateLikeReference) {
  MOEKIT_REQUIRE_GPU();
  Tensor x(DType::kF32, Shape{4, 64});
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {inf, -inf, 1e30f, -1e30f, 0.0f, -0.0f, 1e-40f, -1e-40f, 3.0f, -5.0f};
  for (std::int64_t i = 0; i < x.numel(); ++i) x.ptr<float>()[i] = specials[i % 10];
  Tensor gs(DType::kF32, Shape{1});
  gs.ptr<float>()[0] = 1.0f;
  const Tensor x_d = to_device(x), gs_d = to_device(gs);
  for (const QuantConfig& c :
       {QuantConfig{QuantScheme::kNVFP4}, QuantConfig{QuantScheme::kMXFP4},
        QuantConfig{QuantScheme::kMXFP8}, QuantConfig{QuantScheme::kFP8Block1x128}}) {
    SCOPED_TRACE(c.str());
    expect_codes_match(x, x_d, gs, gs_d, c);
  }
}

// NaN elements (both signs) among ordinary values: codes and scale bytes are defined by the spec
// (block maxima ignore NaN; e2m1(NaN) = 0x7, e4m3(NaN) = 0x7F), so they must match byte for byte.
// On the device, NaN reaches the e2m1 table as the e4m3 cvt's NaN bytes (0x7F / 0xFF).
TEST(QuantizeCudaSpecials, NanElementsEncodeLikeReference) {
  MOEKIT_REQUIRE_GPU();
  const std::uint64_t seed = cuda_test::test_seed();
  MOEKIT_LOG_SEED(seed);
  std::mt19937_64 rng(seed + 3);
  std::uniform_int_distribution<int> pick(0, 15);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    Tensor x(dtype, Shape{5, 256});
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const int p = pick(rng);
      float v = p == 0 ? nan : p == 1 ? -nan : cuda_test::spread_value(rng);
      if (dtype == DType::kF32) {
        x.ptr<float>()[i] = v;
      } else if (dtype == DType::kBF16) {
        x.ptr<std::uint16_t>()[i] = float_to_bf16(v);
      } else {
        if (std::fabs(v) > 60000.0f) v = std::copysign(60000.0f, v);  // keep f16 finite
        x.ptr<std::uint16_t>()[i] = float_to_f16(v);
      }
    }
    Tensor gs(DType::kF32, Shape{1});
    gs.ptr<float>()[0] = 2.0f;
    const Tensor x_d = to_device(x), gs_d = to_device(gs);
    for (const QuantConfig& c :
         {QuantConfig{QuantScheme::kNVFP4, ScaleLayout::kSwizzled128x4},
          QuantConfig{QuantScheme::kNVFP4PerToken}, QuantConfig{QuantScheme::kMXFP4},
          QuantConfig{QuantScheme::kMXFP8}, QuantConfig{QuantScheme::kFP8Block1x128},
          QuantConfig{QuantScheme::kFP8PerToken}}) {
      SCOPED_TRACE(c.str() + " " + std::string(dtype_name(dtype)));
      expect_codes_match(x, x_d, gs, gs_d, c);
    }
  }
}

}  // namespace
}  // namespace moekit
