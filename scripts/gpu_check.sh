#!/usr/bin/env bash
# The one GPU check command. Builds with CUDA (or takes prebuilt binaries), runs every `gpu` test,
# runs a representative subset under compute-sanitizer memcheck and racecheck, then the kernel
# benchmarks. Logs and JSON go to OUT_DIR; a short summary is printed last.
#
#   scripts/gpu_check.sh OUT_DIR [--bin DIR] [--quick]
#
#   --bin DIR  use DIR/moekit_gpu_tests and DIR/moekit_kernel_bench (built on another machine, e.g.
#              the device machine has no GoogleTest headers) instead of building here.
#   --quick    fewer benchmark sizes.
# Env: BUILD_DIR (default build-gpu), GPU_TEST_FILTER (gtest filter for the full run, default all),
#      MEMCHECK_FILTER / RACECHECK_FILTER (the sanitizer subsets).
# Other GPU engineers: add your benchmark as one more `run_step` line in the benchmark section.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [--bin DIR] [--quick]" >&2
  exit 2
fi
OUT=$1
shift
BIN=""
QUICK=""
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) BIN=$2; shift 2 ;;
    --quick) QUICK=--quick; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
status=0

# run_step NAME LOG COMMAND...: runs, records rc and wall time in the summary.
run_step() {
  local name=$1 log=$2
  shift 2
  local t0=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  printf '%-34s rc=%-3d %4ds  %s\n' "$name" "$rc" "$((SECONDS - t0))" "$(basename "$log")" | tee -a "$SUMMARY"
  [ $rc -eq 0 ] || status=1
  return $rc
}

{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi unavailable"
} >>"$SUMMARY"

if [ -z "$BIN" ]; then
  BUILD_DIR=${BUILD_DIR:-build-gpu}
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEKIT_CUDA=ON >"$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD_DIR" --target moekit_gpu_tests moekit_kernel_bench -j"$(nproc)" >>"$OUT/build.log" 2>&1
  if [ $? -ne 0 ]; then
    echo "build failed (see build.log)" | tee -a "$SUMMARY"
    exit 1
  fi
  TESTS=$BUILD_DIR/tests/moekit_gpu_tests
  BENCH=$BUILD_DIR/bench/moekit_kernel_bench
else
  TESTS=$BIN/moekit_gpu_tests
  BENCH=$BIN/moekit_kernel_bench
fi

# 1. Every gpu test.
run_step "gpu tests" "$OUT/gpu_tests.log" "$TESTS" --gtest_filter="${GPU_TEST_FILTER:-*}" \
  --gtest_output="json:$OUT/gpu_tests.json"

# 2. Sanitizers on a representative subset (every kernel family, small shapes).
MEMCHECK_FILTER=${MEMCHECK_FILTER:-'GatedActivation.*:SiluAndMul.*:Fp4LinearSm90.*:CudaLayer.ExpertMapDropsOtherRanksExperts:PermuteCuda.*:UnpermuteReduceCuda.*:LayerGlueCuda.*:ExpertsGlueCuda.*:RouteCuda.*:QuantizeCudaStatic.*:QuantizeCudaSpecials.*:QuantizeCudaFp4Rows.*:ActivationQuantizeCuda.*:All/W4A8Gemm.*/swiglu_bias:All/W4A8Gemm.*/tile160:All/W4A8Gemm.*/capped_grid:DecodeRouting.*:W4A16Gemm.Wgmma*:*WgmmaEveryTile*:WgmmaGroupedGemm.*:W4A16Gemm.AutoSplitKMatchesUnsplit:Bf16DecodeGemm.KAndNTailsStrided:Bf16DecodeGemm.ClusterSplitK:Bf16DecodeGemm.ManyUnitsPerCta'}
RACECHECK_FILTER=${RACECHECK_FILTER:-'GatedActivation.*:LayerGlueCuda.*:QuantizeCudaSpecials.*:QuantizeCudaFp4Rows.*:All/W4A8Gemm.*/capped_grid:DecodeRouting.*:W4A16Gemm.Wgmma*:*WgmmaEveryTile*:WgmmaGroupedGemm.*:W4A16Gemm.AutoSplitKMatchesUnsplit:Bf16DecodeGemm.ManyUnitsPerCta'}
if command -v compute-sanitizer >/dev/null; then
  run_step "memcheck (subset)" "$OUT/memcheck.log" compute-sanitizer --tool memcheck \
    --error-exitcode 9 "$TESTS" --gtest_filter="$MEMCHECK_FILTER"
  run_step "racecheck (subset)" "$OUT/racecheck.log" compute-sanitizer --tool racecheck \
    --error-exitcode 9 "$TESTS" --gtest_filter="$RACECHECK_FILTER"
else
  echo "compute-sanitizer not found: sanitizer steps skipped" | tee -a "$SUMMARY"
fi

# 3. Benchmarks (JSON next to the logs; the lead copies them into bench/results/).
run_step "kernel bench" "$OUT/kernel_bench.log" "$BENCH" --out "$OUT/kernel_bench.json" $QUICK

echo "---- gpu test failures ----" >>"$SUMMARY"
grep -E '^\[  FAILED  \]' "$OUT/gpu_tests.log" >>"$SUMMARY" 2>/dev/null || true
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT"/memcheck.log "$OUT"/racecheck.log >>"$SUMMARY" 2>/dev/null || true
cat "$SUMMARY" | tail -n 25
exit $status
