#!/usr/bin/env bash
# One device call for the bf16 / fp8-block grouped GEMM work: GPU tests, compute-sanitizer
# memcheck on small shapes, then `moekit bench` runs. Binaries are built on the workstation and
# carried in .devbin-gemm/ (moekit, moekit_gpu_tests, commit). Logs and JSON go to $OUT.
#   bench/run_device_gemm.sh <plan file> [time budget s, default 190]
# Plan: one bench run per line, "label;MOEKIT_GROUPED_GEMM_CONFIG;presets;quants;tokens;flags"
# (config "" = kAuto; e.g. "bf16:swap_wide,fp8_block:swap_wide"; flags e.g. "--no-baseline
# --reps 15"); '#' lines are skipped. A run that would start after the budget is skipped (said so).
set -uo pipefail
B=${MOEKIT_DEVBIN:-.devbin-gemm}
OUT=${OUT:-/tmp/moekit_out}
PLAN=${1:?plan file}
BUDGET=${2:-190}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export MOEKIT_COMMIT=$(cat "$B/commit" 2>/dev/null || echo unknown)
export MOEKIT_BENCH_CLOCKS="$(nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw --format=csv,noheader 2>&1)"
nvidia-smi > "$OUT/nvidia_smi.txt" 2>&1
DAY=$(date -u +%Y%m%d)

if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== tests ($SECONDS s)"
  timeout 60 "$B/moekit_gpu_tests" --gtest_filter='*GroupedGemm*:SiluAndMul*:ExpertChain*' \
    > "$OUT/tests.log" 2>&1
  echo "tests rc=$? $(grep -E '^\[  PASSED|^\[  FAILED|tests ran' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|rel L2" "$OUT/tests.log" | head -20
  echo "== memcheck ($SECONDS s)"
  timeout 50 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/moekit_gpu_tests" \
    --gtest_filter='*GroupedGemm.SingleRow/*:*GroupedGemm.RowsAcrossSwapTilesStrided/*:*GroupedGemm.NoRowsLeavesOutputUntouched/*' \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

n=0
while IFS=';' read -r label cfg presets quants tokens flags; do
  [ -z "$label" ] || [ "${label:0:1}" = "#" ] && continue
  n=$((n + 1))
  if [ "$SECONDS" -ge "$BUDGET" ]; then echo "== SKIPPED (time budget) $label"; continue; fi
  json="$OUT/layer_${DAY}_bf16_fp8_${label}.json"
  echo "== bench $label cfg='$cfg' ($SECONDS s)"
  # shellcheck disable=SC2086
  MOEKIT_GROUPED_GEMM_CONFIG="$cfg" timeout $((BUDGET + 5 - SECONDS)) "$B/moekit" bench \
    --preset "$presets" --quant "$quants" --tokens "$tokens" --json "$json" $flags \
    > "$OUT/bench_${label}.log" 2>&1
  echo "rc=$?"
  # label preset quant tokens time_us TFLOP/s cublas_us speedup (columns of the bench table)
  grep -E "^(deepseek|mixtral|qwen|kimi)" "$OUT/bench_${label}.log" |
    awk -v l="$label" '{printf "%-12s %-15s %-9s %5s %9s %7s %9s %6s\n", l, $1, $2, $3, $5, $7, $11, $12}'
done < "$PLAN"
echo "== done ($SECONDS s)"
