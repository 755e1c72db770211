#!/bin/bash
# One device call for the wgmma tile: GPU tests, compute-sanitizer (memcheck, racecheck) on small
# cases, the GEMM-level wgmma sweep (variants vs large vs cuBLAS bf16) and the layer benchmark at
# M = 512 / 4096. Logs and JSON under $OUT, a short table last.
# Usage (device, repo root): bash bench/w4a16/run_wgmma_device.sh [nolayer]
set -u
B=.devbin-w4
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/w4out}; mkdir -p "$OUT"
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$OUT/summary.txt" 2>&1
timeout 55 $B/w4a16_tests > "$OUT/tests.log" 2>&1; stamp "tests rc=$?"
grep -E "^\[  (FAILED|PASSED) |FAILED TEST|Failure|error|seed" "$OUT/tests.log" | head -20 | tee -a "$OUT/summary.txt"
timeout 45 compute-sanitizer --tool memcheck --leak-check no $B/w4a16_tests \
  --gtest_filter='*Dequant*:*Wgmma*:*All/W4A16Gemm.*/3:*All/W4A16Gemm.*/8:*All/W4A16Gemm.*/30' \
  > "$OUT/memcheck.log" 2>&1; stamp "memcheck rc=$?"
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log" | tail -3 | tee -a "$OUT/summary.txt"
timeout 25 compute-sanitizer --tool racecheck $B/w4a16_tests --gtest_filter='*All/W4A16Gemm.*/9' \
  > "$OUT/racecheck.log" 2>&1; stamp "racecheck rc=$?"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/racecheck.log" | tail -3 | tee -a "$OUT/summary.txt"
timeout 75 $B/w4a16_wgmma_sweep "$OUT/wgmma_sweep.json" > "$OUT/sweep.log" 2>&1; stamp "sweep rc=$?"
if [ "${1:-}" != "nolayer" ]; then
  timeout 70 $B/w4a16_bench "$OUT/w4a16_bench.json" prefill > "$OUT/bench.log" 2>&1; stamp "bench rc=$?"
fi
cat "$OUT/sweep.log"
grep -E "device|deepseek|mixtral" "$OUT/bench.log" 2>/dev/null | grep -v "mid32" | head -40
cat "$OUT/summary.txt"
