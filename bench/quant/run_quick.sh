#!/usr/bin/env bash
# A short device check of the quantize kernels (binaries prebuilt into $MOEKIT_DEVBIN, default
# .devbin-lead/): the benchmark, then the quantize suites and memcheck / racecheck / synccheck of
# the small suites; logs under $OUT.
#   bash bench/quant/run_quick.sh        the FP4 ops through the row-group kernel (forced) and kAuto
#   bash bench/quant/run_quick.sh full   the whole kernel benchmark (every op, routing), kAuto
set -u
B=${MOEKIT_DEVBIN:-.devbin-lead}
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
if [ "${1:-}" = full ]; then
  timeout 120 $B/moekit_kernel_bench --out "$OUT/quant_auto.json" > "$OUT/bench_auto.log" 2>&1
  echo "== full rc=$?"; grep -E "^(nvfp4|mxfp4|mxfp8|fp8)" "$OUT/bench_auto.log" | grep -E " (528|1024|4682|8192|16384) "
else
  for k in rows auto; do
    MOEKIT_QUANT_FP4_KERNEL=$k timeout 60 $B/moekit_kernel_bench --filter fp4 --out "$OUT/quant_$k.json" > "$OUT/bench_$k.log" 2>&1
    echo "== $k rc=$?"; grep -E "^(nvfp4|mxfp4)" "$OUT/bench_$k.log" | grep -E " (1024|2048|4096|4682|8192|16384) "
  done
fi
grep -h "copy bandwidth" "$OUT"/bench_*.log
timeout 150 $B/moekit_gpu_tests --gtest_filter='FastCodecs.*:*QuantizeCuda*:*ActivationQuantize*' > "$OUT/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests.log" | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $B/moekit_gpu_tests \
    --gtest_filter='QuantizeCudaStatic.*:QuantizeCudaSpecials.*:QuantizeCudaFp4Rows.*:FastCodecs.E2m1TableComputed' > "$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep SUMMARY "$OUT/$tool.log")"
done
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)
