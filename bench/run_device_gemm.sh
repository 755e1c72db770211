#!/usr/bin/env bash
# One device call for the bf16 / fp8-block grouped GEMM work: GPU tests, compute-sanitizer
# memcheck on small shapes, then `moekit bench`. Binaries are built on the workstation and carried
# in .devbin-gemm/ (moekit, moekit_gpu_tests, commit). Logs and JSON go to $OUT.
#   bench/run_device_gemm.sh "<presets>" "<tokens>" [json name]
set -uo pipefail
B=${MOEKIT_DEVBIN:-.devbin-gemm}
OUT=${OUT:-/tmp/moekit_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
PRESETS=${1:-deepseek-v3,mixtral-8x7b}
TOKENS=${2:-1,8,64,512,4096}
JSON=${3:-layer_$(date -u +%Y%m%d)_bf16_fp8_block.json}
export MOEKIT_COMMIT=$(cat "$B/commit" 2>/dev/null || echo unknown)
export MOEKIT_BENCH_CLOCKS="$(nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw --format=csv,noheader 2>&1)"
nvidia-smi > "$OUT/nvidia_smi.txt" 2>&1
echo "== tests"
"$B/moekit_gpu_tests" --gtest_filter='*GroupedGemm*:SiluAndMul*:ExpertChain*' 2>&1 | tee "$OUT/tests.log" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |tests ran|rel_l2|Failure|error" | head -60
echo "== memcheck"
compute-sanitizer --tool memcheck --error-exitcode 3 "$B/moekit_gpu_tests" \
  --gtest_filter='*GroupedGemm.EmptyExpertsAndPartialTiles/*:*GroupedGemm.SingleRow/*:*GroupedGemm.NoRowsLeavesOutputUntouched/*:*GroupedGemm.GraphReplayFollowsDeviceOffsets/*:SiluAndMul.*:ExpertChain.*' \
  > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
echo "== bench"
"$B/moekit" bench --preset "$PRESETS" --tokens "$TOKENS" --json "$OUT/$JSON" 2>&1 | tee "$OUT/bench.log"
rc=$?
if [ $rc -ne 0 ]; then  # keep whatever works: bf16 alone
  echo "== bench rc=$rc; retrying bf16 alone"
  "$B/moekit" bench --preset "$PRESETS" --tokens "$TOKENS" --quant bf16 --json "$OUT/bf16_only_$JSON" 2>&1 | tee "$OUT/bench_bf16.log"
fi
# Optional: the same presets with each GEMM kernel config forced (to check the kAuto rule).
if [ -n "${VARIANT_PRESETS:-}" ]; then
  for cfg in wide narrow; do
    echo "== bench, MOEKIT_GROUPED_GEMM_CONFIG=$cfg"
    MOEKIT_GROUPED_GEMM_CONFIG=$cfg "$B/moekit" bench --preset "$VARIANT_PRESETS" --tokens "$TOKENS" \
      --json "$OUT/${JSON%.json}_$cfg.json" >> "$OUT/bench_variants.log" 2>&1
    echo "rc=$?"
  done
  grep -E "^(deepseek|mixtral|qwen|kimi)" "$OUT/bench_variants.log" | awk '{print $1, $2, $3, $5, $12, $NF}'
fi
