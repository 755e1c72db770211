#!/usr/bin/env bash
# A short device check of the FP4 quantize kernels (binaries prebuilt into .devbin-lead/): the FP4
# benchmark through the row-group kernel (forced) and kAuto, the quantize suites, racecheck and
# synccheck of the row-group kernel's small suites; logs under $OUT.
set -u
B=${MOEKIT_DEVBIN:-.devbin-lead}
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for k in rows auto; do
  MOEKIT_QUANT_FP4_KERNEL=$k timeout 60 $B/moekit_kernel_bench --filter fp4 --out "$OUT/quant_$k.json" > "$OUT/bench_$k.log" 2>&1
  echo "== $k rc=$?"; grep -E "^(nvfp4|mxfp4)" "$OUT/bench_$k.log" | grep -E " (1024|2048|4096|4682|8192|16384) "
done
grep -h "copy bandwidth" "$OUT"/bench_*.log
timeout 90 $B/moekit_gpu_tests --gtest_filter='FastCodecs.*:*QuantizeCuda*:*ActivationQuantize*' > "$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests \
    --gtest_filter='QuantizeCudaStatic.*:QuantizeCudaSpecials.*:QuantizeCudaFp4Rows.*' > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep SUMMARY "$OUT/$tool.log")"
done
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
