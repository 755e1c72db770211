#!/bin/bash
# One device call: tests, compute-sanitizer, variant sweep, benchmark sweep. Logs under $OUT.
# Usage (device, repo root): bash bench/w4a16/run_device.sh [quick]
set -u
B=.devbin-w4
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/w4out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$OUT/smi.txt" 2>&1
$B/w4a16_tests > "$OUT/tests.log" 2>&1; echo "tests rc=$?" | tee "$OUT/summary.txt"
grep -E "^\[  (FAILED|PASSED) |FAILED TEST|Failure|error" "$OUT/tests.log" | head -20 | tee -a "$OUT/summary.txt"
timeout 150 compute-sanitizer --tool memcheck --leak-check no $B/w4a16_tests \
  --gtest_filter='*Dequant*:*Fp4Linear*:*All/W4A16Gemm.*/3:*All/W4A16Gemm.*/9:*All/W4A16Gemm.*/14:*All/W4A16Gemm.*/15:*All/W4A16Gemm.*/30' \
  > "$OUT/memcheck.log" 2>&1; echo "memcheck rc=$?" | tee -a "$OUT/summary.txt"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -3 | tee -a "$OUT/summary.txt"
timeout 100 compute-sanitizer --tool racecheck $B/w4a16_tests --gtest_filter='*All/W4A16Gemm.*/5:*All/W4A16Gemm.*/31' \
  > "$OUT/racecheck.log" 2>&1; echo "racecheck rc=$?" | tee -a "$OUT/summary.txt"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -3 | tee -a "$OUT/summary.txt"
if [ -x $B/w4a16_variants ] && [ "${1:-}" != "quick" ]; then
  timeout 150 $B/w4a16_variants > "$OUT/variants.log" 2>&1; echo "variants rc=$?" | tee -a "$OUT/summary.txt"
fi
timeout 200 $B/w4a16_bench "$OUT/w4a16_bench.json" ${1:-} > "$OUT/bench.log" 2>&1; echo "bench rc=$?" | tee -a "$OUT/summary.txt"
cat "$OUT/variants.log" 2>/dev/null
grep -E "auto|device" "$OUT/bench.log"
cat "$OUT/summary.txt"
