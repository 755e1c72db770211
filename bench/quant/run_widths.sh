#!/usr/bin/env bash
# The FP4 row-group kernel's two group widths (MOEKIT_QUANT_FP4_ROWS_THREADS=256|224, default by
# K: 224 for 385..448 units): FP4 benchmark through each (forced rows kernel), the quantize suites
# through each (every FP4 shape), racecheck / synccheck of the 224-thread groups. One device call
# part (binaries prebuilt into $1, default .devbin-final); logs under $OUT/widths.
set -u
B=${1:-.devbin-final}
W=${OUT:-/tmp/o}/widths; mkdir -p "$W"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for t in 256 224; do
  MOEKIT_QUANT_FP4_KERNEL=rows MOEKIT_QUANT_FP4_ROWS_THREADS=$t timeout 60 $B/moekit_kernel_bench --filter fp4 \
    --out "$W/quant_rows$t.json" > "$W/bench_rows$t.log" 2>&1
  echo "== bench rows$t rc=$?"; grep -E "^(nvfp4|mxfp4)" "$W/bench_rows$t.log" | grep -E " (2048|4096|4682|8192|16384) "
  MOEKIT_QUANT_FP4_ROWS_THREADS=$t timeout 60 $B/moekit_gpu_tests --gtest_filter='*QuantizeCuda*' > "$W/tests_$t.log" 2>&1
  echo "tests $t rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$W/tests_$t.log" | tr '\n' ' ')"
done
for tool in racecheck synccheck; do
  MOEKIT_QUANT_FP4_ROWS_THREADS=224 timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests \
    --gtest_filter='QuantizeCudaFp4Rows.*:QuantizeCudaStatic.*' > "$W/$tool.log" 2>&1
  echo "$tool 224 rc=$? $(grep SUMMARY "$W/$tool.log")"
done
grep -h "copy bandwidth" "$W"/bench_*.log
