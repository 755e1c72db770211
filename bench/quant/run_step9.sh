#!/usr/bin/env bash
# Device check of FP4 quantize step 9 (binaries prebuilt into .devbin-lead/): the kernel benchmark
# (every quantize op, kAuto), the quantize suites, memcheck / racecheck / synccheck of the small
# suites; logs under $OUT, a short table last.
set -u
B=${MOEKIT_DEVBIN:-.devbin-lead}
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
timeout 120 $B/moekit_kernel_bench --out "$OUT/quant_auto.json" > "$OUT/bench_auto.log" 2>&1
echo "bench rc=$?"
timeout 150 $B/moekit_gpu_tests --gtest_filter='FastCodecs.*:*QuantizeCuda*:*ActivationQuantize*:*Dequantize*' > "$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests \
    --gtest_filter='QuantizeCudaStatic.*:QuantizeCudaSpecials.*:QuantizeCudaFp4Rows.*:FastCodecs.E2m1TableComputed' > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep SUMMARY "$OUT/$tool.log")"
done
grep -h "copy bandwidth" "$OUT/bench_auto.log"
grep -E "^(nvfp4|mxfp4|mxfp8|fp8)" "$OUT/bench_auto.log" | grep -E " (528|1024|4682|8192|16384) "
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
